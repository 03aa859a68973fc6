package coordinator

import (
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

type fakePolicy struct {
	img     *protocol.OSImage
	present bool
	err     error
}

func (f fakePolicy) ResolveOSImage(*unstructured.Unstructured) (*protocol.OSImage, bool, error) {
	return f.img, f.present, f.err
}

func TestOSImagesFromPolicy(t *testing.T) {
	img := &protocol.OSImage{Backend: "ostree", Ref: "r", Digest: "sha256:x"}
	boom := errors.New("boom")
	tests := []struct {
		name    string
		p       fakePolicy
		want    *protocol.OSImage
		wantErr error
	}{
		{"resolved", fakePolicy{img: img, present: true}, img, nil},
		{"no image field", fakePolicy{}, nil, nil},
		{"unknown kind: not ours", fakePolicy{err: fmt.Errorf("x: %w", policy.ErrUnknownKind)}, nil, nil},
		{"unresolvable: unchanged", fakePolicy{present: true, err: fmt.Errorf("x: %w", policy.ErrUnresolvable)}, nil, nil},
		{"other error", fakePolicy{err: boom}, nil, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := OSImagesFromPolicy(tt.p).ResolveOSImage(&unstructured.Unstructured{})
			if tt.wantErr != nil {
				g.Expect(err).To(MatchError(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestDrainOptionsFromPolicy(t *testing.T) {
	g := NewWithT(t)
	g.Expect(DrainOptionsFromPolicy(policy.Drain{TimeoutSeconds: 90, SkipOnSingleNode: true})).To(Equal(DrainOptions{Timeout: 90 * time.Second}))
	g.Expect(DrainOptionsFromPolicy(policy.Drain{TimeoutSeconds: 60}).EvictSingleNode).To(BeTrue())
}
