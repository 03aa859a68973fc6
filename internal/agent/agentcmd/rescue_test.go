package agentcmd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
)

// hostAfterCut lays out under a temporary root what a power cut during an etcd
// restore leaves once the data was restored: etcd's and the API server's
// manifests parked in the attempt's directory, the rescue pod in the manifest
// directory, and a journal with inFlight in flight.
func hostAfterCut(t *testing.T, inFlight string) (root string) {
	t.Helper()
	root = t.TempDir()
	attempt := filepath.Join(root, kube.AttemptsDir, "a1")
	files := map[string]string{
		filepath.Join(attempt, "etcd-members.json"):   `{"members":[{"Name":"cp-1"}]}`,
		filepath.Join(attempt, "etcd-restored"):       "2026-12-06T12:00:00Z\n",
		filepath.Join(attempt, "etcd.yaml"):           "etcd manifest\n",
		filepath.Join(attempt, "kube-apiserver.yaml"): "kube-apiserver manifest\n",
		filepath.Join(root, kube.RescueManifest):      "rescue pod\n",
	}
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	jr, err := journal.NewFile(filepath.Join(root, kube.WorkDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := jr.Save(journal.Entry{Key: "plan", InFlight: inFlight, Attempt: "a1"}); err != nil {
		t.Fatal(err)
	}
	return root
}

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Stat(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// TestRescueFinishesTheRestoreInFlight: with the journal's etcd restore in
// flight, the rescue puts etcd's and the API server's manifests back and removes
// its own pod.
func TestRescueFinishesTheRestoreInFlight(t *testing.T) {
	root := hostAfterCut(t, restoreInFlight)
	if err := Rescue(context.Background(), root); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{kube.EtcdManifest: "etcd manifest\n", kube.APIServerManifest: "kube-apiserver manifest\n"} {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", p, got, err, want)
		}
	}
	if exists(t, filepath.Join(root, kube.RescueManifest)) {
		t.Error("the rescue pod is still in the manifest directory")
	}
}

// TestRescueWithNothingInFlight: with no restore in flight the rescue changes
// nothing on the host but removing its own pod.
func TestRescueWithNothingInFlight(t *testing.T) {
	root := hostAfterCut(t, "gates")
	if err := Rescue(context.Background(), root); err != nil {
		t.Fatal(err)
	}
	if exists(t, filepath.Join(root, kube.EtcdManifest)) || exists(t, filepath.Join(root, kube.APIServerManifest)) {
		t.Error("a manifest was put back with no restore in flight")
	}
	if exists(t, filepath.Join(root, kube.RescueManifest)) {
		t.Error("the rescue pod is still in the manifest directory")
	}
}

// TestRescueWaitsForALiveAgent: while another process (a live agent) holds the
// journal's lock, the rescue touches nothing.
func TestRescueWaitsForALiveAgent(t *testing.T) {
	root := hostAfterCut(t, restoreInFlight)
	release, err := journal.Lock(context.Background(), filepath.Join(root, kube.WorkDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := Rescue(ctx, root); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Rescue while the agent holds the journal: %v, want the context's deadline", err)
	}
	if exists(t, filepath.Join(root, kube.EtcdManifest)) || !exists(t, filepath.Join(root, kube.RescueManifest)) {
		t.Error("the rescue acted while the agent held the journal")
	}
}
