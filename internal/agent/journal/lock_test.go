package journal

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLockExcludesAnotherHolder: a second claim on the same directory waits (and
// says so once) until the first is released, and gives up when its context ends.
func TestLockExcludesAnotherHolder(t *testing.T) {
	dir := t.TempDir()
	release, err := Lock(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}

	waited := 0
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, dir, func() { waited++ }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second claim while the first is held: %v, want the context's deadline", err)
	}
	if waited != 1 {
		t.Fatalf("waiting called %d times, want once", waited)
	}

	got := make(chan error, 1)
	go func() {
		r, err := Lock(context.Background(), dir, nil)
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("claim after the release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the claim was not granted after the release")
	}
}
