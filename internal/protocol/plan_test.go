package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func validPlan() *NodePlan {
	p := NewPlan("worker-1")
	p.Machine = MachineRef{Namespace: "default", Name: "md-0-abc", Cluster: "c1"}
	p.Kubernetes = KubernetesPlan{Role: RoleWorker, Version: "v1.36.0", Action: KubeadmUpgradeNode}
	p.Files = []File{{Path: "/etc/motd", Content: []byte("hello"), Permissions: "0644"}}
	p.OS = &OSImage{Backend: "ostree", Ref: "os:v2", Digest: "sha256:" + strings.Repeat("ab", 32)}
	return p
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(p *NodePlan)
		wantErr string
	}{
		{name: "valid plan", mutate: func(*NodePlan) {}},
		{name: "wrong apiVersion", mutate: func(p *NodePlan) { p.APIVersion = "v1" }, wantErr: "apiVersion"},
		{name: "wrong kind", mutate: func(p *NodePlan) { p.Kind = "Plan" }, wantErr: "kind"},
		{name: "empty node name", mutate: func(p *NodePlan) { p.NodeName = "" }, wantErr: "nodeName"},
		{name: "uppercase node name", mutate: func(p *NodePlan) { p.NodeName = "Node1" }, wantErr: "nodeName"},
		{name: "unknown role", mutate: func(p *NodePlan) { p.Kubernetes.Role = "etcd" }, wantErr: "role"},
		{name: "version without v", mutate: func(p *NodePlan) { p.Kubernetes.Version = "1.36.0" }, wantErr: "version"},
		{name: "unknown action", mutate: func(p *NodePlan) { p.Kubernetes.Action = "reset" }, wantErr: "action"},
		{name: "upgrade-apply on a worker", mutate: func(p *NodePlan) { p.Kubernetes.Action = KubeadmUpgradeApply }, wantErr: "only valid on a control-plane"},
		{name: "relative file path", mutate: func(p *NodePlan) { p.Files[0].Path = "etc/motd" }, wantErr: "files[0].path"},
		{name: "unclean file path", mutate: func(p *NodePlan) { p.Files[0].Path = "/etc/../root/x" }, wantErr: "files[0].path"},
		{name: "duplicate file", mutate: func(p *NodePlan) { p.Files = append(p.Files, p.Files[0]) }, wantErr: "listed twice"},
		{name: "bad mode", mutate: func(p *NodePlan) { p.Files[0].Permissions = "rw-r--r--" }, wantErr: "octal"},
		{name: "digest not sha256", mutate: func(p *NodePlan) { p.OS.Digest = "md5:abc" }, wantErr: "os.digest"},
		{name: "os without backend", mutate: func(p *NodePlan) { p.OS.Backend = "" }, wantErr: "os.backend"},
		{name: "invalid raw users", mutate: func(p *NodePlan) { p.Users = json.RawMessage("{") }, wantErr: "users is not valid JSON"},
		{name: "gate without command", mutate: func(p *NodePlan) { p.Gates = []Gate{{Name: "x"}} }, wantErr: "gates: [0] has none of command, httpGet and cel"},
		{name: "preflight exceptions", mutate: func(p *NodePlan) {
			p.Kubernetes.IgnorePreflightErrors = []string{"SystemVerification", "CoreDNSMigration", "Port-6443", "FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml"}
		}},
		{name: "every preflight check", mutate: func(p *NodePlan) { p.Kubernetes.IgnorePreflightErrors = []string{"all"} }},
		{name: "preflight check with a comma", mutate: func(p *NodePlan) { p.Kubernetes.IgnorePreflightErrors = []string{"Swap,NumCPU"} },
			wantErr: `kubernetes.ignorePreflightErrors: [0] "Swap,NumCPU" is not a kubeadm preflight check name`},
		{name: "preflight check smuggling a flag", mutate: func(p *NodePlan) { p.Kubernetes.IgnorePreflightErrors = []string{"--v=10"} }, wantErr: "is not a kubeadm preflight check name"},
		{name: "empty preflight check", mutate: func(p *NodePlan) { p.Kubernetes.IgnorePreflightErrors = []string{""} }, wantErr: "is not a kubeadm preflight check name"},
		{name: "preflight check twice", mutate: func(p *NodePlan) { p.Kubernetes.IgnorePreflightErrors = []string{"Swap", "swap"} }, wantErr: `[1] "swap" is listed twice`},
		{name: "all with others", mutate: func(p *NodePlan) { p.Kubernetes.IgnorePreflightErrors = []string{"All", "Swap"} }, wantErr: `"all" must be the only entry`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p := validPlan()
			tt.mutate(p)
			err := p.Validate()
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(errors.Is(err, ErrInvalidPlan)).To(BeTrue())
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}

func TestHashIsStableAndContentSensitive(t *testing.T) {
	g := NewWithT(t)
	a, err := validPlan().Hash()
	g.Expect(err).NotTo(HaveOccurred())
	b, err := validPlan().Hash()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a).To(Equal(b))
	g.Expect(a).To(HaveLen(32))

	changed := validPlan()
	changed.Files[0].Content = []byte("hello!")
	c, err := changed.Hash()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c).NotTo(Equal(a))
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	g := NewWithT(t)
	data, err := EncodePlan(validPlan())
	g.Expect(err).NotTo(HaveOccurred())
	got, err := DecodePlan(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(validPlan()))
}

func TestDecodePlanRefusesBadInput(t *testing.T) {
	good, err := EncodePlan(validPlan())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		data    string
		wantErr string
	}{
		{name: "empty", data: "", wantErr: "decode"},
		{name: "garbage", data: "not json", wantErr: "decode"},
		{name: "unknown field beside a value of the wrong type", data: strings.Replace(strings.Replace(string(good), `"kind"`, `"extra":1,"kind"`, 1), `"worker-1"`, `1`, 1), wantErr: "unknown field"},
		{name: "trailing data", data: string(good) + "{}", wantErr: "trailing"},
		{name: "invalid content", data: strings.Replace(string(good), `"worker-1"`, `"Worker 1"`, 1), wantErr: "nodeName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := DecodePlan([]byte(tt.data))
			g.Expect(err).To(MatchError(ErrInvalidPlan))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}

// TestDecodeNewerThanAgent: a plan or sealed envelope that decodes once its
// unknown fields are left out was written by a newer coordinator: refused with
// ErrPlanNewerThanAgent (the agent waits for the agent that knows them), never
// ErrInvalidPlan (which the agent journals as a failure for good).
func TestDecodeNewerThanAgent(t *testing.T) {
	g := NewWithT(t)
	plain, err := EncodePlan(validPlan())
	g.Expect(err).NotTo(HaveOccurred())
	_, err = DecodePlan([]byte(strings.Replace(string(plain), `"kind"`, `"artifactSources":[],"kind"`, 1)))
	g.Expect(err).To(MatchError(ErrPlanNewerThanAgent))
	g.Expect(err).NotTo(MatchError(ErrInvalidPlan))
	g.Expect(err.Error()).To(ContainSubstring(`unknown field "artifactSources"`))

	sealed, err := SealPlan(validPlan(), newKey(t).PublicKey(), testPin)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = DecodeSealedPlan(bytes.Replace(sealed, []byte(`"kind"`), []byte(`"signature":"x","kind"`), 1))
	g.Expect(err).To(MatchError(ErrPlanNewerThanAgent))
	g.Expect(err).NotTo(MatchError(ErrInvalidPlan))
}

func TestPreflightFlag(t *testing.T) {
	g := NewWithT(t)
	g.Expect(KubernetesPlan{}.PreflightFlag()).To(BeEmpty())
	g.Expect(KubernetesPlan{IgnorePreflightErrors: []string{"CoreDNSMigration", "SystemVerification"}}.PreflightFlag()).
		To(Equal([]string{"--ignore-preflight-errors=CoreDNSMigration,SystemVerification"}))
}
