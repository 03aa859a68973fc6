//go:build e2enode

package e2enode

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

// failed keeps every failed assertion of the run, so that TestMain repeats them
// at the end of the output: CI shows a run's tail, and the lane's first failure
// (the one later scenarios may inherit) is otherwise far above it.
var failed failureLog

type failureLog struct {
	mu   sync.Mutex
	msgs []string
}

// newG is NewWithT(t) whose failures are also kept for the run's summary.
func newG(t *testing.T) *WithT {
	g := NewWithT(t)
	g.ConfigureWithFailHandler(func(message string, _ ...int) {
		t.Helper()
		failed.add(fmt.Sprintf("%s (%s): %s", t.Name(), callerInTests(), firstLines(message, 8)))
		t.Fatalf("\n%s", message)
	})
	return g
}

func (f *failureLog) add(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, msg)
}

// write prints the kept failures, first first.
func (f *failureLog) write(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.msgs) == 0 {
		return
	}
	fmt.Fprintf(w, "e2enode: %d failed assertion(s), in order:\n", len(f.msgs))
	for i, m := range f.msgs {
		fmt.Fprintf(w, "%d. %s\n", i+1, m)
	}
}

// callerInTests is the file:line of the innermost frame in this package's files
// outside this one: the assertion that failed.
func callerInTests() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		fr, more := frames.Next()
		if strings.Contains(fr.File, "/test/e2enode/") && !strings.HasSuffix(fr.File, "/failures.go") {
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
