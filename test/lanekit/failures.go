package lanekit

import (
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
)

// Failures keeps every failed assertion of a lane's run, so that its TestMain
// repeats them at the end of the output: CI shows a run's tail, and with
// scenarios running side by side the first failure is otherwise far above it.
type Failures struct {
	// Lane names the lane in the summary.
	Lane string
	// Dir is the lane's test directory as it appears in a source path (e.g.
	// "/test/e2ereal/"): the failed assertion is the innermost frame there.
	Dir string

	mu   sync.Mutex
	msgs []string
}

// G is NewWithT(t) whose failures are also kept for the run's summary.
func (f *Failures) G(t *testing.T) *WithT {
	g := NewWithT(t)
	g.ConfigureWithFailHandler(func(message string, _ ...int) {
		t.Helper()
		f.add(fmt.Sprintf("%s (%s): %s", t.Name(), f.caller(), firstLines(message, 8)))
		t.Fatalf("\n%s", message)
	})
	return g
}

func (f *Failures) add(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, msg)
}

// Write prints the kept failures, first first; nothing when there are none.
func (f *Failures) Write(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.msgs) == 0 {
		return
	}
	fmt.Fprintf(w, "%s: %d failed assertion(s), in order:\n", f.Lane, len(f.msgs))
	for i, m := range f.msgs {
		fmt.Fprintf(w, "%d. %s\n", i+1, m)
	}
}

// caller is the file:line of the innermost frame in the lane's files outside
// this one: the assertion that failed.
func (f *Failures) caller() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		fr, more := frames.Next()
		if strings.Contains(fr.File, f.Dir) {
			return fmt.Sprintf("%s:%d", filepath.Base(fr.File), fr.Line)
		}
		if !more {
			return "?"
		}
	}
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("... (%d more lines)", len(lines)-n))
	}
	return strings.Join(lines, "\n   ")
}
