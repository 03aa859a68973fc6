package fleet

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A cron window opens at the times a five-field cron expression names and stays
// open for a duration: "cron MIN HOUR DOM MON DOW DURATION ZONE", e.g.
// "cron 0 22 * * Mon-Fri 6h Europe/Berlin" (22:00 each weekday, for 6 hours) or
// "cron 0 2 1-7 * Sun 4h UTC" (the first Sunday of a month, with Vixie cron's
// rule that a restricted day of month and day of week match either: here 02:00
// on days 1-7 and on every Sunday).
//
// Fields as in crontab(5): numbers, "*", ranges "a-b", steps "*/n" and "a-b/n",
// comma lists; month names Jan-Dec and weekday names Sun-Sat (0 or 7 is Sunday).
// Opening times are wall-clock in ZONE (an opening at 22:00 stays at 22:00 local
// across DST); the DURATION (1m to 24h, Go syntax) is elapsed time. An opening in
// the hour the clocks skip opens when they resume (02:30 on a spring-forward night
// opens at 03:30); one in the hour the clocks repeat opens once, at the first.
type cronSpec struct {
	minutes [60]bool
	hours   [24]bool
	doms    [32]bool // 1..31
	months  [13]bool // 1..12
	dows    [7]bool  // by time.Weekday
	// domAll and dowAll: the field was "*" (a restricted one alone decides).
	domAll, dowAll bool
	dur            time.Duration
}

var monthNames = map[string]int{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
	"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}

// parseCronWindow parses the fields after "cron".
func parseCronWindow(s string, fields []string) (Window, error) {
	if len(fields) != 7 {
		return Window{}, fmt.Errorf("%w %q: want \"cron MIN HOUR DOM MON DOW DURATION ZONE\", e.g. \"cron 0 22 * * Mon-Fri 6h Europe/Berlin\"", ErrWindow, s)
	}
	c := &cronSpec{}
	for _, f := range []struct {
		name     string
		text     string
		min, max int
		names    map[string]int
		set      func(int)
		all      *bool
	}{
		{"minute", fields[0], 0, 59, nil, func(v int) { c.minutes[v] = true }, nil},
		{"hour", fields[1], 0, 23, nil, func(v int) { c.hours[v] = true }, nil},
		{"day of month", fields[2], 1, 31, nil, func(v int) { c.doms[v] = true }, &c.domAll},
		{"month", fields[3], 1, 12, monthNames, func(v int) { c.months[v] = true }, nil},
		{"day of week", fields[4], 0, 7, weekdayNumbers, func(v int) { c.dows[v%7] = true }, &c.dowAll},
	} {
		all, err := parseCronField(f.text, f.min, f.max, f.names, f.set)
		if err != nil {
			return Window{}, fmt.Errorf("%w %q: %s field: %w", ErrWindow, s, f.name, err)
		}
		if f.all != nil {
			*f.all = all
		}
	}
	d, err := time.ParseDuration(fields[5])
	if err != nil || d < time.Minute || d > 24*time.Hour {
		return Window{}, fmt.Errorf("%w %q: duration %q is not between 1m and 24h (e.g. 90m, 6h)", ErrWindow, s, fields[5])
	}
	c.dur = d
	loc, err := time.LoadLocation(fields[6])
	if err != nil || fields[6] == "Local" {
		return Window{}, fmt.Errorf("%w %q: unknown time zone %q", ErrWindow, s, fields[6])
	}
	return Window{Location: loc, cron: c, text: s}, nil
}

var weekdayNumbers = func() map[string]int {
	out := map[string]int{}
	for name, d := range weekdays {
		out[name] = int(d)
	}
	return out
}()

// parseCronField sets every value the field names; all reports a bare "*".
func parseCronField(text string, lo, hi int, names map[string]int, set func(int)) (all bool, err error) {
	value := func(s string) (int, error) {
		if v, ok := names[strings.ToLower(s)]; ok {
			return v, nil
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < lo || v > hi {
			return 0, fmt.Errorf("%q is not a value from %d to %d", s, lo, hi)
		}
		return v, nil
	}
	for _, item := range strings.Split(text, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			if step, err = strconv.Atoi(stepText); err != nil || step < 1 {
				return false, fmt.Errorf("step %q is not a positive number", stepText)
			}
		}
		from, to := lo, hi
		switch {
		case rng == "*":
			all = all || !hasStep
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			if from, err = value(a); err != nil {
				return false, err
			}
			if to, err = value(b); err != nil {
				return false, err
			}
			if to < from {
				return false, fmt.Errorf("range %q runs backwards", rng)
			}
		default:
			if hasStep {
				return false, fmt.Errorf("step on a single value %q (use a range, a-b/n)", item)
			}
			if from, err = value(rng); err != nil {
				return false, err
			}
			to = from
		}
		for v := from; v <= to; v += step {
			set(v)
		}
	}
	return all && !strings.Contains(text, ","), nil
}

// day reports whether the cron expression runs on day (a date in its zone).
func (c *cronSpec) day(day time.Time) bool {
	if !c.months[day.Month()] {
		return false
	}
	dom, dow := c.doms[day.Day()], c.dows[day.Weekday()]
	switch {
	case c.domAll && c.dowAll:
		return true
	case c.domAll:
		return dow
	case c.dowAll:
		return dom
	}
	return dom || dow // Vixie cron: both restricted, either matches
}

// spans lists the cron window's openings that start on the days from-1 to from+8
// (in loc); with durations of at most a day that covers every opening overlapping
// [from, from+8 days).
func (c *cronSpec) spans(from time.Time, loc *time.Location) []span {
	var out []span
	local := from.In(loc)
	for off := -1; off <= 8; off++ {
		day := time.Date(local.Year(), local.Month(), local.Day()+off, 0, 0, 0, 0, loc)
		if !c.day(day) {
			continue
		}
		for h := range c.hours {
			if !c.hours[h] {
				continue
			}
			for m := range c.minutes {
				if c.minutes[m] {
					open := firstOccurrence(time.Date(day.Year(), day.Month(), day.Day(), h, m, 0, 0, loc))
					out = append(out, span{open, open.Add(c.dur)})
				}
			}
		}
	}
	return out
}

// firstOccurrence returns the earlier instant of a wall-clock time the clocks
// show twice (the hour repeated when DST ends), for which time.Date picks the
// later; any other time unchanged.
func firstOccurrence(t time.Time) time.Time {
	_, after := t.Zone()
	_, before := t.Add(-12 * time.Hour).Zone()
	if before <= after {
		return t
	}
	earlier := t.Add(-time.Duration(before-after) * time.Second)
	if earlier.Hour() == t.Hour() && earlier.Minute() == t.Minute() {
		return earlier
	}
	return t
}
