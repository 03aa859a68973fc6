package celrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/agent/helperbin"
	"github.com/capi-inplace/capi-inplace/internal/celgate/celproto"
)

// Helper runs the CEL helper binary.
type Helper struct {
	// Path is the helper binary's path; empty means celproto.HelperName beside
	// the running executable, else on $PATH (helperbin.Locate).
	Path string
}

// Eval evaluates the request in a new helper process, which ctx bounds (its end
// kills the helper): nil when the expression is true, celproto.ErrFalse when it
// is false, a *celproto.Error when it does not compile or cannot be evaluated,
// another error when the helper cannot be run or does not answer.
func (h Helper) Eval(ctx context.Context, req celproto.Request) error {
	path, err := helperbin.Locate(celproto.HelperName, h.Path)
	if err != nil {
		return fmt.Errorf("CEL %w", err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("CEL gate: the node and its pods as JSON: %w", err)
	}
	if len(body) > celproto.MaxRequestBytes {
		return fmt.Errorf("CEL gate: the node and its %d pods are %d bytes as JSON, more than the CEL helper reads (%d MiB)",
			len(req.Pods), len(body), celproto.MaxRequestBytes>>20)
	}
	cmd := exec.CommandContext(ctx, path)
	cmd.Stdin = bytes.NewReader(body)
	stdout := &capped{limit: celproto.MaxResultBytes}
	stderr := &helperbin.Tail{Limit: helperbin.StderrLimit}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("CEL helper: %w", ctx.Err())
	}
	var res celproto.Result
	decodeErr := json.Unmarshal(stdout.b.Bytes(), &res)
	if stdout.over {
		decodeErr = fmt.Errorf("its answer is more than %d bytes", celproto.MaxResultBytes)
	}
	if decodeErr == nil && res.Outcome == "" {
		decodeErr = errors.New("its answer has no outcome")
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(runErr, &ee) {
		code = ee.ExitCode()
	} else if runErr != nil {
		return fmt.Errorf("CEL helper %s: %w", path, runErr)
	}
	if decodeErr != nil {
		msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr.String()), celproto.HelperName+": "))
		if runErr != nil && msg != "" {
			return fmt.Errorf("%s (CEL helper: %w)", msg, runErr)
		}
		if runErr != nil {
			return fmt.Errorf("CEL helper: %w", runErr)
		}
		return fmt.Errorf("CEL helper: decode its answer: %w", decodeErr)
	}
	if want := res.Outcome.ExitCode(); code != want {
		return fmt.Errorf("CEL helper: answered %s with exit code %d, want %d", res.Outcome, code, want)
	}
	return res.Err()
}

// capped keeps the first limit bytes written to it and notes that more came.
type capped struct {
	limit int
	b     bytes.Buffer
	over  bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.limit - c.b.Len(); len(p) > room {
		c.b.Write(p[:max(room, 0)])
		c.over = true
		return len(p), nil
	}
	return c.b.Write(p)
}
