package coordinator

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// buildBinary builds the harness binary with the simulated agent
// (test/cmd/capi-inplace-dev) into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "capi-inplace-dev")
	cmd := exec.Command("go", "build", "-o", out, "github.com/capi-inplace/capi-inplace/test/cmd/capi-inplace-dev")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build capi-inplace-dev: %v\n%s", err, b)
	}
	return out
}

// agentProcess runs the real agent (`capi-inplace-dev agent --simulate`) for one node.
type agentProcess struct {
	t       *testing.T
	bin     string
	args    []string
	logPath string
	cmd     *exec.Cmd
}

func (a *agentProcess) start() {
	a.t.Helper()
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		a.t.Fatal(err)
	}
	a.cmd = exec.Command(a.bin, a.args...)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { a.kill(); _ = logf.Close() })
}

// kill stops the agent the hard way: no chance to finish what it is doing.
func (a *agentProcess) kill() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Kill()
	_, _ = a.cmd.Process.Wait()
	a.cmd = nil
}

func (a *agentProcess) log() string {
	b, _ := os.ReadFile(a.logPath)
	s := string(b)
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// drive calls the coordinator until the answer is final (done or Failure).
func drive(t *testing.T, c func() *Coordinator, req *runtimehooksv1.UpdateMachineRequest, timeout time.Duration, every func(resp *runtimehooksv1.UpdateMachineResponse)) *runtimehooksv1.UpdateMachineResponse {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var resp *runtimehooksv1.UpdateMachineResponse
	last := ""
	for time.Now().Before(deadline) {
		resp = call(c(), req)
		if resp.Message != last {
			t.Logf("%s retry=%d %s", resp.Status, resp.RetryAfterSeconds, resp.Message)
			last = resp.Message
		}
		if every != nil {
			every(resp)
		}
		if resp.Status == runtimehooksv1.ResponseStatusFailure || resp.RetryAfterSeconds == 0 {
			return resp
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("no final answer within %s; last: %s %q", timeout, resp.Status, resp.Message)
	return nil
}

// TestWithRealAgent runs the coordinator against the real agent binary on a simulated
// host, through the API objects only. The agent is killed while it waits before
// `kubeadm upgrade node`, and the coordinator is replaced by a fresh instance at the
// same moment; the update still completes, with kubeadm run exactly once.
func TestWithRealAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent binary")
	}
	g := NewWithT(t)
	f := newFixture(t, nil)
	cfg := testEnv.Require(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, kubeconfigFor(t, cfg, "agent"), 0o600)).To(Succeed())

	f.node("ra1", "v1.35.0", false)
	f.node("ra1-peer", "v1.35.0", false)
	m := f.machine("m-ra1", "ra1", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
		Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "updated in place\n", Permissions: "0644"}},
	}})

	host := filepath.Join(dir, "host")
	g.Expect(os.MkdirAll(filepath.Join(host, ".sim"), 0o755)).To(Succeed())
	pause := filepath.Join(host, ".sim", "pause-before-kubeadm-upgrade")
	g.Expect(os.WriteFile(pause, nil, 0o644)).To(Succeed())
	agent := &agentProcess{t: t, bin: bin, logPath: filepath.Join(dir, "agent.log"), args: []string{
		"agent", "--simulate", "--host-root=" + host, "--node-name=ra1", "--kubeconfig=" + kubeconfig,
		"--health-addr=0", "--gate-timeout=20s",
	}}
	agent.start()

	coord := f.coordinator()
	current := func() *Coordinator { return coord }
	restarted := false
	resp := drive(t, current, req, 90*time.Second, func(resp *runtimehooksv1.UpdateMachineResponse) {
		if restarted {
			return
		}
		if _, err := os.Stat(filepath.Join(host, ".sim", "paused-at")); err != nil {
			return
		}
		// The agent is parked right before kubeadm: crash it and the coordinator.
		agent.kill()
		coord = f.coordinator()
		g.Expect(os.Remove(pause)).To(Succeed())
		agent.start()
		restarted = true
	})
	g.Expect(restarted).To(BeTrue(), "the agent reached the pause point")
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), "agent log:\n%s", agent.log())
	g.Expect(resp.Message).To(HavePrefix("node ra1 runs plan "))

	n := f.getNode("ra1")
	g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.0"))
	g.Expect(n.Spec.Unschedulable).To(BeFalse())
	g.Expect(n.Annotations[inplacev1.CurrentPlanAnnotation]).To(Equal(n.Annotations[inplacev1.DesiredPlanAnnotation]))
	motd, err := os.ReadFile(filepath.Join(host, "etc", "motd"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(motd)).To(Equal("updated in place\n"))
	commands, err := os.ReadFile(filepath.Join(host, ".sim", "commands.log"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Count(string(commands), "kubeadm upgrade node")).To(Equal(1), "commands:\n%s", commands)

	// Done means done: later calls agree and change nothing.
	rv := f.getNode("ra1").ResourceVersion
	again := call(coord, req)
	g.Expect(again.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(again.RetryAfterSeconds).To(BeZero())
	g.Expect(f.getNode("ra1").ResourceVersion).To(Equal(rv))
}

// TestWithRealAgentRollback: a failing health gate makes the real agent roll back;
// the coordinator uncordons and answers Failure with the agent's cause.
func TestWithRealAgentRollback(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent binary")
	}
	g := NewWithT(t)
	f := newFixture(t, nil)
	cfg := testEnv.Require(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, kubeconfigFor(t, cfg, "agent"), 0o600)).To(Succeed())

	f.node("rb1", "v1.35.0", false)
	f.node("rb1-peer", "v1.35.0", false)
	m := f.machine("m-rb1", "rb1", "v1.36.0", false)
	req := f.request(m, nil)
	host := filepath.Join(dir, "host")
	g.Expect(os.MkdirAll(filepath.Join(host, ".sim"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(host, ".sim", "fail-gate"), nil, 0o644)).To(Succeed())
	agent := &agentProcess{t: t, bin: bin, logPath: filepath.Join(dir, "agent.log"), args: []string{
		"agent", "--simulate", "--host-root=" + host, "--node-name=rb1", "--kubeconfig=" + kubeconfig,
		"--health-addr=0", "--gate-timeout=3s",
	}}
	agent.start()

	c := f.coordinator()
	resp := drive(t, func() *Coordinator { return c }, req, 90*time.Second, nil)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure), "agent log:\n%s", agent.log())
	g.Expect(resp.Message).To(ContainSubstring("node rb1: the agent rolled back plan"))
	g.Expect(resp.Message).To(ContainSubstring("fail-gate"))
	n := f.getNode("rb1")
	g.Expect(n.Spec.Unschedulable).To(BeFalse())
	g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal("v1.35.0"), "rolled back to the old kubelet")
}

// TestWithRealAgentControlPlane: the first control-plane node of a version change
// runs `kubeadm upgrade apply` after an etcd snapshot, and the static pods follow.
func TestWithRealAgentControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent binary")
	}
	g := NewWithT(t)
	cfg := dedicatedWorkload(t) // see TestControlPlaneRollback
	f := newFixture(t, cfg)
	bin := buildBinary(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, kubeconfigFor(t, cfg, "agent"), 0o600)).To(Succeed())

	f.node("rc1", "v1.35.0", true)
	f.node("rc1-peer", "v1.35.0", true)
	m := f.machine("m-rc1", "rc1", "v1.36.0", true)
	req := f.request(m, &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
		ClusterConfiguration: bootstrapv1.ClusterConfiguration{ControlPlaneEndpoint: "10.0.0.1:6443"},
	}})
	host := filepath.Join(dir, "host")
	agent := &agentProcess{t: t, bin: bin, logPath: filepath.Join(dir, "agent.log"), args: []string{
		"agent", "--simulate", "--host-root=" + host, "--node-name=rc1", "--kubeconfig=" + kubeconfig,
		"--health-addr=0", "--gate-timeout=20s",
	}}
	agent.start()

	c := f.coordinator()
	resp := drive(t, func() *Coordinator { return c }, req, 90*time.Second, nil)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), "agent log:\n%s", agent.log())
	g.Expect(resp.RetryAfterSeconds).To(BeZero())
	g.Expect(f.getNode("rc1").Status.NodeInfo.KubeletVersion).To(Equal("v1.36.0"))
	commands, err := os.ReadFile(filepath.Join(host, ".sim", "commands.log"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Count(string(commands), "kubeadm upgrade apply v1.36.0")).To(Equal(1), "commands:\n%s", commands)
	// etcd is reached through the agent's etcd client, not a host etcdctl: the
	// snapshot is a file on the host.
	snapshots, _ := filepath.Glob(filepath.Join(host, "var", "lib", "capi-inplace", "attempts", "*", "*snapshot*"))
	g.Expect(snapshots).NotTo(BeEmpty(), "etcd snapshot before the upgrade")
	g.Expect(string(commands)).NotTo(ContainSubstring("kubeadm upgrade node"))
}
