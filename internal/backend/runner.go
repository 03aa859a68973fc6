package backend

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"

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
	// Output, when set, is handed each line the command writes (stdout and
	// stderr, secrets redacted) as it writes it, one call at a time: a long
	// command's progress (kubeadm's phases) in the caller's log while it runs.
	Output func(line string)
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
	output := c.Capture(cmd)
	err := cmd.Run()
	stdout, stderr := output()
	res := Result{Stdout: stdout, Stderr: stderr, ExitCode: cmd.ProcessState.ExitCode()}
	if err != nil {
		return res, &CommandError{Command: c, Result: res, Err: err}
	}
	return res, nil
}

// Capture points cmd's stdout and stderr at buffers and, when c.Output is set,
// also hands c.Output each line as the command writes it. Call the returned
// function once cmd has run: it hands on a last line without a newline and
// returns what the command wrote to each stream.
func (c Command) Capture(cmd *exec.Cmd) func() (stdout, stderr []byte) {
	var out, errb bytes.Buffer
	if c.Output == nil {
		cmd.Stdout, cmd.Stderr = &out, &errb
		return func() ([]byte, []byte) { return out.Bytes(), errb.Bytes() }
	}
	var mu sync.Mutex // os/exec copies each stream on its own goroutine
	lineOut := &lineWriter{mu: &mu, emit: func(l string) { c.Output(c.redact(l)) }}
	lineErr := &lineWriter{mu: &mu, emit: lineOut.emit}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, lineOut), io.MultiWriter(&errb, lineErr)
	return func() ([]byte, []byte) {
		lineOut.flush()
		lineErr.flush()
		return out.Bytes(), errb.Bytes()
	}
}

// lineWriter hands each complete line written to it to emit. A line longer than
// maxOutputLine is left out (a note stands in for it) rather than cut, which
// could split a secret so that redaction misses half of it; pending memory stays
// bounded either way.
type lineWriter struct {
	mu       *sync.Mutex
	emit     func(string)
	pending  []byte
	skipping bool // inside a line too long to hand on, until its newline
}

const maxOutputLine = 4096

var longLineNote = fmt.Sprintf("(a line longer than %d bytes, left out)", maxOutputLine)

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if !w.skipping {
				w.pending = append(w.pending, rest...)
				if len(w.pending) > maxOutputLine {
					w.emit(longLineNote)
					w.pending, w.skipping = nil, true
				}
			}
			break
		}
		switch line := append(w.pending, rest[:i]...); {
		case w.skipping:
		case len(line) > maxOutputLine:
			w.emit(longLineNote)
		default:
			w.emit(strings.TrimRight(string(line), "\r"))
		}
		w.pending, w.skipping = nil, false
		rest = rest[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) > 0 && !w.skipping {
		w.emit(string(w.pending))
	}
	w.pending, w.skipping = nil, false
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
