package celgate

import (
	"context"
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/capi-inplace/capi-inplace/internal/celgate/celproto"
)

// Variable names of a gate expression.
const (
	NodeVar = "node"
	PodsVar = "pods"
)

// CostLimit bounds one evaluation in CEL's cost units (about one per
// comparison, list element visited or field read): 1,000,000 is some ten
// thousand field reads on each of a hundred pods, far more than a health check
// needs, and milliseconds of CPU on the agent.
const CostLimit = 1_000_000

// maxExpressionBytes bounds what the parser takes; the plan's rule is
// protocol.MaxGateExpressionBytes, which is smaller.
const maxExpressionBytes = 8192

// Program is a compiled gate expression.
type Program struct {
	expression string
	prg        cel.Program
}

// env is built once: building a CEL environment is the costly part.
var env, envErr = cel.NewEnv(
	cel.Variable(NodeVar, cel.MapType(cel.StringType, cel.DynType)),
	cel.Variable(PodsVar, cel.ListType(cel.MapType(cel.StringType, cel.DynType))),
	cel.ParserExpressionSizeLimit(maxExpressionBytes),
	cel.ParserRecursionLimit(64),
)

// Compile parses and type-checks a gate expression: it must compile in the gate
// environment and be of type bool. The error says where the expression is wrong.
func Compile(expression string) (*Program, error) {
	if envErr != nil {
		return nil, fmt.Errorf("CEL environment: %w", envErr)
	}
	ast, iss := env.Compile(expression)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("CEL expression does not compile: %w", iss.Err())
	}
	if !ast.OutputType().IsExactType(types.BoolType) {
		return nil, fmt.Errorf("CEL expression is of type %s, want bool", ast.OutputType())
	}
	prg, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("CEL program: %w", err)
	}
	return &Program{expression: expression, prg: prg}, nil
}

// ErrFalse is returned by Eval when the expression evaluates to false. It is
// celproto's, so that the agent, which runs the evaluation in the CEL helper
// binary and links no cel-go, returns the same error.
var ErrFalse = celproto.ErrFalse

// Eval evaluates the expression over a Node and its pods (JSON objects as
// runtime.DefaultUnstructuredConverter gives them): nil when it is true, ErrFalse
// when false, another error when it cannot be evaluated (a missing field, the
// cost limit, ctx's end).
func (p *Program) Eval(ctx context.Context, node map[string]any, pods []map[string]any) error {
	list := make([]any, len(pods))
	for i, pod := range pods {
		list[i] = pod
	}
	out, _, err := p.prg.ContextEval(ctx, map[string]any{NodeVar: node, PodsVar: list})
	if err != nil {
		return fmt.Errorf("evaluate CEL expression: %w", err)
	}
	v, ok := out.Value().(bool)
	if !ok {
		return fmt.Errorf("CEL expression gave %v, not a bool", out.Value())
	}
	if !v {
		return ErrFalse
	}
	return nil
}
