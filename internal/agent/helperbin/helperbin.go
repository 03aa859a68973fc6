package helperbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Locate returns the helper binary's path: configured when it is set, else name
// beside the running executable (the agent's image), else name on $PATH.
func Locate(name, configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("helper %s: not beside the agent's executable nor on $PATH: %w", name, err)
	}
	return p, nil
}

// StderrLimit is how much of a helper's stderr is worth keeping (its error line).
const StderrLimit = 4 << 10

// Tail keeps the last Limit bytes written to it (a helper's stderr).
type Tail struct {
	Limit int
	b     []byte
}

// Write keeps the tail of what was written; it never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.Limit {
		t.b = t.b[len(t.b)-t.Limit:]
	}
	return len(p), nil
}

// String is what is kept.
func (t *Tail) String() string { return string(t.b) }
