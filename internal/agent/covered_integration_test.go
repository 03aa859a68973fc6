package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestCoveredFieldsReachTheHost: for every KubeadmConfig field the planner
// covers on a worker, the change is on the host after the agent committed the
// plan (issue 12 section 8: what we report as covered is what the node gets).
// Fields kubeadm applies (component args, etcd, version) are asserted by the
// control-plane tests; the planner stops covering what the agent cannot apply
// (removed args, files and users, append files, NTP disable, certSANs).
func TestCoveredFieldsReachTheHost(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "wk-covered", "v1.36.0", false)
	n.start()
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	// What bootstrap left: an existing file and user.
	g.Expect(os.MkdirAll(filepath.Join(n.root, "etc/app"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(n.root, "etc/app/app.conf"), []byte("old\n"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(n.root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nops:x:1000:1000::/home/ops:/bin/sh\n"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(n.root, "etc/group"), []byte("root:x:0:\nwheel:x:10:\n"), 0o644)).To(Succeed())

	p := protocol.NewPlan(n.name)
	p.Machine = protocol.MachineRef{Namespace: "default", Name: n.name, Cluster: "c1"}
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmNone}
	p.Files = []protocol.File{
		{Path: "/etc/app/app.conf", Content: []byte("new\n")},
		{Path: "/etc/app/secret.conf", Content: []byte("token\n"), Permissions: "0600", Owner: "root:root"},
	}
	p.KubeletExtraArgs = []protocol.Arg{{Name: "max-pods", Value: "200"}, {Name: "v", Value: "4"}}
	users, _ := json.Marshal([]map[string]any{
		{"name": "ops", "shell": "/bin/bash", "sshAuthorizedKeys": []string{"ssh-ed25519 AAAA ops@example"}},
		{"name": "deploy", "groups": "wheel", "passwd": "$6$salt$deployhash", "sudo": "ALL=(ALL) NOPASSWD:ALL"},
	})
	p.Users = users
	p.NTP = json.RawMessage(`{"servers":["time1.example.com","time2.example.com"]}`)
	hash := n.publishPlan(p)
	n.waitPhase(g, hash, protocol.PhaseCommitted, 60*time.Second)

	mode := func(p string) os.FileMode {
		info, err := os.Stat(filepath.Join(n.root, p))
		g.Expect(err).NotTo(HaveOccurred())
		return info.Mode().Perm()
	}
	t.Run("files: changed content", func(t *testing.T) {
		NewWithT(t).Expect(n.read("etc/app/app.conf")).To(Equal("new\n"))
	})
	t.Run("files: added, with permissions", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(n.read("etc/app/secret.conf")).To(Equal("token\n"))
		g.Expect(mode("etc/app/secret.conf")).To(Equal(os.FileMode(0o600)))
	})
	t.Run("kubeletExtraArgs: changed and added, kubeadm's own kept", func(t *testing.T) {
		NewWithT(t).Expect(n.read("var/lib/kubelet/kubeadm-flags.env")).To(Equal(
			`KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --max-pods=200 --v=4"` + "\n"))
	})
	t.Run("users: existing user changed", func(t *testing.T) {
		NewWithT(t).Expect(n.read("etc/passwd")).To(ContainSubstring("ops:x:1000:1000::/home/ops:/bin/bash\n"))
	})
	t.Run("users: new user with password hash", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(n.read("etc/passwd")).To(MatchRegexp(`(?m)^deploy:x:\d+:`))
		g.Expect(n.read("etc/shadow")).To(ContainSubstring("deploy:$6$salt$deployhash:"))
	})
	t.Run("users: sudo rule", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(n.read("etc/sudoers.d/90-capi-inplace-deploy")).To(Equal("deploy ALL=(ALL) NOPASSWD:ALL\n"))
		g.Expect(mode("etc/sudoers.d/90-capi-inplace-deploy")).To(Equal(os.FileMode(0o440)))
	})
	t.Run("users: SSH authorized keys", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(n.read("home/ops/.ssh/authorized_keys")).To(Equal("ssh-ed25519 AAAA ops@example\n"))
		g.Expect(mode("home/ops/.ssh/authorized_keys")).To(Equal(os.FileMode(0o600)))
	})
	t.Run("ntp: servers", func(t *testing.T) {
		conf := n.read("etc/chrony/conf.d/capi-inplace.conf")
		NewWithT(t).Expect(strings.Contains(conf, "server time1.example.com iburst\nserver time2.example.com iburst\n")).To(BeTrue(), conf)
	})
}
