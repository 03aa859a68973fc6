package kube

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func write(t *testing.T, root, p, content string, mode os.FileMode) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		return "<missing>"
	}
	return string(b)
}

func TestBackupWriteRestore(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	root := t.TempDir()
	h := &Host{Root: root, Runner: &backendtest.Runner{}}
	write(t, root, "/etc/existing.conf", "old\n", 0o640)
	write(t, root, KubeadmFlagsPath, `KUBELET_KUBEADM_ARGS="--node-ip=10.0.0.1 --v=2"`+"\n", 0o644)

	p := protocol.NewPlan("n1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmNone}
	p.Files = []protocol.File{
		{Path: "/etc/existing.conf", Content: []byte("new\n"), Permissions: "0600"},
		{Path: "/etc/new/created.conf", Content: []byte("created\n"), Owner: "root:root"},
	}
	g.Expect(h.BackupSet(p)).To(Equal([]string{"/etc/existing.conf", "/etc/new/created.conf", KubeadmFlagsPath, KubeletConfig, KubeletInstanceConfig}))

	g.Expect(h.Backup(ctx, "h1", h.BackupSet(p))).To(Succeed())
	g.Expect(h.WriteFiles(ctx, p.Files)).To(Succeed())
	g.Expect(h.KubeletFlags(ctx, []protocol.Arg{{Name: "v", Value: "4"}, {Name: "max-pods", Value: "50"}})).To(Succeed())
	// A repeated backup (crash, resume) must keep the pre-change copies.
	g.Expect(h.Backup(ctx, "h1", h.BackupSet(p))).To(Succeed())

	g.Expect(read(t, root, "/etc/existing.conf")).To(Equal("new\n"))
	info, err := os.Stat(filepath.Join(root, "/etc/existing.conf"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	g.Expect(read(t, root, "/etc/new/created.conf")).To(Equal("created\n"))
	g.Expect(read(t, root, KubeadmFlagsPath)).To(Equal(`KUBELET_KUBEADM_ARGS="--node-ip=10.0.0.1 --v=4 --max-pods=50"` + "\n"))

	for i := 0; i < 2; i++ { // idempotent
		g.Expect(h.Restore(ctx, "h1")).To(Succeed())
	}
	g.Expect(read(t, root, "/etc/existing.conf")).To(Equal("old\n"))
	info, _ = os.Stat(filepath.Join(root, "/etc/existing.conf"))
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o640)))
	g.Expect(read(t, root, "/etc/new/created.conf")).To(Equal("<missing>"))
	g.Expect(read(t, root, KubeadmFlagsPath)).To(Equal(`KUBELET_KUBEADM_ARGS="--node-ip=10.0.0.1 --v=2"` + "\n"))
	g.Expect(read(t, root, KubeletConfig)).To(Equal("<missing>"))
}

func TestRestoreWithoutBackupIsANoop(t *testing.T) {
	g := NewWithT(t)
	h := &Host{Root: t.TempDir(), Runner: &backendtest.Runner{}}
	g.Expect(h.Restore(context.Background(), "never")).To(Succeed())
}

func TestUnknownOwnerIsRefusedBeforeWriting(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	write(t, root, "/etc/passwd", "root:x:0:0::/root:/bin/sh\nkube:x:1000:1001::/:/bin/false\n", 0o644)
	h := &Host{Root: root, Runner: &backendtest.Runner{}}
	uid, gid, err := h.lookupOwner("kube")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]int{uid, gid}).To(Equal([]int{1000, 1001}))
	err = h.WriteFiles(context.Background(), []protocol.File{{Path: "/etc/x", Content: []byte("x"), Owner: "nobody-here"}})
	g.Expect(err).To(MatchError(ContainSubstring("nobody-here not found in the host's /etc/passwd")))
	g.Expect(read(t, root, "/etc/x")).To(Equal("<missing>"))
}

func TestCommands(t *testing.T) {
	tests := []struct {
		name    string
		do      func(h *Host) error
		runner  func(r *backendtest.Runner)
		want    []string
		wantErr string
	}{
		{"upgrade apply", func(h *Host) error {
			return h.KubeadmUpgrade(context.Background(), protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply})
		}, func(r *backendtest.Runner) { r.On("kubeadm", "", nil) }, []string{"kubeadm upgrade apply phase preflight v1.36.0 --yes", "kubeadm upgrade apply v1.36.0 --yes --skip-phases=preflight"}, ""},
		{"upgrade apply of a kubeadm without phases", func(h *Host) error {
			return h.KubeadmUpgrade(context.Background(), protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.31.4", Action: protocol.KubeadmUpgradeApply})
		}, func(r *backendtest.Runner) { r.On("kubeadm", "", nil) }, []string{"kubeadm upgrade apply v1.31.4 --yes"}, ""},
		{"upgrade node", func(h *Host) error {
			return h.KubeadmUpgrade(context.Background(), protocol.KubernetesPlan{Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode})
		}, func(r *backendtest.Runner) { r.On("kubeadm", "", nil) }, []string{"kubeadm upgrade node"}, ""},
		{"upgrade fails with kubeadm's message", func(h *Host) error {
			return h.KubeadmUpgrade(context.Background(), protocol.KubernetesPlan{Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode})
		}, func(r *backendtest.Runner) { r.On("kubeadm", "", errors.New("couldn't create a Kubernetes client")) },
			[]string{"kubeadm upgrade node"}, "kubeadm upgrade: kubeadm upgrade node: couldn't create a Kubernetes client"},
		{"kubeadm present", func(h *Host) error {
			return h.InstallKubeadm(context.Background(), protocol.KubernetesPlan{Version: "v1.36.0"})
		},
			func(r *backendtest.Runner) { r.On("kubeadm version", "v1.36.0\n", nil) }, []string{"kubeadm version -o short"}, ""},
		{"kubeadm missing", func(h *Host) error {
			return h.InstallKubeadm(context.Background(), protocol.KubernetesPlan{Version: "v1.36.0"})
		},
			func(r *backendtest.Runner) { r.On("kubeadm version", "v1.35.2\n", nil) }, []string{"kubeadm version -o short"},
			"kubeadm on the node is v1.35.2, the plan needs v1.36.0"},
		{"restart kubelet", func(h *Host) error { return h.RestartKubelet(context.Background()) },
			func(r *backendtest.Runner) { r.On("systemctl", "", nil) }, []string{"systemctl daemon-reload", "systemctl restart kubelet"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &backendtest.Runner{}
			tt.runner(r)
			h := &Host{Root: t.TempDir(), Runner: r}
			err := tt.do(h)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
			if tt.want != nil {
				g.Expect(r.Calls()).To(Equal(tt.want))
			}
		})
	}
}

func TestMergeKubeletFlags(t *testing.T) {
	tests := []struct {
		name string
		env  string
		args []protocol.Arg
		want string
	}{
		{"empty file", "", []protocol.Arg{{Name: "v", Value: "2"}}, `KUBELET_KUBEADM_ARGS="--v=2"` + "\n"},
		{"replace and append, keep other lines", "# kubeadm\nKUBELET_KUBEADM_ARGS=\"--a=1 --b=2\"\n", []protocol.Arg{{Name: "b", Value: "3"}, {Name: "c", Value: "4"}},
			"# kubeadm\nKUBELET_KUBEADM_ARGS=\"--a=1 --b=3 --c=4\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(MergeKubeletFlags(tt.env, tt.args)).To(Equal(tt.want))
		})
	}
}

func TestUsersAndNTP(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	root := t.TempDir()
	write(t, root, "/etc/passwd", "root:x:0:0::/root:/bin/sh\nops:x:1000:1000::/srv/ops:/bin/sh\n", 0o644)
	g.Expect(os.MkdirAll(filepath.Join(root, chronyConfDir), 0o755)).To(Succeed())
	r := &backendtest.Runner{}
	r.On("useradd", "", nil).On("usermod", "", nil).On("chpasswd", "", nil).On("systemctl", "", nil)
	h := &Host{Root: root, Runner: r}
	yes := true
	users, _ := json.Marshal([]User{
		{Name: "ops", Shell: "/bin/bash", Sudo: "ALL=(ALL) NOPASSWD:ALL", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA ops"}},
		{Name: "deploy", Groups: "docker,wheel", Passwd: "$6$hash", LockPassword: &yes},
	})
	ntp := json.RawMessage(`{"servers":["time1.example.com","time2.example.com"],"enabled":true}`)
	p := protocol.NewPlan("n1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmNone}
	p.Users, p.NTP = users, ntp
	g.Expect(h.BackupSet(p)).To(Equal([]string{"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow",
		"/etc/sudoers.d/90-capi-inplace-ops", "/srv/ops/.ssh/authorized_keys", chronyConf, KubeadmFlagsPath, KubeletConfig, KubeletInstanceConfig}))

	g.Expect(h.ApplyUsers(ctx, users)).To(Succeed())
	g.Expect(r.Calls()).To(Equal([]string{
		"usermod -s /bin/bash ops",
		"useradd -m -G docker,wheel deploy",
		"chpasswd -e",
		"usermod -L deploy",
	}))
	g.Expect(read(t, root, "/etc/sudoers.d/90-capi-inplace-ops")).To(Equal("ops ALL=(ALL) NOPASSWD:ALL\n"))
	g.Expect(read(t, root, "/srv/ops/.ssh/authorized_keys")).To(Equal("ssh-ed25519 AAAA ops\n"))

	g.Expect(h.ApplyNTP(ctx, ntp)).To(Succeed())
	g.Expect(read(t, root, chronyConf)).To(ContainSubstring("server time1.example.com iburst\nserver time2.example.com iburst\n"))
	g.Expect(r.Calls()[len(r.Calls())-1]).To(Equal("systemctl restart chrony"))

	g.Expect(protocol.NTPEnabled(json.RawMessage(`{"servers":["a"],"enabled":false}`))).To(BeFalse())
	_, err := DecodeUsers(json.RawMessage(`[{"name":"bad:name"}]`))
	g.Expect(err).To(HaveOccurred())
	err = (&Host{Root: t.TempDir(), Runner: r}).ApplyNTP(ctx, ntp)
	g.Expect(err).To(MatchError(ContainSubstring("no supported NTP client")))
}
