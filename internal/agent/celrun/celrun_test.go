package celrun_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/celrun"
	"github.com/capi-inplace/capi-inplace/internal/agent/helperbin/helperbintest"
	"github.com/capi-inplace/capi-inplace/internal/celgate/celproto"
)

func pod(name, ready string) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": name, "namespace": "app"},
		"status": map[string]any{"phase": "Running", "conditions": []any{map[string]any{"type": "Ready", "status": ready}}}}
}

const allReady = `pods.all(p, p.status.conditions.exists(c, c.type == "Ready" && c.status == "True"))`

// TestEvalWithTheHelper runs the real helper binary: each outcome comes back as
// the error an in-process evaluation gave.
func TestEvalWithTheHelper(t *testing.T) {
	h := celrun.Helper{Path: helperbintest.Build(t, celproto.HelperName)}
	node := map[string]any{"metadata": map[string]any{"name": "w1"}, "status": map[string]any{"capacity": map[string]any{"pods": "110"}}}
	tests := []struct {
		name    string
		expr    string
		pods    []map[string]any
		outcome celproto.Outcome
		wantErr string
	}{
		{"true", allReady, []map[string]any{pod("a", "True"), pod("b", "True")}, celproto.True, ""},
		{"false", allReady, []map[string]any{pod("a", "True"), pod("b", "False")}, celproto.False, "CEL expression is false"},
		{"node", `node.status.capacity.pods == "110"`, nil, celproto.True, ""},
		{"compile error", `size(pods)`, nil, celproto.CompileError, "CEL expression is of type int, want bool"},
		{"syntax error", `pods.all(p, `, nil, celproto.CompileError, "CEL expression does not compile"},
		{"evaluation error", `node.metadata.labels.zone == "a"`, nil, celproto.EvalError, "evaluate CEL expression: no such key: labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := h.Eval(context.Background(), celproto.Request{Expression: tt.expr, Node: node, Pods: tt.pods})
			switch tt.outcome {
			case celproto.True:
				g.Expect(err).NotTo(HaveOccurred())
			case celproto.False:
				g.Expect(err).To(MatchError(celproto.ErrFalse))
			default:
				var ce *celproto.Error
				g.Expect(errors.As(err, &ce)).To(BeTrue(), "error %v", err)
				g.Expect(ce.Outcome).To(Equal(tt.outcome))
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(errors.Is(err, celproto.ErrFalse)).To(BeFalse())
			}
		})
	}
}

// script is a stand-in helper: a shell script.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), celproto.HelperName)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEvalFailures: what Eval says when the helper cannot answer.
func TestEvalFailures(t *testing.T) {
	req := celproto.Request{Expression: "true", Node: map[string]any{}}
	t.Run("the context kills a helper that hangs", func(t *testing.T) {
		g := NewWithT(t)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := celrun.Helper{Path: script(t, "cat >/dev/null; exec sleep 30")}.Eval(ctx, req)
		g.Expect(err).To(MatchError(context.DeadlineExceeded))
		g.Expect(err).To(MatchError(ContainSubstring("CEL helper: context deadline exceeded")))
		g.Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second))
	})
	for _, tt := range []struct {
		name, body, wantErr string
	}{
		{"a crash names the helper's error line", `echo "capi-inplace-cel: boom" >&2; exit 7`, "boom (CEL helper: exit status 7)"},
		{"no answer", `exit 0`, "CEL helper: decode its answer: unexpected end of JSON input"},
		{"an answer without outcome", `echo '{}'`, "CEL helper: decode its answer: its answer has no outcome"},
		{"an answer that disagrees with the exit code", `echo '{"outcome":"True"}'; exit 1`, "CEL helper: answered True with exit code 1, want 0"},
		{"an unknown outcome", `echo '{"outcome":"Maybe"}'; exit 4`, "CEL helper: unknown outcome Maybe"},
		{"an answer past its bound", `head -c 70000 /dev/zero | tr '\0' ' '; echo '{"outcome":"True"}'`, "its answer is more than 65536 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := celrun.Helper{Path: script(t, tt.body)}.Eval(context.Background(), req)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}
	t.Run("no helper", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		err := celrun.Helper{}.Eval(context.Background(), req)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("CEL helper capi-inplace-cel: not beside the agent's executable nor on $PATH")))
	})
	t.Run("a request past the bound is not sent", func(t *testing.T) {
		g := NewWithT(t)
		big := pod("big", "True")
		big["metadata"].(map[string]any)["annotations"] = map[string]any{"blob": strings.Repeat("x", celproto.MaxRequestBytes)}
		marker := filepath.Join(t.TempDir(), "ran")
		err := celrun.Helper{Path: script(t, "touch "+marker)}.Eval(context.Background(), celproto.Request{Expression: "true", Pods: []map[string]any{big}})
		g.Expect(err).To(MatchError(ContainSubstring("the node and its 1 pods are 33554")))
		g.Expect(err).To(MatchError(ContainSubstring("more than the CEL helper reads (32 MiB)")))
		g.Expect(marker).NotTo(BeAnExistingFile())
	})
}
