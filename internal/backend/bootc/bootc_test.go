package bootc

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

var (
	prev    = "sha256:" + strings.Repeat("a1", 32)
	newImg  = "sha256:" + strings.Repeat("b2", 32)
	oldest  = "sha256:" + strings.Repeat("c3", 32)
	newArt  = backend.Artifact{Ref: "quay.io/example/k8s-node:1.36", Digest: newImg}
	statusC = "bootc status --json"
)

func testdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPinned(t *testing.T) {
	tests := []struct {
		name    string
		ref     string
		want    string
		refused bool
	}{
		{name: "tag dropped", ref: "quay.io/example/k8s-node:1.36", want: "quay.io/example/k8s-node@" + newImg},
		{name: "registry port kept", ref: "registry.local:5000/os", want: "registry.local:5000/os@" + newImg},
		{name: "same digest", ref: "quay.io/x/os@" + newImg, want: "quay.io/x/os@" + newImg},
		{name: "docker transport", ref: "docker://quay.io/x/os:latest", want: "quay.io/x/os@" + newImg},
		{name: "reference pins another digest", ref: "quay.io/x/os@" + prev, refused: true},
		{name: "empty", ref: "", refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := pinned(backend.Artifact{Ref: tt.ref, Digest: newImg})
			if tt.refused {
				g.Expect(err).To(MatchError(backend.ErrArtifactRefused))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestParseAndRollbackStep(t *testing.T) {
	tests := []struct {
		file       string
		next       string
		done       bool
		wantErr    bool
		forDigest  string
		bootedWant string
	}{
		{file: "status-old-booted.json", next: prev, done: true, bootedWant: prev},
		{file: "status-staged.json", next: newImg, done: false, bootedWant: prev},
		{file: "status-new-booted.json", next: newImg, done: false, bootedWant: newImg},
		{file: "status-new-booted-rollback-queued.json", next: prev, done: true, bootedWant: newImg},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			g := NewWithT(t)
			h, err := parseHost(testdata(t, tt.file))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(h.Status.Booted.digest()).To(Equal(tt.bootedWant))
			g.Expect(h.nextBoot()).To(Equal(tt.next))
			done, err := rollbackStep(h, newImg)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(done).To(Equal(tt.done))
		})
	}
	g := NewWithT(t)
	_, err := parseHost([]byte(`{"kind":"Something"}`))
	g.Expect(err).To(HaveOccurred())
}

// fakeBootc models bootc's documented semantics on top of the same JSON schema:
// switch stages, rollback discards a staged image and toggles the queued
// rollback, and a reboot finalizes. It answers through backend.Runner.
type fakeBootc struct {
	booted, staged, rollback string
	queued                   bool
	missing                  map[string]bool // digests the registry does not have
	calls                    []string
}

func (f *fakeBootc) entry(d string) any {
	if d == "" {
		return nil
	}
	return map[string]any{"image": map[string]any{"image": map[string]any{"image": "quay.io/example/k8s-node", "transport": "registry"}, "imageDigest": d}}
}

func (f *fakeBootc) Run(_ context.Context, c backend.Command) (backend.Result, error) {
	f.calls = append(f.calls, c.String())
	switch {
	case c.String() == statusC:
		out, _ := json.Marshal(map[string]any{"apiVersion": "org.containers.bootc/v1", "kind": "BootcHost",
			"status": map[string]any{"staged": f.entry(f.staged), "booted": f.entry(f.booted), "rollback": f.entry(f.rollback), "rollbackQueued": f.queued}})
		return backend.Result{Stdout: out}, nil
	case len(c.Args) == 2 && c.Args[0] == "switch":
		_, d, _ := strings.Cut(c.Args[1], "@")
		if f.missing[d] {
			res := backend.Result{ExitCode: 1, Stderr: []byte("error: Switching: Pulling: Creating importer: failed to invoke method OpenImage: reading manifest " + d + " in quay.io/example/k8s-node: manifest unknown")}
			return res, &backend.CommandError{Command: c, Result: res, Err: errors.New("exit status 1")}
		}
		f.staged, f.queued = d, false
		return backend.Result{}, nil
	case c.String() == "bootc rollback":
		if f.staged != "" {
			f.staged = ""
			f.queued = true
		} else {
			f.queued = !f.queued
		}
		return backend.Result{}, nil
	}
	res := backend.Result{ExitCode: 127}
	return res, &backend.CommandError{Command: c, Result: res, Err: errors.New("unexpected command")}
}

func (f *fakeBootc) reboot() {
	switch {
	case f.staged != "":
		f.booted, f.rollback, f.staged = f.staged, f.booted, ""
	case f.queued:
		f.booted, f.rollback, f.queued = f.rollback, f.booted, false
	}
}

func newFake(t *testing.T) (*fakeBootc, *Backend) {
	t.Helper()
	f := &fakeBootc{booted: prev, rollback: oldest, missing: map[string]bool{}}
	b, err := New(Options{Runner: f})
	if err != nil {
		t.Fatal(err)
	}
	return f, b
}

func TestSimulatedBootcUpdateAndCommit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	f, b := newFake(t)
	g.Expect(b.Capabilities().CanStage).To(BeFalse())
	g.Expect(b.Stage(ctx, newArt)).To(Succeed())
	g.Expect(f.calls).To(BeEmpty(), "stage changes nothing on a bootc host")
	for range 2 {
		g.Expect(b.Activate(ctx, newArt)).To(Succeed())
	}
	g.Expect(f.calls).To(ContainElement("bootc switch quay.io/example/k8s-node@" + newImg))
	g.Expect(f.staged).To(Equal(newImg))
	g.Expect(b.Verify(ctx, newArt)).To(MatchError(backend.ErrVerifyFailed))
	f.reboot()
	g.Expect(b.Verify(ctx, newArt)).To(Succeed())
	g.Expect(b.Commit(ctx, newArt)).To(Succeed())
	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(backend.Status{Booted: newImg, Rollback: prev}))
}

func TestSimulatedBootcFailedVerifyRollsBack(t *testing.T) {
	t.Run("before reboot: staged image discarded, booted one stays next", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		f, b := newFake(t)
		g.Expect(b.Activate(ctx, newArt)).To(Succeed())
		g.Expect(b.Verify(ctx, newArt)).To(MatchError(backend.ErrVerifyFailed))
		for range 2 {
			g.Expect(b.Rollback(ctx, newArt)).To(Succeed())
		}
		g.Expect(f.staged).To(BeEmpty())
		g.Expect(f.queued).To(BeFalse(), "the older rollback entry must not become the next boot")
		f.reboot()
		g.Expect(f.booted).To(Equal(prev))
	})
	t.Run("after reboot: previous image queued", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		f, b := newFake(t)
		g.Expect(b.Activate(ctx, newArt)).To(Succeed())
		f.reboot()
		g.Expect(b.Verify(ctx, newArt)).To(Succeed())
		for range 2 {
			g.Expect(b.Rollback(ctx, newArt)).To(Succeed())
		}
		f.reboot()
		g.Expect(f.booted).To(Equal(prev))
		g.Expect(b.Verify(ctx, newArt)).To(MatchError(backend.ErrVerifyFailed))
	})
}

func TestSimulatedBootcRefusesBeforeChanging(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	f, b := newFake(t)
	f.missing[newImg] = true
	g.Expect(b.Activate(ctx, newArt)).To(MatchError(backend.ErrArtifactRefused))
	g.Expect(f.staged).To(BeEmpty())
	g.Expect(b.Stage(ctx, backend.Artifact{Ref: "quay.io/x/os@" + prev, Digest: newImg})).To(MatchError(backend.ErrArtifactRefused))
	g.Expect(b.Activate(ctx, backend.Artifact{Ref: "quay.io/x/os", Digest: "sha256:short"})).To(MatchError(backend.ErrArtifactRefused))
	g.Expect(f.booted).To(Equal(prev))
}

func TestRecordedStatusDrivesActivate(t *testing.T) {
	g := NewWithT(t)
	r := (&backendtest.Runner{}).On(statusC, string(testdata(t, "status-staged.json")), nil)
	b, err := New(Options{Runner: r, EnforceSigPolicy: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Activate(context.Background(), newArt)).To(Succeed())
	g.Expect(r.Calls()).To(Equal([]string{statusC}), "already staged: no second switch")

	r.On(statusC, string(testdata(t, "status-old-booted.json")), nil)
	r.On("bootc switch --enforce-container-sigpolicy quay.io/example/k8s-node@"+newImg, "", errors.New("error: Switching: Pulling: connection refused"))
	err = b.Activate(context.Background(), newArt)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err).NotTo(MatchError(backend.ErrArtifactRefused), "a network error is retried")
}
