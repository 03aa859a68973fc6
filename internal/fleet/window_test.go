package fleet

import (
	"errors"
	"testing"
	"time"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestParseWindowsErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Mon 22:00-04:00", `want "DAYS HH:MM-HH:MM ZONE"`},
		{"Mon 22:00 UTC", "not HH:MM-HH:MM"},
		{"Mo 22:00-04:00 UTC", `unknown weekday "Mo"`},
		{"Mon 25:00-04:00 UTC", `time "25:00"`},
		{"Mon 24:00-04:00 UTC", `time "24:00"`},
		{"Mon 22:60-23:00 UTC", `time "22:60"`},
		{"Mon 22:0-23:00 UTC", `time "22:0"`},
		{"Mon 22:00-22:00 UTC", "same time"},
		{"Mon 22:00-23:00 Mars/Olympus", `unknown time zone "Mars/Olympus"`},
		{"Mon 22:00-23:00 Local", `unknown time zone "Local"`},
		{"Mon 01:00-02:00 UTC; Tue", `want "DAYS`},
	} {
		_, err := ParseWindows(tc.in)
		if err == nil || !errors.Is(err, ErrWindow) || !contains(err.Error(), tc.want) {
			t.Errorf("ParseWindows(%q) = %v, want an ErrWindow containing %q", tc.in, err, tc.want)
		}
	}
	if s, err := ParseWindows(" ; "); err != nil || len(s) != 0 {
		t.Errorf("blank: %v %v", s, err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestParseDays(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []time.Weekday
	}{
		{"Mon-Fri", []time.Weekday{1, 2, 3, 4, 5}},
		{"Fri-Mon", []time.Weekday{5, 6, 0, 1}},
		{"sat,SUN", []time.Weekday{6, 0}},
		{"*", []time.Weekday{0, 1, 2, 3, 4, 5, 6}},
		{"Wed", []time.Weekday{3}},
	} {
		s, err := ParseWindows(tc.in + " 01:00-02:00 UTC")
		if err != nil {
			t.Fatal(err)
		}
		var want [7]bool
		for _, d := range tc.want {
			want[d] = true
		}
		if s[0].Days != want {
			t.Errorf("%s: days %v, want %v", tc.in, s[0].Days, want)
		}
	}
}

func TestScheduleAt(t *testing.T) {
	utc := time.UTC
	berlin := mustLoc(t, "Europe/Berlin")
	ny := mustLoc(t, "America/New_York")
	// 2026-12-01 is a Tuesday.
	for _, tc := range []struct {
		name    string
		windows string
		now     time.Time
		need    time.Duration
		want    WindowVerdict
	}{
		{name: "no windows: always", windows: "", now: time.Date(2026, 12, 1, 12, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{Start: true, Open: true}},
		{name: "inside, fits", windows: "Tue 10:00-14:00 UTC", now: time.Date(2026, 12, 1, 12, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 1, 14, 0, 0, 0, utc)}},
		{name: "ends exactly at close", windows: "Tue 10:00-14:00 UTC", now: time.Date(2026, 12, 1, 13, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 1, 14, 0, 0, 0, utc)}},
		{name: "inside, too short: next week's", windows: "Tue 10:00-14:00 UTC", now: time.Date(2026, 12, 1, 13, 30, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{Open: true, Closes: time.Date(2026, 12, 1, 14, 0, 0, 0, utc), NextOpening: time.Date(2026, 12, 8, 10, 0, 0, 0, utc)}},
		{name: "at opening instant", windows: "Tue 10:00-14:00 UTC", now: time.Date(2026, 12, 1, 10, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 1, 14, 0, 0, 0, utc)}},
		{name: "at closing instant: closed", windows: "Tue 10:00-14:00 UTC", now: time.Date(2026, 12, 1, 14, 0, 0, 0, utc), need: time.Minute,
			want: WindowVerdict{NextOpening: time.Date(2026, 12, 8, 10, 0, 0, 0, utc)}},
		{name: "before, same day", windows: "Mon-Fri 22:00-04:00 UTC", now: time.Date(2026, 12, 1, 12, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{NextOpening: time.Date(2026, 12, 1, 22, 0, 0, 0, utc)}},
		{name: "after midnight in yesterday's window", windows: "Mon 22:00-04:00 UTC", now: time.Date(2026, 12, 1, 2, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 1, 4, 0, 0, 0, utc)}},
		{name: "friday night window, saturday morning", windows: "Fri 22:00-04:00 UTC", now: time.Date(2026, 12, 5, 3, 30, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{Open: true, Closes: time.Date(2026, 12, 5, 4, 0, 0, 0, utc), NextOpening: time.Date(2026, 12, 11, 22, 0, 0, 0, utc)}},
		{name: "adjacent whole days merge", windows: "Tue 00:00-24:00 UTC; Wed 00:00-24:00 UTC", now: time.Date(2026, 12, 1, 23, 0, 0, 0, utc), need: 5 * time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 3, 0, 0, 0, 0, utc)}},
		{name: "time zone: berlin 22:00 is 21:00 UTC in winter", windows: "Tue 22:00-23:00 Europe/Berlin", now: time.Date(2026, 12, 1, 21, 15, 0, 0, utc), need: 30 * time.Minute,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 1, 23, 0, 0, 0, berlin)}},
		{name: "time zone: closed at 22:15 UTC", windows: "Tue 22:00-23:00 Europe/Berlin", now: time.Date(2026, 12, 1, 22, 15, 0, 0, utc), need: 30 * time.Minute,
			want: WindowVerdict{NextOpening: time.Date(2026, 12, 8, 22, 0, 0, 0, berlin)}},
		{name: "weekday in the zone, not UTC", windows: "Wed 00:00-02:00 Europe/Berlin", now: time.Date(2026, 12, 1, 23, 30, 0, 0, utc), need: 30 * time.Minute,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 2, 2, 0, 0, 0, berlin)}},
		// DST: Europe/Berlin springs forward on 2026-03-29 at 02:00 (to 03:00) and
		// falls back on 2026-10-25 at 03:00 (to 02:00).
		{name: "DST spring: 01:00-05:00 lasts 3h", windows: "Sun 01:00-05:00 Europe/Berlin", now: time.Date(2026, 3, 29, 1, 0, 0, 0, berlin), need: 3 * time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 3, 29, 5, 0, 0, 0, berlin)}},
		{name: "DST spring: 3h30 does not fit", windows: "Sun 01:00-05:00 Europe/Berlin", now: time.Date(2026, 3, 29, 1, 0, 0, 0, berlin), need: 210 * time.Minute,
			want: WindowVerdict{Open: true, Closes: time.Date(2026, 3, 29, 5, 0, 0, 0, berlin), NextOpening: time.Date(2026, 4, 5, 1, 0, 0, 0, berlin)}},
		{name: "DST autumn: 01:00-05:00 lasts 5h", windows: "Sun 01:00-05:00 Europe/Berlin", now: time.Date(2026, 10, 25, 1, 0, 0, 0, berlin), need: 5 * time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 10, 25, 5, 0, 0, 0, berlin)}},
		{name: "DST: opening keeps its wall-clock hour (UTC shifts)", windows: "Sat 22:00-23:00 America/New_York", now: time.Date(2026, 10, 31, 12, 0, 0, 0, utc), need: time.Minute,
			want: WindowVerdict{NextOpening: time.Date(2026, 11, 1, 2, 0, 0, 0, utc)}}, // EDT: 22:00 = 02:00 UTC
		{name: "DST: a week later it is EST", windows: "Sat 22:00-23:00 America/New_York", now: time.Date(2026, 11, 7, 12, 0, 0, 0, utc), need: time.Minute,
			want: WindowVerdict{NextOpening: time.Date(2026, 11, 8, 3, 0, 0, 0, utc)}},
		{name: "no opening long enough", windows: "Tue 10:00-11:00 UTC", now: time.Date(2026, 12, 1, 12, 0, 0, 0, utc), need: 2 * time.Hour,
			want: WindowVerdict{}},
		{name: "skips a short opening for a long one", windows: "Wed 10:00-10:30 UTC; Thu 10:00-14:00 UTC", now: time.Date(2026, 12, 1, 12, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{NextOpening: time.Date(2026, 12, 3, 10, 0, 0, 0, utc)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseWindows(tc.windows)
			if err != nil {
				t.Fatal(err)
			}
			got := s.At(tc.now, tc.need)
			if got.Start != tc.want.Start || got.Open != tc.want.Open || !got.Closes.Equal(tc.want.Closes) || !got.NextOpening.Equal(tc.want.NextOpening) {
				t.Errorf("At(%s, %s) = %+v, want %+v", tc.now, tc.need, got, tc.want)
			}
		})
	}
	_ = ny
}

func TestPoolWindows(t *testing.T) {
	policy, err := ParseWindows("Sat 02:00-06:00 UTC")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name           string
		annotation     string
		annotated      bool
		want           int
		fromAnnotation bool
		err            bool
	}{
		{name: "no annotation: the policy's", want: 1},
		{name: "annotation replaces", annotation: "Mon-Fri 22:00-04:00 Europe/Berlin; Sun 00:00-24:00 UTC", annotated: true, want: 2, fromAnnotation: true},
		{name: "empty annotation: always open", annotation: "", annotated: true, want: 0, fromAnnotation: true},
		{name: "invalid annotation", annotation: "Someday 25:00-26:00 Mars/Base", annotated: true, fromAnnotation: true, err: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sched, from, err := PoolWindows(policy, tc.annotation, tc.annotated)
			if (err != nil) != tc.err || from != tc.fromAnnotation || len(sched) != tc.want {
				t.Fatalf("PoolWindows = %v, %v, %v; want %d windows, fromAnnotation %v, error %v", sched, from, err, tc.want, tc.fromAnnotation, tc.err)
			}
		})
	}
}
