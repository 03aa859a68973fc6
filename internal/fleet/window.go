package fleet

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // windows name zones; images may ship no zoneinfo
)

// ErrWindow marks a maintenance window that does not parse.
var ErrWindow = errors.New("invalid maintenance window")

// Window is one weekly maintenance window: on each listed weekday it opens at
// Start and closes at End, wall-clock time in Location. End at or before Start
// closes on the next day (22:00-04:00); 00:00-24:00 is the whole day.
type Window struct {
	Days     [7]bool // by time.Weekday
	Start    int     // minutes after midnight, 0..1439
	End      int     // minutes after midnight, 1..1440
	Location *time.Location
	// cron, when set, is a cron window (cron.go); Days, Start and End are unused.
	cron *cronSpec
	text string
}

func (w Window) String() string { return w.text }

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// PoolWindows is the one rule for which maintenance windows hold a pool's nodes:
// a Cluster's maintenance-windows annotation, whenever it is set (even to "":
// always open), replaces the windows of the pool's policy entry. annotation and
// annotated are the annotation's value and presence; fromAnnotation reports that
// it applied, err that it does not parse (the gate holds then).
func PoolWindows(policy Schedule, annotation string, annotated bool) (sched Schedule, fromAnnotation bool, err error) {
	if !annotated {
		return policy, false, nil
	}
	sched, err = ParseWindows(annotation)
	return sched, true, err
}

// ParseWindows reads windows separated by ";", each "DAYS HH:MM-HH:MM ZONE":
// DAYS is a comma list of weekdays or ranges ("Mon-Fri", "Sat,Sun", "Fri-Mon",
// "*" for every day), ZONE an IANA name ("Europe/Berlin", "UTC"); or the cron
// form "cron MIN HOUR DOM MON DOW DURATION ZONE" (cron.go). An empty string is
// no windows (always open).
func ParseWindows(s string) (Schedule, error) {
	var out Schedule
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		w, err := parseWindow(part)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

func parseWindow(s string) (Window, error) {
	fields := strings.Fields(s)
	if len(fields) > 0 && fields[0] == "cron" {
		return parseCronWindow(s, fields[1:])
	}
	if len(fields) != 3 {
		return Window{}, fmt.Errorf("%w %q: want \"DAYS HH:MM-HH:MM ZONE\", e.g. \"Mon-Fri 22:00-04:00 Europe/Berlin\"", ErrWindow, s)
	}
	w := Window{text: s}
	if err := parseDays(fields[0], &w.Days); err != nil {
		return Window{}, fmt.Errorf("%w %q: %w", ErrWindow, s, err)
	}
	from, to, ok := strings.Cut(fields[1], "-")
	if !ok {
		return Window{}, fmt.Errorf("%w %q: hours %q are not HH:MM-HH:MM", ErrWindow, s, fields[1])
	}
	var err error
	if w.Start, err = parseClock(from, false); err != nil {
		return Window{}, fmt.Errorf("%w %q: %w", ErrWindow, s, err)
	}
	if w.End, err = parseClock(to, true); err != nil {
		return Window{}, fmt.Errorf("%w %q: %w", ErrWindow, s, err)
	}
	if w.Start == w.End {
		return Window{}, fmt.Errorf("%w %q: opens and closes at the same time", ErrWindow, s)
	}
	if w.Location, err = time.LoadLocation(fields[2]); err != nil || fields[2] == "Local" {
		return Window{}, fmt.Errorf("%w %q: unknown time zone %q", ErrWindow, s, fields[2])
	}
	return w, nil
}

func parseDays(s string, days *[7]bool) error {
	if s == "*" {
		for i := range days {
			days[i] = true
		}
		return nil
	}
	for _, item := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(item, "-")
		a, ok := weekdays[strings.ToLower(from)]
		if !ok {
			return fmt.Errorf("unknown weekday %q (Mon, Tue, ... Sun)", from)
		}
		b := a
		if isRange {
			if b, ok = weekdays[strings.ToLower(to)]; !ok {
				return fmt.Errorf("unknown weekday %q (Mon, Tue, ... Sun)", to)
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			days[d] = true
			if d == b {
				break
			}
		}
	}
	return nil
}

func parseClock(s string, allow24 bool) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || len(m) != 2 || hh < 0 || mm < 0 || mm > 59 || hh > 24 || (hh == 24 && (mm != 0 || !allow24)) {
		return 0, fmt.Errorf("time %q is not HH:MM (00:00-23:59, or 24:00 as a closing time)", s)
	}
	return hh*60 + mm, nil
}

// Schedule is a set of windows; updates may start while any is open. An empty
// schedule is always open.
type Schedule []Window

// span is one opening of the schedule, in absolute time.
type span struct{ open, close time.Time }

// spans lists the openings overlapping [from-1 day, from+8 days], merged where
// they touch or overlap, sorted.
func (s Schedule) spans(from time.Time) []span {
	var out []span
	for _, w := range s {
		if w.cron != nil {
			out = append(out, w.cron.spans(from, w.Location)...)
			continue
		}
		local := from.In(w.Location)
		for off := -1; off <= 8; off++ {
			day := time.Date(local.Year(), local.Month(), local.Day()+off, 0, 0, 0, 0, w.Location)
			if !w.Days[day.Weekday()] {
				continue
			}
			// Wall-clock times through time.Date, so that an opening keeps its
			// local hour across DST changes.
			open := time.Date(day.Year(), day.Month(), day.Day(), w.Start/60, w.Start%60, 0, 0, w.Location)
			endDay := day.Day()
			if w.End <= w.Start {
				endDay++
			}
			closeAt := time.Date(day.Year(), day.Month(), endDay, w.End/60, w.End%60, 0, 0, w.Location)
			if closeAt.After(open) {
				out = append(out, span{open, closeAt})
			}
		}
	}
	slices.SortFunc(out, func(a, b span) int { return a.open.Compare(b.open) })
	var merged []span
	for _, sp := range out {
		if n := len(merged); n > 0 && !sp.open.After(merged[n-1].close) {
			if sp.close.After(merged[n-1].close) {
				merged[n-1].close = sp.close
			}
			continue
		}
		merged = append(merged, sp)
	}
	return merged
}

// WindowVerdict says whether a node update of the expected length may start now.
type WindowVerdict struct {
	// Start: an opening is open now and lasts at least the expected duration (or
	// the schedule is empty).
	Start bool
	// Open: an opening is open now (it may close too soon to start).
	Open bool
	// Closes is when the current opening closes (Open only).
	Closes time.Time
	// NextOpening is the start of the next opening long enough for the update;
	// zero when none within a week is (Start false and Open false or too short).
	NextOpening time.Time
}

// At decides for an update starting at now and expected to take need.
func (s Schedule) At(now time.Time, need time.Duration) WindowVerdict {
	if len(s) == 0 {
		return WindowVerdict{Start: true, Open: true}
	}
	var v WindowVerdict
	for _, sp := range s.spans(now) {
		if !sp.open.After(now) && now.Before(sp.close) {
			v.Open, v.Closes = true, sp.close
			if !now.Add(need).After(sp.close) {
				v.Start = true
				return v
			}
			continue
		}
		if sp.open.After(now) && v.NextOpening.IsZero() && !sp.open.Add(need).After(sp.close) {
			v.NextOpening = sp.open
		}
	}
	return v
}
