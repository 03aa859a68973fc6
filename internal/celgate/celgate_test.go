package celgate

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/celgate/celproto"
)

func TestCompile(t *testing.T) {
	tests := []struct {
		name, expr, wantErr string
	}{
		{"all pods running", `pods.all(p, p.status.phase == "Running")`, ""},
		{"node label", `node.metadata.labels["tier"] == "db"`, ""},
		{"ready condition", `node.status.conditions.exists(c, c.type == "Ready" && c.status == "True")`, ""},
		{"syntax error", `pods.all(p, `, "does not compile"},
		{"unknown variable", `machine.ready`, "undeclared reference to 'machine'"},
		{"not a bool", `size(pods)`, "is of type int, want bool"},
		{"string", `"true"`, "is of type string, want bool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Compile(tt.expr)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}
}

func pod(name, phase, ready string) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": name, "namespace": "default"},
		"status": map[string]any{"phase": phase, "conditions": []any{map[string]any{"type": "Ready", "status": ready}}}}
}

func TestEval(t *testing.T) {
	node := map[string]any{"metadata": map[string]any{"name": "w1", "labels": map[string]any{"tier": "db"}},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}}
	allReady := `pods.all(p, p.status.conditions.exists(c, c.type == "Ready" && c.status == "True"))`
	many := make([]map[string]any, 300)
	for i := range many {
		many[i] = pod("p", "Running", "True")
	}
	tests := []struct {
		name    string
		expr    string
		pods    []map[string]any
		wantErr error  // nil: passes
		wantMsg string // a substring of an error that is not ErrFalse
	}{
		{"pods ready", allReady, []map[string]any{pod("a", "Running", "True"), pod("b", "Running", "True")}, nil, ""},
		{"a pod not ready", allReady, []map[string]any{pod("a", "Running", "True"), pod("b", "Running", "False")}, ErrFalse, ""},
		{"no pods", allReady, nil, nil, ""},
		{"node label", `node.metadata.labels.tier == "db"`, nil, nil, ""},
		{"missing field", `node.metadata.labels.zone == "a"`, nil, nil, "no such key: zone"},
		{"cost limit", `pods.all(a, pods.all(b, pods.all(c, a.metadata.name == b.metadata.name)))`, many, nil, "cost limit exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, err := Compile(tt.expr)
			g.Expect(err).NotTo(HaveOccurred())
			err = p.Eval(context.Background(), node, tt.pods)
			switch {
			case tt.wantMsg != "":
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantMsg)))
				g.Expect(errors.Is(err, ErrFalse)).To(BeFalse())
			case tt.wantErr != nil:
				g.Expect(err).To(MatchError(tt.wantErr))
				g.Expect(errors.Is(err, celproto.ErrFalse)).To(BeTrue(), "the agent, without cel-go, tests celproto's ErrFalse")
			default:
				g.Expect(err).NotTo(HaveOccurred())
			}
		})
	}
}

func TestEvalEndsWithItsContext(t *testing.T) {
	g := NewWithT(t)
	p, err := Compile(`pods.all(a, pods.all(b, a.metadata.name == b.metadata.name))`)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	many := make([]map[string]any, 200)
	for i := range many {
		many[i] = pod("p", "Running", "True")
	}
	g.Expect(p.Eval(ctx, nil, many)).To(MatchError(context.Canceled))
}
