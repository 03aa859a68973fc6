package celhelper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/celgate/celproto"
)

func pod(name string, ready string, port int) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": name, "namespace": "app"},
		"spec":   map[string]any{"containers": []any{map[string]any{"name": "app", "ports": []any{map[string]any{"containerPort": int64(port)}}}}},
		"status": map[string]any{"phase": "Running", "conditions": []any{map[string]any{"type": "Ready", "status": ready}}}}
}

func request(t *testing.T, expr string, pods ...map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(celproto.Request{Expression: expr, Node: map[string]any{"metadata": map[string]any{"name": "w1"}}, Pods: pods})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run runs Main on stdin and returns its exit code, its decoded answer and its stderr.
func run(t *testing.T, ctx context.Context, stdin []byte, args ...string) (int, celproto.Result, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(ctx, args, bytes.NewReader(stdin), &stdout, &stderr)
	var res celproto.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("answer %q: %v", stdout.String(), err)
	}
	return code, res, stderr.String()
}

const allReady = `pods.all(p, p.status.conditions.exists(c, c.type == "Ready" && c.status == "True"))`

// TestHelperMain: each outcome with its exit code, answer and stderr line.
func TestHelperMain(t *testing.T) {
	tests := []struct {
		name    string
		stdin   []byte
		args    []string
		outcome celproto.Outcome
		message string // a substring of the message
	}{
		{"true", request(t, allReady, pod("a", "True", 80), pod("b", "True", 80)), nil, celproto.True, ""},
		{"false", request(t, allReady, pod("a", "True", 80), pod("b", "False", 80)), nil, celproto.False, ""},
		{"no pods", request(t, allReady), nil, celproto.True, ""},
		{"node fields", request(t, `node.metadata.name == "w1"`), nil, celproto.True, ""},
		{"integers stay ints", request(t, `pods.all(p, p.spec.containers[0].ports[0].containerPort == 80 && type(p.spec.containers[0].ports[0].containerPort) == int)`, pod("a", "True", 80)), nil, celproto.True, ""},
		{"compile error", request(t, `pods.all(p, `), nil, celproto.CompileError, "CEL expression does not compile"},
		{"not a bool", request(t, `size(pods)`), nil, celproto.CompileError, "is of type int, want bool"},
		{"evaluation error", request(t, `node.metadata.labels.zone == "a"`), nil, celproto.EvalError, "no such key: labels"},
		{"malformed JSON", []byte(`{"expression": "true", "node": {`), nil, celproto.BadRequest, "decode the request"},
		{"not an object", []byte(`["true"]`), nil, celproto.BadRequest, "decode the request"},
		{"unknown field", []byte(`{"expression": "true", "machine": {}}`), nil, celproto.BadRequest, `unknown field "machine"`},
		{"data after the request", append(request(t, "true"), []byte(` {}`)...), nil, celproto.BadRequest, "data after its JSON object"},
		{"a null pod", []byte(`{"expression": "true", "node": {}, "pods": [null]}`), nil, celproto.BadRequest, "pods[0] is null"},
		{"empty input", nil, nil, celproto.BadRequest, "decode the request: EOF"},
		{"arguments", request(t, "true"), []string{"--expression=true"}, celproto.BadRequest, "takes no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			code, res, stderr := run(t, context.Background(), tt.stdin, tt.args...)
			g.Expect(res.Outcome).To(Equal(tt.outcome), "message %q", res.Message)
			g.Expect(code).To(Equal(tt.outcome.ExitCode()))
			g.Expect(res.Message).To(ContainSubstring(tt.message))
			switch tt.outcome {
			case celproto.True:
				g.Expect(res.Err()).To(Succeed())
				g.Expect(stderr).To(BeEmpty())
			case celproto.False:
				g.Expect(errors.Is(res.Err(), celproto.ErrFalse)).To(BeTrue())
				g.Expect(stderr).To(BeEmpty())
			default:
				var ce *celproto.Error
				g.Expect(errors.As(res.Err(), &ce)).To(BeTrue())
				g.Expect(ce.Outcome).To(Equal(tt.outcome))
				g.Expect(errors.Is(res.Err(), celproto.ErrFalse)).To(BeFalse())
				g.Expect(stderr).To(HavePrefix(celproto.HelperName + ": "))
				g.Expect(strings.Count(strings.Split(stderr, "usage:")[0], "\n")).To(Equal(1), "one error line")
			}
		})
	}
}

// TestOversizedRequest: more than celproto.MaxRequestBytes is refused, read no
// further than the bound.
func TestOversizedRequest(t *testing.T) {
	g := NewWithT(t)
	big := pod("big", "True", 80)
	big["metadata"].(map[string]any)["annotations"] = map[string]any{"blob": strings.Repeat("x", celproto.MaxRequestBytes)}
	stdin := request(t, "true", big)
	r := &countingReader{r: bytes.NewReader(stdin)}
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), nil, r, &stdout, &stderr)
	g.Expect(code).To(Equal(celproto.BadRequest.ExitCode()))
	var res celproto.Result
	g.Expect(json.Unmarshal(stdout.Bytes(), &res)).To(Succeed())
	g.Expect(res.Outcome).To(Equal(celproto.BadRequest))
	g.Expect(res.Message).To(ContainSubstring("the request is more than 33554432 bytes (32 MiB)"))
	g.Expect(r.n).To(BeNumerically("<=", celproto.MaxRequestBytes+1), "reads no further than the bound")

	// A request of exactly the bound is read.
	at := request(t, "true")
	at = append(at, bytes.Repeat([]byte(" "), celproto.MaxRequestBytes-len(at))...)
	_, res, _ = run(t, context.Background(), at)
	g.Expect(res.Outcome).To(Equal(celproto.True))
}

type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestContextCancel: an evaluation ends with its context (the helper's SIGTERM)
// as an evaluation error.
func TestContextCancel(t *testing.T) {
	g := NewWithT(t)
	many := make([]map[string]any, 200)
	for i := range many {
		many[i] = pod("p", "True", 80)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code, res, _ := run(t, ctx, request(t, `pods.all(a, pods.all(b, a.metadata.name == b.metadata.name))`, many...))
	g.Expect(res.Outcome).To(Equal(celproto.EvalError))
	g.Expect(code).To(Equal(3))
	g.Expect(res.Message).To(ContainSubstring("context canceled"))
}
