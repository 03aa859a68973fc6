package fleet

import (
	"errors"
	"testing"
	"time"
)

func TestParseCronWindowErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"cron 0 22 * * Mon-Fri 6h", `want "cron MIN HOUR DOM MON DOW DURATION ZONE"`},
		{"cron 60 22 * * * 6h UTC", `minute field: "60" is not a value from 0 to 59`},
		{"cron 0 24 * * * 6h UTC", `hour field: "24" is not a value from 0 to 23`},
		{"cron 0 22 0 * * 6h UTC", `day of month field: "0" is not a value from 1 to 31`},
		{"cron 0 22 * 13 * 6h UTC", `month field: "13"`},
		{"cron 0 22 * * 8 6h UTC", `day of week field: "8"`},
		{"cron 0 22 * * Fri-Mon 6h UTC", `range "Fri-Mon" runs backwards`},
		{"cron */0 22 * * * 6h UTC", `step "0" is not a positive number`},
		{"cron 5/10 22 * * * 6h UTC", `step on a single value "5/10"`},
		{"cron 0 22 * * * 30s UTC", `duration "30s" is not between 1m and 24h`},
		{"cron 0 22 * * * 25h UTC", `duration "25h"`},
		{"cron 0 22 * * * six UTC", `duration "six"`},
		{"cron 0 22 * * * 6h Mars/Olympus", `unknown time zone "Mars/Olympus"`},
		{"cron 0 22 * * * 6h Local", `unknown time zone "Local"`},
	} {
		_, err := ParseWindows(tc.in)
		if err == nil || !errors.Is(err, ErrWindow) || !contains(err.Error(), tc.want) {
			t.Errorf("ParseWindows(%q) = %v, want an ErrWindow containing %q", tc.in, err, tc.want)
		}
	}
}

func TestParseCronField(t *testing.T) {
	for _, tc := range []struct {
		in      string
		lo, hi  int
		names   map[string]int
		want    []int
		wantAll bool
	}{
		{in: "*", lo: 0, hi: 5, want: []int{0, 1, 2, 3, 4, 5}, wantAll: true},
		{in: "*/2", lo: 0, hi: 5, want: []int{0, 2, 4}},
		{in: "1-5/2", lo: 0, hi: 9, want: []int{1, 3, 5}},
		{in: "1,3,7", lo: 0, hi: 9, want: []int{1, 3, 7}},
		{in: "mon-fri", lo: 0, hi: 7, names: weekdayNumbers, want: []int{1, 2, 3, 4, 5}},
		{in: "Jan,Dec", lo: 1, hi: 12, names: monthNames, want: []int{1, 12}},
		{in: "7", lo: 0, hi: 7, names: weekdayNumbers, want: []int{7}},
	} {
		var got []int
		all, err := parseCronField(tc.in, tc.lo, tc.hi, tc.names, func(v int) { got = append(got, v) })
		if err != nil || all != tc.wantAll || !equalInts(got, tc.want) {
			t.Errorf("parseCronField(%q) = %v all=%v err=%v, want %v all=%v", tc.in, got, all, err, tc.want, tc.wantAll)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCronScheduleAt(t *testing.T) {
	utc := time.UTC
	berlin := mustLoc(t, "Europe/Berlin")
	// 2026-12-01 is a Tuesday. Europe/Berlin springs forward on 2026-03-29 at
	// 02:00 (to 03:00) and falls back on 2026-10-25 at 03:00 (to 02:00).
	for _, tc := range []struct {
		name    string
		windows string
		now     time.Time
		need    time.Duration
		want    WindowVerdict
	}{
		{name: "weekday nights, inside", windows: "cron 0 22 * * Mon-Fri 6h UTC", now: time.Date(2026, 12, 1, 23, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 2, 4, 0, 0, 0, utc)}},
		{name: "weekday nights, after midnight in yesterday's", windows: "cron 0 22 * * Mon-Fri 6h UTC", now: time.Date(2026, 12, 2, 3, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 2, 4, 0, 0, 0, utc)}},
		{name: "weekday nights, saturday: next is monday", windows: "cron 0 22 * * Mon-Fri 6h UTC", now: time.Date(2026, 12, 5, 12, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{NextOpening: time.Date(2026, 12, 7, 22, 0, 0, 0, utc)}},
		{name: "too short left: the next one", windows: "cron 0 22 * * * 2h UTC", now: time.Date(2026, 12, 1, 23, 30, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{Open: true, Closes: time.Date(2026, 12, 2, 0, 0, 0, 0, utc), NextOpening: time.Date(2026, 12, 2, 22, 0, 0, 0, utc)}},
		{name: "every 2 hours for 30m", windows: "cron 0 */2 * * * 30m UTC", now: time.Date(2026, 12, 1, 13, 10, 0, 0, utc), need: 10 * time.Minute,
			want: WindowVerdict{NextOpening: time.Date(2026, 12, 1, 14, 0, 0, 0, utc)}},
		{name: "touching openings merge", windows: "cron 0 * * * * 1h UTC", now: time.Date(2026, 12, 1, 13, 10, 0, 0, utc), need: 5 * time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 10, 0, 0, 0, 0, utc)}},
		{name: "day of month only", windows: "cron 0 2 15 * * 4h UTC", now: time.Date(2026, 12, 1, 12, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{}}, // the 15th is beyond the 8 days looked ahead
		{name: "day of month and weekday: either (Vixie)", windows: "cron 0 2 3 * Sat 4h UTC", now: time.Date(2026, 12, 1, 12, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{NextOpening: time.Date(2026, 12, 3, 2, 0, 0, 0, utc)}}, // Thursday the 3rd, before Saturday
		{name: "month restricts", windows: "cron 0 2 * Jan Sun 4h UTC", now: time.Date(2026, 12, 28, 12, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{NextOpening: time.Date(2027, 1, 3, 2, 0, 0, 0, utc)}},
		{name: "sunday as 7", windows: "cron 0 2 * * 7 4h UTC", now: time.Date(2026, 12, 1, 12, 0, 0, 0, utc), need: time.Hour,
			want: WindowVerdict{NextOpening: time.Date(2026, 12, 6, 2, 0, 0, 0, utc)}},
		{name: "zone: 22:00 berlin is 21:00 UTC in winter", windows: "cron 0 22 * * * 1h Europe/Berlin", now: time.Date(2026, 12, 1, 21, 15, 0, 0, utc), need: 30 * time.Minute,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 12, 1, 22, 0, 0, 0, utc)}},
		{name: "DST: opening keeps its wall-clock hour in summer", windows: "cron 0 22 * * * 1h Europe/Berlin", now: time.Date(2026, 7, 1, 12, 0, 0, 0, utc), need: 30 * time.Minute,
			want: WindowVerdict{NextOpening: time.Date(2026, 7, 1, 20, 0, 0, 0, utc)}},
		{name: "DST spring: duration is elapsed time (01:00 + 4h closes 06:00 CEST)", windows: "cron 0 1 29 3 * 4h Europe/Berlin", now: time.Date(2026, 3, 29, 1, 0, 0, 0, berlin), need: 4 * time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 3, 29, 6, 0, 0, 0, berlin)}},
		{name: "DST spring: an opening in the skipped hour opens when the clocks resume", windows: "cron 30 2 29 3 * 1h Europe/Berlin", now: time.Date(2026, 3, 28, 12, 0, 0, 0, utc), need: 30 * time.Minute,
			want: WindowVerdict{NextOpening: time.Date(2026, 3, 29, 1, 30, 0, 0, utc)}}, // 03:30 CEST
		{name: "DST autumn: duration is elapsed time (01:00 + 4h closes 04:00 CET)", windows: "cron 0 1 25 10 * 4h Europe/Berlin", now: time.Date(2026, 10, 25, 1, 0, 0, 0, berlin), need: 4 * time.Hour,
			want: WindowVerdict{Start: true, Open: true, Closes: time.Date(2026, 10, 25, 4, 0, 0, 0, berlin)}},
		{name: "DST autumn: an opening in the repeated hour opens once, at the first", windows: "cron 30 2 25 10 * 1h Europe/Berlin", now: time.Date(2026, 10, 24, 12, 0, 0, 0, utc), need: 30 * time.Minute,
			want: WindowVerdict{NextOpening: time.Date(2026, 10, 25, 0, 30, 0, 0, utc)}}, // 02:30 CEST
		{name: "with a weekly window", windows: "Wed 10:00-11:00 UTC; cron 0 9 * * Wed 30m UTC", now: time.Date(2026, 12, 1, 12, 0, 0, 0, utc), need: 45 * time.Minute,
			want: WindowVerdict{NextOpening: time.Date(2026, 12, 2, 10, 0, 0, 0, utc)}},
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
}
