package localstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Process is one child process of the stack: its own process group, output in a log
// file, killed with its whole group by Stop.
type Process struct {
	Name    string
	LogPath string

	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}

	mu      sync.Mutex
	waitErr error
	stopped bool
}

// ProcessSpec describes a process to start.
type ProcessSpec struct {
	// Name identifies the process in logs and file names.
	Name string
	// Path is the binary.
	Path string
	Args []string
	// Env is added to the parent's environment.
	Env []string
	Dir string
	// LogDir receives <Name>.log (appended to on restart).
	LogDir string
}

// StartProcess starts spec in its own process group. The child gets SIGKILL when the
// thread that started it dies (Pdeathsig), so even a killed test binary leaves nothing
// behind.
func StartProcess(spec ProcessSpec) (*Process, error) {
	if err := os.MkdirAll(spec.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("create log dir for %s: %w", spec.Name, err)
	}
	logPath := filepath.Join(spec.LogDir, spec.Name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", spec.Name, err)
	}
	fmt.Fprintf(logFile, "=== %s start %s %v\n", time.Now().UTC().Format(time.RFC3339Nano), spec.Path, spec.Args)

	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Dir = spec.Dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p := &Process{Name: spec.Name, LogPath: logPath, cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		fmt.Fprintf(logFile, "=== %s exit %v\n", time.Now().UTC().Format(time.RFC3339Nano), err)
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id (also its process group id).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and with which error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill sends SIGKILL to the whole process group at once, like a crash.
func (p *Process) Kill() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs it.
func (p *Process) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	if exited, _ := p.Exited(); exited {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// WaitReady polls check until it succeeds, the process exits, or ctx ends.
func (p *Process) WaitReady(ctx context.Context, what string, check func(context.Context) error) error {
	var last error
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited before %s (log %s): %w", p.Name, what, p.LogPath, err)
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %s (log %s): %w", p.Name, what, p.LogPath, errors.Join(ctx.Err(), last))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
