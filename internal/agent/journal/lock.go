package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockName is the lock file beside the journal.
const lockName = "agent.lock"

// lockPoll is how often Lock tries again while another process holds the lock.
const lockPoll = 500 * time.Millisecond

// Lock takes the node's exclusive claim on the journal's directory dir: one
// process at a time acts on the host from the journal (the agent, or the rescue
// pod after a reboot that left the agent's API server stopped). The claim is an
// flock(2) on dir/agent.lock, so the kernel drops it when its holder dies (a
// killed agent, a power cut) and two containers that mount the same host
// directory exclude each other. Lock waits until the claim is free or ctx ends;
// waiting is called once, the first time it has to wait. release gives the
// claim up.
func Lock(ctx context.Context, dir string, waiting func()) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal lock: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal lock: %w", err)
	}
	for first := true; ; first = false {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("journal lock %s: %w", f.Name(), err)
		}
		if first && waiting != nil {
			waiting()
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("journal lock %s: %w", f.Name(), ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}
