package protocol

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
)

// TestDesiredStateIsWhatTheSpecAsks: the desired-state identity changes with
// what a Machine's spec asks of the node (version, files, kubelet args, users,
// NTP, ClusterConfiguration, the OS image's digest, the node) and with nothing
// the policy, the extension or a credential adds.
func TestDesiredStateIsWhatTheSpecAsks(t *testing.T) {
	base := func() *NodePlan {
		p := NewPlan("n1")
		p.Kubernetes = KubernetesPlan{Role: RoleWorker, Version: "v1.36.0", Action: KubeadmUpgradeNode}
		p.Files = []File{{Path: "/etc/motd", Content: []byte("hello")}}
		p.OS = &OSImage{Backend: "bootc", Ref: "registry.example.com/os:1", Digest: "sha256:" + hex64('a')}
		return p
	}
	tests := []struct {
		name string
		mut  func(*NodePlan)
		same bool
	}{
		{name: "a rotated registry credential", same: true, mut: func(p *NodePlan) {
			p.RegistryCredentials = []RegistryCredential{{Registry: "registry.example.com", Username: "u", Password: "rotated"}}
		}},
		{name: "gates in another order", same: true, mut: func(p *NodePlan) {
			p.Gates = []Gate{{Name: "b", Command: []string{"/bin/true"}}, {Name: "a", Command: []string{"/bin/true"}}}
		}},
		{name: "kubeadm binaries from the policy", same: true, mut: func(p *NodePlan) {
			p.Kubernetes.Binaries = &KubernetesBinaries{}
		}},
		{name: "preflight checks, action and etcd snapshot", same: true, mut: func(p *NodePlan) {
			p.Kubernetes.IgnorePreflightErrors = []string{"all"}
			p.Kubernetes.Action, p.Kubernetes.EtcdSnapshot = KubeadmNone, true
		}},
		{name: "OS backend configuration, backend name and download source", same: true, mut: func(p *NodePlan) {
			p.OSBackends = json.RawMessage(`{"bootc":{}}`)
			p.OS.Backend, p.OS.Ref = "rauc", "/var/lib/other"
		}},
		{name: "the Machine reference", same: true, mut: func(p *NodePlan) { p.Machine = MachineRef{Namespace: "ns", Name: "m", UID: "u"} }},
		{name: "the version", mut: func(p *NodePlan) { p.Kubernetes.Version = "v1.36.1" }},
		{name: "a file's content", mut: func(p *NodePlan) { p.Files[0].Content = []byte("bye") }},
		{name: "kubelet args", mut: func(p *NodePlan) { p.KubeletExtraArgs = []Arg{{Name: "v", Value: "2"}} }},
		{name: "users", mut: func(p *NodePlan) { p.Users = json.RawMessage(`[{"name":"ops"}]`) }},
		{name: "NTP", mut: func(p *NodePlan) { p.NTP = json.RawMessage(`{"enabled":true}`) }},
		{name: "ClusterConfiguration", mut: func(p *NodePlan) { p.ClusterConfiguration = json.RawMessage(`{"apiServer":{}}`) }},
		{name: "the OS image", mut: func(p *NodePlan) { p.OS.Digest = "sha256:" + hex64('b') }},
		{name: "the node", mut: func(p *NodePlan) { p.NodeName = "n2" }},
	}
	want, err := base().DesiredState()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p := base()
			tt.mut(p)
			got, err := p.DesiredState()
			g.Expect(err).NotTo(HaveOccurred())
			if tt.same {
				g.Expect(got).To(Equal(want))
			} else {
				g.Expect(got).NotTo(Equal(want))
			}
		})
	}
}

func hex64(c byte) string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return string(b)
}
