package none

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
)

func TestNone(t *testing.T) {
	g := NewWithT(t)
	b := New()
	ctx := context.Background()
	a := backend.Artifact{Ref: "x", Digest: "sha256:00"}
	g.Expect(b.Name()).To(Equal("none"))
	g.Expect(b.Capabilities()).To(Equal(backend.Capabilities{}))
	for _, op := range []func(context.Context, backend.Artifact) error{b.Stage, b.Activate, b.Verify, b.Commit} {
		g.Expect(op(ctx, a)).To(MatchError(backend.ErrUnsupported))
	}
	g.Expect(b.Rollback(ctx, a)).To(Succeed())
	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Booted).To(Equal("unmanaged"))
}
