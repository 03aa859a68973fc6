package celproto

import "errors"

// HelperName is the CEL helper binary, which the agent's image carries beside the agent.
const HelperName = "capi-inplace-cel"

// MaxRequestBytes bounds one request (the Node and its pods as JSON): 32 MiB is a
// thousand pods (the most the agent lists for a gate) of 32 KiB each, managed
// fields included; a real node's request is a few MiB at most. The helper
// refuses a larger one, and the agent does not send it.
const MaxRequestBytes = 32 << 20

// MaxResultBytes bounds the helper's answer on stdout (one Result).
const MaxResultBytes = 64 << 10

// Request is one evaluation: the expression, and its variables as JSON objects
// (runtime.DefaultUnstructuredConverter's view of the agent's Node and of the
// pods bound to it).
type Request struct {
	Expression string           `json:"expression"`
	Node       map[string]any   `json:"node"`
	Pods       []map[string]any `json:"pods"`
}

// Outcome is what became of a request.
type Outcome string

// Outcomes, each with its exit code of the helper (ExitCode).
const (
	// True: the expression compiled and is true (exit 0).
	True Outcome = "True"
	// False: the expression compiled and is false (exit 1).
	False Outcome = "False"
	// CompileError: the expression does not compile in the gate environment, or
	// is not of type bool (exit 2).
	CompileError Outcome = "CompileError"
	// EvalError: the expression cannot be evaluated over these objects (a missing
	// field, the cost limit; exit 3).
	EvalError Outcome = "EvalError"
	// BadRequest: the helper could not read the request (malformed JSON, more
	// than MaxRequestBytes, arguments it does not take; exit 4).
	BadRequest Outcome = "BadRequest"
)

// ExitCode is the helper's exit code for the outcome; 4 for an unknown one.
func (o Outcome) ExitCode() int {
	switch o {
	case True:
		return 0
	case False:
		return 1
	case CompileError:
		return 2
	case EvalError:
		return 3
	default:
		return 4
	}
}

// Result is the helper's answer: one JSON object on stdout.
type Result struct {
	Outcome Outcome `json:"outcome"`
	// Message says why for every outcome but True and False.
	Message string `json:"message,omitempty"`
}

// ErrFalse is the error of a gate whose expression evaluated to false
// (internal/celgate returns it too).
var ErrFalse = errors.New("CEL expression is false")

// Error is the helper's answer for an expression that does not compile, cannot
// be evaluated, or a request it refused; its text is the helper's message
// (celgate's compile or evaluation error, as an in-process evaluation gave it).
type Error struct {
	Outcome Outcome
	Message string
}

func (e *Error) Error() string { return e.Message }

// Err is the error a gate reports for the result: nil when true, ErrFalse when
// false, an *Error otherwise.
func (r Result) Err() error {
	switch r.Outcome {
	case True:
		return nil
	case False:
		return ErrFalse
	case CompileError, EvalError, BadRequest:
		msg := r.Message
		if msg == "" {
			msg = "CEL helper: " + string(r.Outcome)
		}
		return &Error{Outcome: r.Outcome, Message: msg}
	default:
		return &Error{Outcome: r.Outcome, Message: "CEL helper: unknown outcome " + string(r.Outcome)}
	}
}
