package demo

import (
	"fmt"
	"strings"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/status"
)

// Live decides what each tick of the rollout prints, from internal/status's Report and
// its rendered table. On a terminal it redraws the table in place (ANSI: cursor up to
// the first line of the previous frame, clear to the end of the screen); otherwise it
// prints only the rows whose state changed, as log lines, so that a CI log stays short.
type Live struct {
	TTY bool
	// Width is the terminal's width: redrawn lines are cut to it, because a wrapped
	// line would make the next redraw move the cursor up too little.
	Width int

	prevLines int
	header    bool
	rows      map[string]string
}

// Frame returns the text to write for one tick. since is the time since the rollout
// began; table is status.RenderTable's output for r.
func (l *Live) Frame(r status.Report, table string, since time.Duration) string {
	stamp := status.FormatSeconds(int64(since / time.Second))
	if l.TTY {
		var b strings.Builder
		if l.prevLines > 0 {
			fmt.Fprintf(&b, "\x1b[%dF\x1b[J", l.prevLines)
		}
		text := fmt.Sprintf("rollout +%s (Ctrl-C tears everything down)\n%s", stamp, table)
		if l.Width > 0 {
			text = cut(text, l.Width-1)
		}
		b.WriteString(text)
		l.prevLines = strings.Count(text, "\n")
		return b.String()
	}

	if l.rows == nil {
		l.rows = map[string]string{}
	}
	lines := rowLines(table, r)
	var b strings.Builder
	if !l.header {
		for line := range strings.Lines(table) {
			if strings.HasPrefix(line, "MACHINE") {
				fmt.Fprintf(&b, "%-7s %s", "", line)
				l.header = true
				break
			}
		}
	}
	for _, c := range r.Clusters {
		for _, m := range c.Machines {
			sig := signature(m)
			if l.rows[m.Name] == sig {
				continue
			}
			l.rows[m.Name] = sig
			fmt.Fprintf(&b, "%-7s %s\n", "+"+stamp, lines[m.Name])
		}
	}
	return b.String()
}

// signature is what makes a row worth printing again: everything but the clock.
func signature(m status.MachineView) string {
	cond := func(c *status.Condition) string {
		if c == nil {
			return ""
		}
		return c.Status + "/" + c.Reason
	}
	return strings.Join([]string{
		m.UID, m.Version, m.KubeletVersion, string(m.Phase), fmt.Sprint(m.Step, "/", m.Steps), m.Action,
		m.Drain.State, cond(m.Conditions.Updating), cond(m.Conditions.UpToDate), m.Failure,
	}, "|")
}

// rowLines maps each Machine of r to its row in table (rows start with the name).
func rowLines(table string, r status.Report) map[string]string {
	out := map[string]string{}
	for _, c := range r.Clusters {
		for _, m := range c.Machines {
			for line := range strings.Lines(table) {
				if strings.HasPrefix(line, m.Name+" ") {
					out[m.Name] = strings.TrimRight(line, "\n")
					break
				}
			}
			if _, ok := out[m.Name]; !ok {
				out[m.Name] = m.Name
			}
		}
	}
	return out
}

// Timeline times each Machine's update from the live view: from the first look at
// which it had started (Cluster API's Updating, the agent working or done on a plan
// begun after the rollout started, or a new version on either side) to the first look
// at which it was done (both versions new, up to date, nothing in progress). Its
// resolution is the live view's interval.
type Timeline struct {
	From       time.Time
	ToVersion  string
	start, end map[string]time.Time
}

// Observe records one look at time now.
func (t *Timeline) Observe(r status.Report, now time.Time) {
	if t.start == nil {
		t.start, t.end = map[string]time.Time{}, map[string]time.Time{}
	}
	for _, c := range r.Clusters {
		for _, m := range c.Machines {
			updating := m.Conditions.Updating != nil && m.Conditions.Updating.Status == "True"
			done := m.Version == t.ToVersion && m.KubeletVersion == t.ToVersion && !updating && !m.InProgress() &&
				m.Conditions.UpToDate != nil && m.Conditions.UpToDate.Status == "True"
			planAfter := m.StartedAt != nil && !m.StartedAt.Before(t.From)
			started := updating || m.InProgress() || planAfter || m.Version == t.ToVersion || m.KubeletVersion == t.ToVersion
			if _, ok := t.start[m.Name]; !ok && (started || done) {
				t.start[m.Name] = now
			}
			if _, ok := t.end[m.Name]; !ok && done {
				t.end[m.Name] = now
			}
		}
	}
}

// Durations returns the update time of every Machine seen both start and finish. A
// Machine that did both between two looks gets zero.
func (t *Timeline) Durations() map[string]time.Duration {
	out := map[string]time.Duration{}
	for n, e := range t.end {
		if s, ok := t.start[n]; ok {
			out[n] = e.Sub(s)
		}
	}
	return out
}

// cut shortens every line of text to at most width runes.
func cut(text string, width int) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		body := strings.TrimSuffix(line, "\n")
		if r := []rune(body); len(r) > width {
			body = string(r[:max(width, 0)])
		}
		b.WriteString(body)
		if strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
