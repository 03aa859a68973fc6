// Package backendtest provides test doubles for package backend: a Runner that
// replays recorded outputs of real tools and records the commands it was asked to run.
package backendtest

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/capi-inplace/capi-inplace/internal/backend"
)

// Response is a recorded result for commands whose rendered form has a given prefix.
type Response struct {
	// Prefix is matched against Command.String().
	Prefix string
	Result backend.Result
	// Err, when set, is returned wrapped in a backend.CommandError.
	Err error
}

// Runner replays responses in order of registration: the first response whose
// prefix matches a command answers it. Unmatched commands fail.
type Runner struct {
	mu        sync.Mutex
	responses []Response
	calls     []backend.Command
}

var _ backend.Runner = &Runner{}

// On registers a response. Later registrations take precedence, so a test can
// change what a tool answers after a given step.
func (r *Runner) On(prefix string, stdout string, err error) *Runner {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := backend.Result{Stdout: []byte(stdout)}
	if err != nil {
		res.ExitCode = 1
		res.Stderr = []byte(err.Error())
	}
	r.responses = append([]Response{{Prefix: prefix, Result: res, Err: err}}, r.responses...)
	return r
}

// Run implements backend.Runner.
func (r *Runner) Run(_ context.Context, c backend.Command) (backend.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	s := c.String()
	for _, resp := range r.responses {
		if strings.HasPrefix(s, resp.Prefix) {
			if resp.Err != nil {
				return resp.Result, &backend.CommandError{Command: c, Result: resp.Result, Err: resp.Err}
			}
			return resp.Result, nil
		}
	}
	err := fmt.Errorf("no recorded response")
	return backend.Result{ExitCode: 127}, &backend.CommandError{Command: c, Err: err}
}

// Calls returns the rendered commands run so far.
func (r *Runner) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.calls))
	for i, c := range r.calls {
		out[i] = c.String()
	}
	return out
}
