package backend

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Command is one program invocation.
type Command struct {
	Name  string
	Args  []string
	Env   []string // extra KEY=VALUE pairs on top of the agent's environment
	Dir   string
	Stdin []byte
}

// String renders the command for logs and errors.
func (c Command) String() string {
	return strings.TrimSpace(c.Name + " " + strings.Join(c.Args, " "))
}

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
// and the tail of its stderr, which is what an operator needs to see.
type CommandError struct {
	Command Command
	Result  Result
	Err     error
}

func (e *CommandError) Error() string {
	msg := strings.TrimSpace(string(e.Result.Stderr))
	if msg == "" {
		// Some tools (swupdate) report errors on stdout only.
		msg = strings.TrimSpace(string(e.Result.Stdout))
	}
	if len(msg) > 512 {
		msg = "..." + msg[len(msg)-512:]
	}
	if msg == "" {
		return fmt.Sprintf("%s: %v", e.Command, e.Err)
	}
	return fmt.Sprintf("%s: %v: %s", e.Command, e.Err, msg)
}

func (e *CommandError) Unwrap() error { return e.Err }
