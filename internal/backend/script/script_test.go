package script

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

// abScript is a real A/B "OS" kept in files: it is what an operator's script
// looks like, and it implements the whole contract, including refusing an
// artifact whose digest does not match before changing anything.
const abScript = `#!/bin/sh
set -eu
S=@STATE@
[ "$1" = "$CAPI_INPLACE_ACTION" ] || { echo '{"ok":false,"message":"action env mismatch"}'; exit 1; }
reply() { printf '{"ok":%s,"message":"%s"}\n' "$1" "$2"; }
case "$1" in
stage)
	got="sha256:$(sha256sum "$CAPI_INPLACE_ARTIFACT_REF" | cut -d' ' -f1)" || { reply false "cannot read artifact"; exit 2; }
	[ "$got" = "$CAPI_INPLACE_ARTIFACT_DIGEST" ] || { reply false "digest $got does not match"; exit 2; }
	cp "$CAPI_INPLACE_ARTIFACT_REF" "$S/inactive"
	echo "$CAPI_INPLACE_ARTIFACT_DIGEST" > "$S/staged"
	reply true staged ;;
activate)
	[ "$(cat "$S/staged")" = "$CAPI_INPLACE_ARTIFACT_DIGEST" ] || { reply false "not staged"; exit 1; }
	cp "$S/staged" "$S/next"
	reply true activated ;;
verify)
	[ "$(cat "$S/booted")" = "$CAPI_INPLACE_ARTIFACT_DIGEST" ] || { reply false "booted $(cat "$S/booted")"; exit 3; }
	reply true verified ;;
commit)
	cp "$S/booted" "$S/good"
	reply true committed ;;
rollback)
	cp "$S/good" "$S/next"
	reply true "rolled back" ;;
status)
	printf '{"ok":true,"booted":"%s","staged":"%s","rollback":"%s"}\n' "$(cat "$S/booted")" "$(cat "$S/next")" "$(cat "$S/good")" ;;
*)
	reply false "unknown action $1"; exit 4 ;;
esac
`

type env struct {
	state, script string
	old, new      backend.Artifact
}

func setup(t *testing.T) env {
	t.Helper()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	must(t, os.Mkdir(state, 0o755))
	script := filepath.Join(dir, "os-update.sh")
	must(t, os.WriteFile(script, []byte(strings.ReplaceAll(abScript, "@STATE@", state)), 0o755))
	old := artifactFile(t, dir, "old.img", "old image")
	newA := artifactFile(t, dir, "new.img", "new image")
	for _, f := range []string{"booted", "next", "good"} {
		must(t, os.WriteFile(filepath.Join(state, f), []byte(old.Digest+"\n"), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(state, "staged"), nil, 0o644))
	return env{state: state, script: script, old: old, new: newA}
}

func artifactFile(t *testing.T, dir, name, content string) backend.Artifact {
	t.Helper()
	p := filepath.Join(dir, name)
	must(t, os.WriteFile(p, []byte(content), 0o644))
	sum := sha256.Sum256([]byte(content))
	return backend.Artifact{Ref: p, Digest: "sha256:" + hex.EncodeToString(sum[:])}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e env) reboot(t *testing.T) {
	t.Helper()
	next, err := os.ReadFile(filepath.Join(e.state, "next"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(e.state, "booted"), next, 0o644))
}

func newBackend(t *testing.T, e env) *Backend {
	t.Helper()
	b, err := New(Options{Runner: backend.ExecRunner{}, Path: e.script, Capabilities: backend.Capabilities{CanStage: true, NeedsReboot: true, SupportsRollback: true}})
	must(t, err)
	return b
}

func TestRealScriptUpdateAndCommit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	e := setup(t)
	b := newBackend(t, e)

	// Every step twice: the agent repeats a step after a crash.
	for range 2 {
		g.Expect(b.Stage(ctx, e.new)).To(Succeed())
	}
	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(backend.Status{Booted: e.old.Digest, Staged: e.old.Digest, Rollback: e.old.Digest}), "stage must not change the next boot")
	for range 2 {
		g.Expect(b.Activate(ctx, e.new)).To(Succeed())
	}
	st, err = b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Staged).To(Equal(e.new.Digest))

	e.reboot(t)
	g.Expect(b.Verify(ctx, e.new)).To(Succeed())
	for range 2 {
		g.Expect(b.Commit(ctx, e.new)).To(Succeed())
	}
	st, err = b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(backend.Status{Booted: e.new.Digest, Staged: e.new.Digest, Rollback: e.new.Digest}))
}

func TestRealScriptFailedVerifyRollsBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	e := setup(t)
	b := newBackend(t, e)
	g.Expect(b.Stage(ctx, e.new)).To(Succeed())
	g.Expect(b.Activate(ctx, e.new)).To(Succeed())
	// The node comes back on the old image (the new one did not boot).
	err := b.Verify(ctx, e.new)
	g.Expect(err).To(MatchError(backend.ErrVerifyFailed))
	g.Expect(err.Error()).To(ContainSubstring("booted " + e.old.Digest))
	for range 2 {
		g.Expect(b.Rollback(ctx, e.new)).To(Succeed())
	}
	e.reboot(t)
	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Booted).To(Equal(e.old.Digest))
	g.Expect(st.Staged).To(Equal(e.old.Digest))
}

func TestRealScriptRefusesWrongDigestBeforeChanging(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(a backend.Artifact) backend.Artifact
	}{
		{name: "wrong digest", mutate: func(a backend.Artifact) backend.Artifact {
			a.Digest = "sha256:" + strings.Repeat("0", 64)
			return a
		}},
		{name: "corrupt file", mutate: func(a backend.Artifact) backend.Artifact {
			must(t, os.WriteFile(a.Ref, []byte("new imagX"), 0o644))
			return a
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			e := setup(t)
			b := newBackend(t, e)
			err := b.Stage(context.Background(), tt.mutate(e.new))
			g.Expect(err).To(MatchError(backend.ErrArtifactRefused))
			g.Expect(filepath.Join(e.state, "inactive")).NotTo(BeAnExistingFile(), "nothing may be written")
			staged, _ := os.ReadFile(filepath.Join(e.state, "staged"))
			g.Expect(staged).To(BeEmpty())
		})
	}
}

func TestOutcomeMapping(t *testing.T) {
	yes, no := true, false
	failed := &backend.CommandError{Command: backend.Command{Name: "/s"}, Err: os.ErrInvalid}
	tests := []struct {
		name    string
		exit    int
		runErr  error
		reply   Reply
		wantErr error
		wantMsg string
	}{
		{name: "success", reply: Reply{OK: &yes}},
		{name: "success without reply"},
		{name: "ok false on exit 0 is a failure", reply: Reply{OK: &no, Message: "disk full"}, wantMsg: "disk full"},
		{name: "exit 2 refuses", exit: 2, runErr: failed, reply: Reply{Message: "bad sig"}, wantErr: backend.ErrArtifactRefused, wantMsg: "bad sig"},
		{name: "exit 3 verify failed", exit: 3, runErr: failed, wantErr: backend.ErrVerifyFailed},
		{name: "exit 4 unsupported", exit: 4, runErr: failed, wantErr: backend.ErrUnsupported},
		{name: "exit 1 is a retryable failure", exit: 1, runErr: failed, wantErr: os.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := outcome("stage", tt.exit, tt.runErr, tt.reply, nil)
			if tt.wantErr == nil && tt.wantMsg == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			if tt.wantErr != nil {
				g.Expect(err).To(MatchError(tt.wantErr))
			}
			g.Expect(err.Error()).To(ContainSubstring(tt.wantMsg))
			if tt.exit != ExitRefused {
				g.Expect(err).NotTo(MatchError(backend.ErrArtifactRefused), "only exit 2 refuses")
			}
		})
	}
}

func TestCommandContract(t *testing.T) {
	g := NewWithT(t)
	r := (&backendtest.Runner{}).On("/opt/os-update status", `{"ok":true,"booted":"v1","staged":"v2"}`, nil)
	b, err := New(Options{Runner: r, Path: "/opt/os-update"})
	g.Expect(err).NotTo(HaveOccurred())
	st, err := b.Status(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(backend.Status{Booted: "v1", Staged: "v2"}))

	r.On("/opt/os-update verify", "not json", nil)
	a := backend.Artifact{Ref: "x", Digest: "sha256:" + strings.Repeat("a", 64)}
	g.Expect(b.Verify(context.Background(), a)).To(MatchError(ContainSubstring("not a JSON reply")))

	g.Expect(b.Stage(context.Background(), backend.Artifact{Ref: "x", Digest: "md5:1"})).To(MatchError(backend.ErrArtifactRefused))
	g.Expect(r.Calls()).To(Equal([]string{"/opt/os-update status", "/opt/os-update verify"}), "a malformed digest never reaches the script")

	_, err = New(Options{Runner: r, Path: "relative.sh"})
	g.Expect(err).To(HaveOccurred())
	_, err = New(Options{Path: "/x"})
	g.Expect(err).To(HaveOccurred())
}
