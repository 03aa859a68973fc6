package nodeplan

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func machine(version string, controlPlane bool) *clusterv1.Machine {
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1", UID: "uid-1", Labels: map[string]string{}},
		Spec:       clusterv1.MachineSpec{ClusterName: "c1", Version: version},
	}
	if controlPlane {
		m.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	return m
}

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestKubeadmActionFor(t *testing.T) {
	tests := []struct {
		name   string
		role   protocol.Role
		target string
		facts  NodeFacts
		want   protocol.KubeadmAction
	}{
		{"same version", protocol.RoleControlPlane, "v1.36.0", NodeFacts{KubeletVersion: "v1.36.0"}, protocol.KubeadmNone},
		{"same version with build metadata", protocol.RoleWorker, "v1.36.0", NodeFacts{KubeletVersion: "v1.36.0+k0s"}, protocol.KubeadmNone},
		{"no target version", protocol.RoleWorker, "", NodeFacts{KubeletVersion: "v1.35.0"}, protocol.KubeadmNone},
		{"first control-plane node", protocol.RoleControlPlane, "v1.36.0", NodeFacts{KubeletVersion: "v1.35.2"}, protocol.KubeadmUpgradeApply},
		{"later control-plane node", protocol.RoleControlPlane, "v1.36.0", NodeFacts{KubeletVersion: "v1.35.2", ControlPlaneAtTarget: true}, protocol.KubeadmUpgradeNode},
		{"worker", protocol.RoleWorker, "v1.36.0", NodeFacts{KubeletVersion: "v1.35.2", ControlPlaneAtTarget: true}, protocol.KubeadmUpgradeNode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(KubeadmActionFor(tt.role, tt.target, tt.facts)).To(Equal(tt.want))
		})
	}
}

func TestBuild(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("decoded"))
	gzb64 := base64.StdEncoding.EncodeToString(gz(t, "zipped"))
	secrets := map[string]map[string][]byte{"s1": {"crt": []byte("CERT"), "pw": []byte("hash$1")}}

	tests := []struct {
		name    string
		in      Input
		wantErr string
		check   func(g *WithT, p *protocol.NodePlan)
	}{
		{
			name: "worker version bump, files with secret and encodings resolved",
			in: Input{
				Machine:  machine("v1.36.0", false),
				NodeName: "node-1",
				KubeadmConfig: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
					Files: []bootstrapv1.File{
						{Path: "/etc/inline", Content: "hello", Permissions: "0600", Owner: "root:root"},
						{Path: "/etc/secret", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "s1", Key: "crt"}}},
						{Path: "/etc/b64", Content: b64, Encoding: bootstrapv1.Base64},
						{Path: "/etc/gzb64", Content: gzb64, Encoding: bootstrapv1.GzipBase64},
						{Path: "/etc/tpl", Content: "cp={{ .controlPlane.version }}", ContentFormat: bootstrapv1.FileContentFormatTemplate},
						{Path: "/etc/appended", Content: "x", Append: ptr.To(true)},
					},
					JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
						KubeletExtraArgs: []bootstrapv1.Arg{{Name: "max-pods", Value: ptr.To("200")}},
					}},
					NTP: bootstrapv1.NTP{Servers: []string{"ntp.example"}},
				}},
				Secrets:             secrets,
				ControlPlaneVersion: "v1.36.0",
				Node:                NodeFacts{KubeletVersion: "v1.35.2", ControlPlaneAtTarget: true},
			},
			check: func(g *WithT, p *protocol.NodePlan) {
				g.Expect(p.NodeName).To(Equal("node-1"))
				g.Expect(p.Machine).To(Equal(protocol.MachineRef{Namespace: "ns", Name: "m1", UID: "uid-1", Cluster: "c1"}))
				g.Expect(p.Kubernetes).To(Equal(protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}))
				g.Expect(p.Files).To(Equal([]protocol.File{
					{Path: "/etc/inline", Content: []byte("hello"), Permissions: "0600", Owner: "root:root"},
					{Path: "/etc/secret", Content: []byte("CERT")},
					{Path: "/etc/b64", Content: []byte("decoded")},
					{Path: "/etc/gzb64", Content: []byte("zipped")},
					{Path: "/etc/tpl", Content: []byte("cp=v1.36.0")},
				}))
				g.Expect(p.KubeletExtraArgs).To(Equal([]protocol.Arg{{Name: "max-pods", Value: "200"}}))
				g.Expect(string(p.NTP)).To(MatchJSON(`{"servers":["ntp.example"]}`))
				g.Expect(p.ClusterConfiguration).To(BeEmpty(), "workers carry no cluster configuration")
				g.Expect(p.Kubernetes.EtcdSnapshot).To(BeFalse())
			},
		},
		{
			name: "first control-plane node: upgrade apply, etcd snapshot, cluster configuration, user password from secret",
			in: Input{
				Machine:  machine("v1.36.0", true),
				NodeName: "cp-1",
				KubeadmConfig: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
					ClusterConfiguration: bootstrapv1.ClusterConfiguration{ControlPlaneEndpoint: "10.0.0.1:6443"},
					Users:                []bootstrapv1.User{{Name: "ops", PasswdFrom: bootstrapv1.PasswdSource{Secret: bootstrapv1.SecretPasswdSource{Name: "s1", Key: "pw"}}}},
				}},
				Secrets: secrets,
				Node:    NodeFacts{KubeletVersion: "v1.35.2"},
			},
			check: func(g *WithT, p *protocol.NodePlan) {
				g.Expect(p.Kubernetes).To(Equal(protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply, EtcdSnapshot: true}))
				g.Expect(string(p.ClusterConfiguration)).To(ContainSubstring(`"controlPlaneEndpoint":"10.0.0.1:6443"`))
				var users []map[string]any
				g.Expect(json.Unmarshal(p.Users, &users)).To(Succeed())
				g.Expect(users).To(HaveLen(1))
				g.Expect(users[0]).To(HaveKeyWithValue("passwd", "hash$1"))
				g.Expect(users[0]).NotTo(HaveKey("passwdFrom"))
			},
		},
		{
			name: "control plane with external etcd: no snapshot; unchanged version: no kubeadm action",
			in: Input{
				Machine:  machine("v1.36.0", true),
				NodeName: "cp-2",
				KubeadmConfig: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
					ClusterConfiguration: bootstrapv1.ClusterConfiguration{Etcd: bootstrapv1.Etcd{External: bootstrapv1.ExternalEtcd{Endpoints: []string{"https://etcd:2379"}}}},
				}},
				Node: NodeFacts{KubeletVersion: "v1.36.0"},
			},
			check: func(g *WithT, p *protocol.NodePlan) {
				g.Expect(p.Kubernetes.Action).To(Equal(protocol.KubeadmNone))
				g.Expect(p.Kubernetes.EtcdSnapshot).To(BeFalse())
				g.Expect(p.Kubernetes.ExternalEtcd).To(BeTrue(), "the agent's etcd gates and quorum hold skip a node without a member")
				g.Expect(p.Kubernetes.LocalEtcd()).To(BeFalse())
			},
		},
		{
			name: "no kubeadm config, OS image only",
			in: Input{
				Machine:  machine("v1.36.0", false),
				NodeName: "w",
				OS:       &protocol.OSImage{Backend: "simulated", Ref: "img:2", Digest: "sha256:" + string(bytes.Repeat([]byte("a"), 64))},
				Node:     NodeFacts{KubeletVersion: "v1.36.0"},
			},
			check: func(g *WithT, p *protocol.NodePlan) {
				g.Expect(p.OS).NotTo(BeNil())
				g.Expect(p.OS.Ref).To(Equal("img:2"))
				g.Expect(p.Files).To(BeEmpty())
			},
		},
		{
			name: "machine without version keeps the kubelet's",
			in:   Input{Machine: machine("", false), NodeName: "w", Node: NodeFacts{KubeletVersion: "v1.35.1"}},
			check: func(g *WithT, p *protocol.NodePlan) {
				g.Expect(p.Kubernetes.Version).To(Equal("v1.35.1"))
				g.Expect(p.Kubernetes.Action).To(Equal(protocol.KubeadmNone))
			},
		},
		{
			name: "missing secret",
			in: Input{Machine: machine("v1.36.0", false), NodeName: "w", Node: NodeFacts{KubeletVersion: "v1.36.0"},
				KubeadmConfig: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{
					{Path: "/x", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "gone", Key: "k"}}},
				}}}},
			wantErr: "file /x: secret gone not found",
		},
		{
			name: "missing secret key",
			in: Input{Machine: machine("v1.36.0", false), NodeName: "w", Node: NodeFacts{KubeletVersion: "v1.36.0"}, Secrets: secrets,
				KubeadmConfig: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{
					{Path: "/x", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "s1", Key: "nope"}}},
				}}}},
			wantErr: `file /x: secret s1 has no key "nope"`,
		},
		{
			name: "bad base64",
			in: Input{Machine: machine("v1.36.0", false), NodeName: "w", Node: NodeFacts{KubeletVersion: "v1.36.0"},
				KubeadmConfig: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{
					{Path: "/x", Content: "!!!", Encoding: bootstrapv1.Base64},
				}}}},
			wantErr: "file /x: decode base64",
		},
		{
			name:    "no version anywhere",
			in:      Input{Machine: machine("", false), NodeName: "w"},
			wantErr: "has no spec.version",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, err := Build(tt.in)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(errors.Is(err, ErrInput)).To(BeTrue())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			tt.check(g, p)
			again, err := Build(tt.in)
			g.Expect(err).NotTo(HaveOccurred())
			h1, _ := p.Hash()
			h2, _ := again.Hash()
			g.Expect(h1).To(Equal(h2), "same input, same hash")
		})
	}
}

func TestPin(t *testing.T) {
	base := func(action protocol.KubeadmAction, file string) *protocol.NodePlan {
		p := protocol.NewPlan("cp-1")
		p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: action, EtcdSnapshot: action != protocol.KubeadmNone}
		p.Files = []protocol.File{{Path: "/f", Content: []byte(file)}}
		return p
	}
	tests := []struct {
		name       string
		built      *protocol.NodePlan
		published  *protocol.NodePlan
		wantAction protocol.KubeadmAction
	}{
		{"nothing published", base(protocol.KubeadmNone, "a"), nil, protocol.KubeadmNone},
		{"same update after kubeadm ran: keeps the published action", base(protocol.KubeadmNone, "a"), base(protocol.KubeadmUpgradeApply, "a"), protocol.KubeadmUpgradeApply},
		{"different content: a new update, newly decided", base(protocol.KubeadmNone, "b"), base(protocol.KubeadmUpgradeApply, "a"), protocol.KubeadmNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := Pin(tt.built, tt.published)
			g.Expect(got.Kubernetes.Action).To(Equal(tt.wantAction))
			if tt.published != nil && tt.wantAction == tt.published.Kubernetes.Action {
				h1, _ := got.Hash()
				h2, _ := tt.published.Hash()
				g.Expect(h1).To(Equal(h2), "a pinned plan has the published hash")
			}
		})
	}
}
