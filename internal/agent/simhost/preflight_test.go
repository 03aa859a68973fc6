package simhost

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestPreflightFailsLikeTheRealNode: a simulated node set up like the real-node
// lane (cgroup v1, no CoreDNS) refuses kubeadm upgrade apply and node until the
// plan carries the exceptions, and its instance-config.yaml is rewritten by the
// upgrade and put back by the rollback.
func TestPreflightFailsLikeTheRealNode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h := New(t.TempDir(), "n1", nil, logr.Discard())
	g.Expect(h.Init(ctx, Options{KubernetesVersion: "v1.35.4", ControlPlane: true,
		PreflightFailures: []string{CheckSystemVerification, CheckCoreDNSUnsupportedPlugins, CheckCoreDNSMigration}})).To(Succeed())
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, PreflightRetryPause: time.Millisecond}
	before, err := os.ReadFile(h.path(kube.KubeletInstanceConfig))
	g.Expect(err).NotTo(HaveOccurred(), "kubeadm 1.35+ writes instance-config.yaml at init")
	g.Expect(k.InstallKubeadm(ctx, protocol.KubernetesPlan{Version: "v1.36.3"})).To(Succeed())

	apply := protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.3", Action: protocol.KubeadmUpgradeApply}
	// The agent keeps the tail of kubeadm's stderr: the cgroup message's end, and
	// every check name after it.
	err = k.KubeadmUpgrade(ctx, apply)
	g.Expect(err).To(MatchError(ContainSubstring("FailCgroupV1")))
	g.Expect(err).To(MatchError(ContainSubstring("[ERROR CoreDNSUnsupportedPlugins]")))
	g.Expect(err).To(MatchError(ContainSubstring("[ERROR CoreDNSMigration]")))
	apply.IgnorePreflightErrors = []string{"SystemVerification"}
	err = k.KubeadmUpgrade(ctx, apply)
	g.Expect(err).To(MatchError(ContainSubstring("[ERROR CoreDNSUnsupportedPlugins]")), "every failing check must be listed")
	g.Expect(err.Error()).NotTo(ContainSubstring("FailCgroupV1"), "SystemVerification is ignored")
	img, _ := h.manifestImage("kube-apiserver")
	g.Expect(img).To(Equal("registry.k8s.io/kube-apiserver:v1.35.4"), "a refused upgrade changes nothing")

	// upgrade node runs SystemVerification but not the CoreDNS checks.
	node := protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.3", Action: protocol.KubeadmUpgradeNode}
	for _, run := range []func() error{func() error { return k.KubeadmUpgrade(ctx, node) }, func() error { return k.ControlPlaneConfig(ctx, &protocol.NodePlan{Kubernetes: node}) }} {
		err := run()
		g.Expect(err).To(MatchError(ContainSubstring("FailCgroupV1")))
		g.Expect(err.Error()).NotTo(ContainSubstring("CoreDNS"))
	}

	apply.IgnorePreflightErrors = []string{"CoreDNSMigration", "CoreDNSUnsupportedPlugins", "SystemVerification"}
	plan := &protocol.NodePlan{Kubernetes: apply}
	g.Expect(k.Backup(ctx, "h1", k.BackupSet(plan))).To(Succeed())
	g.Expect(k.KubeadmUpgrade(ctx, apply)).To(Succeed())
	after, _ := os.ReadFile(h.path(kube.KubeletInstanceConfig))
	g.Expect(string(after)).To(ContainSubstring("written by kubeadm v1.36.3"))
	g.Expect(k.Restore(ctx, "h1")).To(Succeed())
	restored, _ := os.ReadFile(h.path(kube.KubeletInstanceConfig))
	g.Expect(string(restored)).To(Equal(string(before)))
}

// TestPreflightIsOptIn: without preflight-failures every check passes, so the
// demo and e2e policies need no exceptions.
func TestPreflightIsOptIn(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h := New(t.TempDir(), "n1", nil, logr.Discard())
	g.Expect(h.Init(ctx, Options{KubernetesVersion: "v1.35.4"})).To(Succeed())
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h}
	g.Expect(k.InstallKubeadm(ctx, protocol.KubernetesPlan{Version: "v1.36.3"})).To(Succeed())
	g.Expect(k.KubeadmUpgrade(ctx, protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.3", Action: protocol.KubeadmUpgradeNode})).To(Succeed())
}

// TestApplyPreflightRetried: upgrade apply runs its preflight phase on its own,
// again while it fails (a CreateJob health check the cluster misses), at most
// kube.PreflightAttempts times, then the workflow without it; a preflight that
// keeps failing fails the upgrade with the node unchanged.
func TestApplyPreflightRetried(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int
		ok       bool
	}{
		{"fails twice, then passes", kube.PreflightAttempts - 1, true},
		{"fails every attempt", kube.PreflightAttempts, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			h := New(t.TempDir(), "n1", nil, logr.Discard())
			g.Expect(h.Init(ctx, Options{KubernetesVersion: "v1.35.4", ControlPlane: true,
				PreflightFailures: []string{CheckCreateJob + "*" + strconv.Itoa(tc.failures)}})).To(Succeed())
			k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, PreflightRetryPause: time.Millisecond}
			g.Expect(k.InstallKubeadm(ctx, protocol.KubernetesPlan{Version: "v1.36.3"})).To(Succeed())
			err := k.KubeadmUpgrade(ctx, protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.3", Action: protocol.KubeadmUpgradeApply})
			log, rerr := os.ReadFile(h.simPath("commands.log"))
			g.Expect(rerr).NotTo(HaveOccurred())
			img, _ := h.manifestImage("kube-apiserver")
			if tc.ok {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(strings.Count(string(log), "kubeadm upgrade apply phase preflight v1.36.3")).To(Equal(tc.failures + 1))
				g.Expect(string(log)).To(ContainSubstring("kubeadm upgrade apply v1.36.3 --yes --skip-phases=preflight"))
				g.Expect(img).To(Equal("registry.k8s.io/kube-apiserver:v1.36.3"))
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring("preflight failed 3 times, the node is unchanged")))
			g.Expect(err).To(MatchError(ContainSubstring("[ERROR CreateJob]")))
			g.Expect(strings.Count(string(log), "kubeadm upgrade apply phase preflight v1.36.3")).To(Equal(kube.PreflightAttempts))
			g.Expect(string(log)).NotTo(ContainSubstring("--skip-phases"))
			g.Expect(img).To(Equal("registry.k8s.io/kube-apiserver:v1.35.4"), "a refused upgrade changes nothing")
		})
	}
}

// TestStagedImagesAreNotPulledAgain: on a control plane whose registry lacks
// the CoreDNS and kube-proxy images (the real Cluster API lane), kubeadm
// upgrade's preflight pull fails unless the plan delivered kubeadm, so that
// staging pulled the static pods' images and the agent turns the pull off; a
// worker's upgrade node pulls nothing. The config file is gone afterwards.
func TestStagedImagesAreNotPulledAgain(t *testing.T) {
	staged := &protocol.KubernetesBinaries{Platform: "linux/amd64"}
	for _, tc := range []struct {
		name         string
		controlPlane bool
		plan         protocol.KubernetesPlan
		pullFails    bool
	}{
		{"apply, kubeadm from the OS image", true, protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Action: protocol.KubeadmUpgradeApply}, true},
		{"apply, kubeadm staged", true, protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Action: protocol.KubeadmUpgradeApply, Binaries: staged}, false},
		{"control plane's node, kubeadm from the OS image", true, protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Action: protocol.KubeadmUpgradeNode}, true},
		{"control plane's node, kubeadm staged", true, protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Action: protocol.KubeadmUpgradeNode, Binaries: staged}, false},
		{"worker", false, protocol.KubernetesPlan{Role: protocol.RoleWorker, Action: protocol.KubeadmUpgradeNode}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			h := New(t.TempDir(), "n1", nil, logr.Discard())
			g.Expect(h.Init(ctx, Options{KubernetesVersion: "v1.35.4", ControlPlane: tc.controlPlane,
				PreflightFailures: []string{CheckImagePull}})).To(Succeed())
			k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, PreflightRetryPause: time.Millisecond}
			g.Expect(k.InstallKubeadm(ctx, protocol.KubernetesPlan{Version: "v1.36.3"})).To(Succeed())
			tc.plan.Version = "v1.36.3"
			err := k.KubeadmUpgrade(ctx, tc.plan)
			if tc.pullFails {
				g.Expect(err).To(MatchError(ContainSubstring("[ERROR ImagePull]")))
				tc.plan.IgnorePreflightErrors = []string{CheckImagePull}
				err = k.KubeadmUpgrade(ctx, tc.plan)
			}
			g.Expect(err).NotTo(HaveOccurred())
			_, statErr := os.Stat(h.path(kube.UpgradeConfig))
			g.Expect(os.IsNotExist(statErr)).To(BeTrue(), "the UpgradeConfiguration file is removed")
		})
	}
}

// TestRerenderPullsOnlyForNewImages: re-rendering a control plane's static pods
// at its running version (a configuration change) pulls nothing while the pods
// keep the images the node runs, so a registry without CoreDNS does not fail it;
// a plan that moves the images to another repository, or pins another etcd tag,
// keeps kubeadm's pull, and with it the ImagePull check.
func TestRerenderPullsOnlyForNewImages(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cc        string
		pullFails bool
	}{
		{"same images", `{"apiServer":{"extraArgs":[{"name":"audit-log-maxage","value":"30"}]}}`, false},
		{"the running repository named", `{"imageRepository":"registry.k8s.io"}`, false},
		{"another repository", `{"imageRepository":"mirror.example.com/k8s"}`, true},
		{"another etcd tag", `{"etcd":{"local":{"imageTag":"3.6.99-0"}}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			h := New(t.TempDir(), "n1", nil, logr.Discard())
			g.Expect(h.Init(ctx, Options{KubernetesVersion: "v1.35.4", ControlPlane: true,
				PreflightFailures: []string{CheckImagePull}})).To(Succeed())
			k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h}
			plan := &protocol.NodePlan{Kubernetes: protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.35.4"},
				ClusterConfiguration: []byte(tc.cc)}
			err := k.ControlPlaneConfig(ctx, plan)
			if !tc.pullFails {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring("[ERROR ImagePull]")))
		})
	}
}
