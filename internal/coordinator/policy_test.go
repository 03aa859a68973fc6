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

// OSImageValue reads spec.image.
func (f fakePolicy) OSImageValue(obj *unstructured.Unstructured) (string, error) {
	v, _, err := unstructured.NestedString(obj.Object, "spec", "image")
	return v, err
}

// TestUnmappedOSImageChange: an image change the policy does not map is named (the
// in-process entry refuses it); an unchanged image, a resolved one and one not under
// our management pass.
func TestUnmappedOSImageChange(t *testing.T) {
	img := &protocol.OSImage{Backend: "ostree", Ref: "r", Digest: "sha256:x"}
	infra := func(image string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"kind": "DevMachine", "spec": map[string]any{"image": image}}}
		u.SetName("m1")
		return u
	}
	unresolvable := fakePolicy{present: true, err: fmt.Errorf("x: not mapped: %w", policy.ErrUnresolvable)}
	tests := []struct {
		name             string
		p                fakePolicy
		current, desired *unstructured.Unstructured
		want             string
	}{
		{"unmapped change", unresolvable, infra("os-a"), infra("os-b"), "DevMachine m1 changes its OS image from os-a to os-b, which cannot be applied in place: x: not mapped: image cannot be resolved to an OS artifact"},
		{"unmapped, unchanged: not ours", unresolvable, infra("os-a"), infra("os-a"), ""},
		{"mapped change", fakePolicy{img: img, present: true}, infra("os-a"), infra("os-b"), ""},
		{"unknown kind", fakePolicy{err: fmt.Errorf("x: %w", policy.ErrUnknownKind)}, infra("os-a"), infra("os-b"), ""},
		{"no stored object", unresolvable, nil, infra("os-b"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			judge, ok := OSImagesFromPolicy(tt.p).(osImageChangeJudge)
			g.Expect(ok).To(BeTrue())
			why, err := judge.UnmappedOSImageChange(tt.current, tt.desired)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(why).To(Equal(tt.want))
		})
	}
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
	g.Expect(DrainOptionsFromPolicy(policy.Drain{TimeoutSeconds: 60, Force: true}).Force).To(BeTrue(), "the policy's drain.force reaches the drain")
}
