package celhelper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/celgate"
	"github.com/capi-inplace/capi-inplace/internal/celgate/celproto"
)

// Usage is the helper's command line (celrun.Helper runs it).
const Usage = `usage: capi-inplace-cel < request.json
Reads one JSON request {"expression": "...", "node": {...}, "pods": [{...}, ...]}
(at most 32 MiB) on stdin, compiles and evaluates the CEL gate expression over
the node and pods, and writes {"outcome": "...", "message": "..."} on stdout.
Exit code: 0 true, 1 false, 2 compile error, 3 evaluation error, 4 bad request.
`

// Main runs the helper with args (without the program name), reading the request
// from stdin, and returns its exit code (celproto.Outcome.ExitCode). The answer
// is on stdout; for an error outcome its message is also one line on stderr.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	res := evaluate(ctx, args, stdin)
	if res.Outcome != celproto.True && res.Outcome != celproto.False {
		fmt.Fprintf(stderr, "%s: %s\n", celproto.HelperName, strings.ReplaceAll(res.Message, "\n", " "))
		if res.Outcome == celproto.BadRequest && len(args) > 0 {
			fmt.Fprint(stderr, Usage)
		}
	}
	b, err := json.Marshal(res)
	if err == nil {
		_, err = stdout.Write(append(b, '\n'))
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: write the answer: %v\n", celproto.HelperName, err)
		return celproto.BadRequest.ExitCode()
	}
	return res.Outcome.ExitCode()
}

func evaluate(ctx context.Context, args []string, stdin io.Reader) celproto.Result {
	if len(args) > 0 {
		return celproto.Result{Outcome: celproto.BadRequest, Message: fmt.Sprintf("takes no arguments, got %q (the request is read from stdin)", args)}
	}
	req, err := ReadRequest(stdin)
	if err != nil {
		return celproto.Result{Outcome: celproto.BadRequest, Message: err.Error()}
	}
	prg, err := celgate.Compile(req.Expression)
	if err != nil {
		return celproto.Result{Outcome: celproto.CompileError, Message: err.Error()}
	}
	switch err := prg.Eval(ctx, req.Node, req.Pods); {
	case err == nil:
		return celproto.Result{Outcome: celproto.True}
	case errors.Is(err, celgate.ErrFalse):
		return celproto.Result{Outcome: celproto.False}
	default:
		return celproto.Result{Outcome: celproto.EvalError, Message: err.Error()}
	}
}

// ReadRequest reads one request of at most celproto.MaxRequestBytes, and nothing
// after it. Numbers become int64 when they are integers and float64 otherwise, as
// runtime.DefaultUnstructuredConverter gives them (CEL tells int from double), so
// the expression sees the values an in-process evaluation of the typed objects saw.
func ReadRequest(r io.Reader) (celproto.Request, error) {
	var req celproto.Request
	b, err := io.ReadAll(io.LimitReader(r, celproto.MaxRequestBytes+1))
	if err != nil {
		return req, fmt.Errorf("read the request: %w", err)
	}
	if len(b) > celproto.MaxRequestBytes {
		return req, fmt.Errorf("the request is more than %d bytes (%d MiB)", celproto.MaxRequestBytes, celproto.MaxRequestBytes>>20)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("decode the request: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, errors.New("decode the request: data after its JSON object")
	}
	if req.Node != nil {
		req.Node = numbers(req.Node).(map[string]any)
	}
	for i, p := range req.Pods {
		if p == nil {
			return req, fmt.Errorf("decode the request: pods[%d] is null", i)
		}
		req.Pods[i] = numbers(p).(map[string]any)
	}
	return req, nil
}

// numbers replaces the json.Numbers of v by int64 or float64.
func numbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
		return v
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
		return v.String()
	default:
		return v
	}
}
