package backend

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Command is one program invocation.
type Command struct {
	Name  string
	Args  []string
	Env   []string // extra KEY=VALUE pairs on top of the agent's environment
	Dir   string
	Stdin []byte
	// Secrets are values (a password hash, a key) that the command carries in
	// Stdin, Env or, failing all else, Args. They never appear in text: String
	// and CommandError render each as Redacted, also inside the tool's own output
	// (a tool may echo its input in an error). Stdin is never rendered at all.
	Secrets []string
}

// Redacted stands for a secret value in every text the agent produces.
const Redacted = protocol.Redacted

// String renders the command for logs and errors, secrets redacted.
func (c Command) String() string {
	return c.redact(strings.TrimSpace(c.Name + " " + strings.Join(c.Args, " ")))
}

func (c Command) redact(s string) string { return RedactSecrets(s, c.Secrets...) }

// RedactSecrets replaces every occurrence of each secret in s with Redacted,
// then every crypt(3) password hash (RedactKnownSecrets), so a secret the caller
// forgot to name is still caught when it has a recognisable shape.
func RedactSecrets(s string, secrets ...string) string {
	for _, v := range secrets {
		if v != "" {
			s = strings.ReplaceAll(s, v, Redacted)
		}
	}
	return RedactKnownSecrets(s)
}

// RedactKnownSecrets replaces every crypt(3) password hash in s with Redacted
// (protocol.RedactKnownSecrets: one rule for the agent and the coordinator).
func RedactKnownSecrets(s string) string { return protocol.RedactKnownSecrets(s) }

// Result is the outcome of a command that ran.
type Result struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
}

// Runner runs commands on the host. Run returns an error only when the command
// could not run or exited non-zero; the Result is filled in both cases.
type Runner interface {
	Run(ctx context.Context, cmd Command) (Result, error)
}

// ExecRunner runs commands with os/exec.
type ExecRunner struct {
	// Env is the base environment; nil means the agent's own.
	Env []string
}

var _ Runner = ExecRunner{}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, c Command) (Result, error) {
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	if r.Env != nil {
		cmd.Env = append(append([]string{}, r.Env...), c.Env...)
	} else if len(c.Env) > 0 {
		cmd.Env = append(cmd.Environ(), c.Env...)
	}
	cmd.Dir = c.Dir
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: cmd.ProcessState.ExitCode()}
	if err != nil {
		return res, &CommandError{Command: c, Result: res, Err: err}
	}
	return res, nil
}

// CommandError is returned when a command fails; its message carries the command
// and the tail of its stderr, which is what an operator needs to see, with the
// command's secrets redacted from both.
type CommandError struct {
	Command Command
	Result  Result
	Err     error
}

func (e *CommandError) Error() string {
	msg := e.Command.redact(strings.TrimSpace(string(e.Result.Stderr)))
	if msg == "" {
		// Some tools (swupdate) report errors on stdout only.
		msg = e.Command.redact(strings.TrimSpace(string(e.Result.Stdout)))
	}
	// Redacted before the cut, so the cut cannot leave half a secret unmatched.
	if len(msg) > 512 {
		msg = "..." + msg[len(msg)-512:]
	}
	if msg == "" {
		return fmt.Sprintf("%s: %s", e.Command, e.Command.redact(fmt.Sprint(e.Err)))
	}
	return fmt.Sprintf("%s: %s: %s", e.Command, e.Command.redact(fmt.Sprint(e.Err)), msg)
}

func (e *CommandError) Unwrap() error { return e.Err }
