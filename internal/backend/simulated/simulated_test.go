package simulated

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
)

func TestUpdateRebootCommit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	b := New(t.TempDir())
	a := backend.Artifact{Ref: "sim:os-v2", Digest: DigestOf([]byte("sim:os-v2"))}
	initial := DigestOf([]byte(InitialRef))

	g.Expect(b.Capabilities()).To(Equal(backend.Capabilities{CanStage: true, NeedsReboot: true, SupportsRollback: true, HasMarkGood: true, VerifiesDigest: true}))
	for i := 0; i < 2; i++ { // idempotent
		g.Expect(b.Stage(ctx, a)).To(Succeed())
		g.Expect(b.Activate(ctx, a)).To(Succeed())
	}
	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(backend.Status{Booted: initial, Staged: a.Digest, Rollback: initial}))
	g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed), "not booted yet")

	g.Expect(b.Boot()).To(Succeed())
	g.Expect(b.Verify(ctx, a)).To(Succeed())
	g.Expect(b.Commit(ctx, a)).To(Succeed())
	st, _ = b.Status(ctx)
	g.Expect(st).To(Equal(backend.Status{Booted: a.Digest}))
	// Re-staging the running image is a no-op.
	g.Expect(b.Stage(ctx, a)).To(Succeed())
	g.Expect(b.Activate(ctx, a)).To(Succeed())
}

func TestRollbackAfterBoot(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	b := New(t.TempDir())
	a := backend.Artifact{Ref: "sim:os-v2", Digest: DigestOf([]byte("sim:os-v2"))}
	g.Expect(b.Stage(ctx, a)).To(Succeed())
	g.Expect(b.Activate(ctx, a)).To(Succeed())
	g.Expect(b.Boot()).To(Succeed())
	g.Expect(b.Rollback(ctx, a)).To(Succeed())
	g.Expect(b.Rollback(ctx, a)).To(Succeed())
	g.Expect(b.Boot()).To(Succeed())
	st, _ := b.Status(ctx)
	g.Expect(st.Booted).To(Equal(DigestOf([]byte(InitialRef))))
	g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
}

func TestRollbackBeforeBootAndWithoutActivate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	b := New(t.TempDir())
	a := backend.Artifact{Ref: "sim:os-v2", Digest: DigestOf([]byte("sim:os-v2"))}
	g.Expect(b.Rollback(ctx, a)).To(Succeed(), "nothing to undo")
	g.Expect(b.Stage(ctx, a)).To(Succeed())
	g.Expect(b.Activate(ctx, a)).To(Succeed())
	g.Expect(b.Rollback(ctx, a)).To(Succeed())
	st, _ := b.Status(ctx)
	g.Expect(st.Staged).To(BeEmpty(), "the old image boots next again")
}

// TestFallBackThenRollback: the new slot never comes up and the node boots the
// old one; Rollback makes the old slot the next boot again, so that it runs and
// boots next (Status: no staged image) without another boot.
func TestFallBackThenRollback(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	b := New(t.TempDir())
	a := backend.Artifact{Ref: "sim:os-v2", Digest: DigestOf([]byte("sim:os-v2"))}
	initial := DigestOf([]byte(InitialRef))
	g.Expect(b.Stage(ctx, a)).To(Succeed())
	g.Expect(b.Activate(ctx, a)).To(Succeed())
	g.Expect(b.FallBack()).To(Succeed())
	st, _ := b.Status(ctx)
	g.Expect(st).To(Equal(backend.Status{Booted: initial, Staged: a.Digest, Rollback: initial}), "the failed slot still boots next")
	g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
	g.Expect(b.Rollback(ctx, a)).To(Succeed())
	g.Expect(b.Rollback(ctx, a)).To(Succeed())
	st, _ = b.Status(ctx)
	g.Expect(st).To(Equal(backend.Status{Booted: initial}))
	g.Expect(b.Boot()).To(Succeed())
	st, _ = b.Status(ctx)
	g.Expect(st).To(Equal(backend.Status{Booted: initial}))
}

func TestStageRefusesWrongDigestAndChangesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	root := t.TempDir()
	b := New(root)
	g.Expect(os.WriteFile(filepath.Join(root, "image.raw"), []byte("image bytes"), 0o644)).To(Succeed())
	bad := backend.Artifact{Ref: "/image.raw", Digest: DigestOf([]byte("other bytes"))}
	g.Expect(b.Stage(ctx, bad)).To(MatchError(backend.ErrArtifactRefused))
	g.Expect(b.Stage(ctx, backend.Artifact{Ref: "/missing.raw", Digest: bad.Digest})).To(MatchError(backend.ErrArtifactRefused))
	g.Expect(b.Stage(ctx, backend.Artifact{Ref: "sim:x", Digest: "md5:1"})).To(MatchError(backend.ErrArtifactRefused))
	_, err := os.Stat(filepath.Join(root, Dir, "slots", "b"))
	g.Expect(os.IsNotExist(err)).To(BeTrue())

	good := backend.Artifact{Ref: "/image.raw", Digest: DigestOf([]byte("image bytes"))}
	g.Expect(b.Stage(ctx, good)).To(Succeed())
	data, err := os.ReadFile(filepath.Join(root, Dir, "slots", "b", "image"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("image bytes"))
}
