package nodeplan

import (
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func testKey(t *testing.T) *ecdh.PrivateKey {
	t.Helper()
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func cpPlan(action protocol.KubeadmAction, file string) *protocol.NodePlan {
	p := protocol.NewPlan("cp-1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: action, EtcdSnapshot: action != protocol.KubeadmNone}
	p.Files = []protocol.File{{Path: "/f", Content: []byte(file)}}
	return p
}

func TestAgentKey(t *testing.T) {
	key := testKey(t)
	tests := []struct {
		name    string
		ann     map[string]string
		wantErr error
	}{
		{"published", map[string]string{inplacev1.AgentKeyAnnotation: protocol.FormatAgentKey(key.PublicKey())}, nil},
		{"no annotations", nil, ErrNoAgentKey},
		{"empty value", map[string]string{inplacev1.AgentKeyAnnotation: ""}, ErrNoAgentKey},
		{"garbage", map[string]string{inplacev1.AgentKeyAnnotation: "x25519:nope"}, protocol.ErrInvalidAgentKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			pub, err := AgentKey(tt.ann)
			if tt.wantErr != nil {
				g.Expect(errors.Is(err, tt.wantErr)).To(BeTrue(), "got %v", err)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pub.Equal(key.PublicKey())).To(BeTrue())
		})
	}
}

func TestHoldsFollowsPlanAndKey(t *testing.T) {
	oldKey, newKey := testKey(t), testKey(t)
	p := cpPlan(protocol.KubeadmUpgradeApply, "a")
	hash, _ := p.Hash()
	stored, err := Seal(p, oldKey.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	other, _ := cpPlan(protocol.KubeadmUpgradeApply, "b").Hash()
	tests := []struct {
		name   string
		stored []byte
		hash   string
		key    *ecdh.PublicKey
		want   bool
	}{
		{"same plan, same key: nothing to write", stored, hash, oldKey.PublicKey(), true},
		{"node key changed: seal again", stored, hash, newKey.PublicKey(), false},
		{"new plan", stored, other, oldKey.PublicKey(), false},
		{"nothing stored", nil, hash, oldKey.PublicKey(), false},
		{"a plain plan stored", []byte(`{"kind":"NodePlan"}`), hash, oldKey.PublicKey(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(Holds(tt.stored, tt.hash, tt.key)).To(Equal(tt.want))
		})
	}
}

func TestPinPublished(t *testing.T) {
	key := testKey(t)
	seal := func(p *protocol.NodePlan) *protocol.SealedPlan {
		data, err := Seal(p, key.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		return Published(data)
	}
	tests := []struct {
		name       string
		built      *protocol.NodePlan
		published  *protocol.SealedPlan
		wantAction protocol.KubeadmAction
		wantSame   bool
	}{
		{"nothing published", cpPlan(protocol.KubeadmNone, "a"), nil, protocol.KubeadmNone, false},
		{"same update after kubeadm ran: keeps the published action", cpPlan(protocol.KubeadmNone, "a"), seal(cpPlan(protocol.KubeadmUpgradeApply, "a")), protocol.KubeadmUpgradeApply, true},
		{"different content: a new update, newly decided", cpPlan(protocol.KubeadmNone, "b"), seal(cpPlan(protocol.KubeadmUpgradeApply, "a")), protocol.KubeadmNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := PinPublished(tt.built, tt.published)
			g.Expect(got.Kubernetes.Action).To(Equal(tt.wantAction))
			if tt.wantSame {
				h, _ := got.Hash()
				g.Expect(h).To(Equal(tt.published.PlanHash), "a pinned plan has the published hash")
			}
		})
	}
}

func TestPinRetried(t *testing.T) {
	key := testKey(t)
	seal := func(p *protocol.NodePlan, mutate func(*protocol.SealedPlan)) *protocol.SealedPlan {
		data, err := Seal(p, key.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		sp := Published(data)
		if mutate != nil {
			mutate(sp)
		}
		return sp
	}
	fixed := func(p *protocol.NodePlan) *protocol.NodePlan {
		p.Gates = []protocol.Gate{{Name: "fixed", Command: []string{"/bin/true"}}}
		return p
	}
	withdrawn := seal(cpPlan(protocol.KubeadmUpgradeApply, "a"), nil)
	tests := []struct {
		name       string
		built      *protocol.NodePlan
		withdrawn  *protocol.SealedPlan
		wantAction protocol.KubeadmAction
	}{
		{"nothing withdrawn", fixed(cpPlan(protocol.KubeadmNone, "a")), nil, protocol.KubeadmNone},
		{"policy fixed since, same desired state: the withdrawn kubeadm step", fixed(cpPlan(protocol.KubeadmNone, "a")), withdrawn, protocol.KubeadmUpgradeApply},
		{"another desired state: newly decided", fixed(cpPlan(protocol.KubeadmNone, "b")), withdrawn, protocol.KubeadmNone},
		{"withdrawn from another node", fixed(cpPlan(protocol.KubeadmNone, "a")),
			seal(cpPlan(protocol.KubeadmUpgradeApply, "a"), func(sp *protocol.SealedPlan) { sp.NodeName = "cp-2" }), protocol.KubeadmNone},
		{"sealed before desired states", fixed(cpPlan(protocol.KubeadmNone, "a")),
			seal(cpPlan(protocol.KubeadmUpgradeApply, "a"), func(sp *protocol.SealedPlan) { sp.DesiredState = "" }), protocol.KubeadmNone},
		{"a pin no plan can carry", fixed(cpPlan(protocol.KubeadmNone, "a")),
			seal(cpPlan(protocol.KubeadmUpgradeApply, "a"), func(sp *protocol.SealedPlan) { sp.Pin.Action = "reset" }), protocol.KubeadmNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := PinRetried(tt.built, tt.withdrawn)
			g.Expect(got.Kubernetes.Action).To(Equal(tt.wantAction))
			g.Expect(got.Gates).To(Equal(tt.built.Gates), "the rest is the new build's")
		})
	}
}

func TestPublishedIgnoresWhatIsNotSealed(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Published(nil)).To(BeNil())
	g.Expect(Published([]byte("garbage"))).To(BeNil())
}
