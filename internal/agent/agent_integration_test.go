package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
	"github.com/capi-inplace/capi-inplace/internal/celgate/celproto"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// The suite runs the real agent (`capi-inplace-dev agent --simulate`) against a real
// kube-apiserver (envtest), driven only through the API objects of the protocol.
var (
	client     kubernetes.Interface
	kubeconfig string
	binary     string
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	_, skip, err := testenv.Assets()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if skip != "" {
		fmt.Println("skipping agent integration tests:", skip)
		return m.Run() // unit tests still run; newNode skips
	}
	tmp, err := os.MkdirTemp("", "agent-it-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.RemoveAll(tmp)
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")
	binary = filepath.Join(tmp, "capi-inplace-dev")
	// The agent's CEL helper beside it, where the agent looks for it (CEL gates).
	build := exec.Command("go", "build", "-o", tmp+string(filepath.Separator), "./test/cmd/capi-inplace-dev", "./cmd/"+celproto.HelperName)
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Printf("build capi-inplace-dev and %s: %v\n%s\n", celproto.HelperName, err, out)
		return 1
	}
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	cfg := env.Config
	client = kubernetes.NewForConfigOrDie(cfg)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	kubeconfig = filepath.Join(tmp, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		fmt.Println(err)
		return 1
	}
	if _, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: inplacev1.AgentNamespace}}, metav1.CreateOptions{}); err != nil {
		fmt.Println(err)
		return 1
	}
	return m.Run()
}

// node is one simulated node under test.
type node struct {
	t    *testing.T
	name string
	root string
	proc *exec.Cmd
	log  *bytes.Buffer
}

func newNode(t *testing.T, name, version string, controlPlane bool) *node {
	t.Helper()
	if client == nil {
		t.Skip("no envtest: KUBEBUILDER_ASSETS is not set")
	}
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if controlPlane {
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
	}
	n, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.NodeInfo.KubeletVersion = version
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &node{t: t, name: name, root: filepath.Join(t.TempDir(), "host")}
}

func (n *node) start(extra ...string) {
	n.t.Helper()
	args := append([]string{"agent", "--simulate", "--host-root", n.root, "--node-name", n.name, "--kubeconfig", kubeconfig,
		"--health-addr", "0", "-v", "1"}, extra...)
	n.log = &bytes.Buffer{}
	n.proc = exec.Command(binary, args...)
	n.proc.Stdout, n.proc.Stderr = n.log, n.log
	if err := n.proc.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { n.kill() })
}

func (n *node) kill() {
	if n.proc != nil && n.proc.ProcessState == nil {
		_ = n.proc.Process.Signal(syscall.SIGKILL)
		_ = n.proc.Wait()
		if n.t.Failed() || os.Getenv("AGENT_LOGS") != "" {
			n.t.Logf("agent %s log:\n%s", n.name, n.log.String())
		}
	}
}

// clearForRetry does on the Node what the coordinator's retry of a failed update
// does: the plan withdrawn, the agent's status and state removed.
func (n *node) clearForRetry(g Gomega) {
	n.t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		inplacev1.DesiredPlanAnnotation: nil, inplacev1.PlanPublishedAnnotation: nil,
		inplacev1.StatusAnnotation: nil, inplacev1.StateAnnotation: nil,
	}}})
	_, err := client.CoreV1().Nodes().Patch(context.Background(), n.name, types.MergePatchType, patch, metav1.PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
}

func (n *node) sim(name string) string { return filepath.Join(n.root, ".sim", name) }

func (n *node) get() *corev1.Node {
	n.t.Helper()
	got, err := client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return got
}

// status returns the agent's reported status, zero when there is none.
func (n *node) status() protocol.NodeStatus {
	s, _ := protocol.DecodeStatus(n.get().Annotations[inplacev1.StatusAnnotation])
	return s
}

// publish does the coordinator's part: the plan Secret, then desired-plan.
func (n *node) publish(raw []byte, hash string) {
	n.t.Helper()
	ctx := context.Background()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName(n.name)},
		Data: map[string][]byte{inplacev1.PlanSecretDataKey: raw}}
	if _, err := client.CoreV1().Secrets(inplacev1.AgentNamespace).Create(ctx, sec, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = client.CoreV1().Secrets(inplacev1.AgentNamespace).Update(ctx, sec, metav1.UpdateOptions{})
		if err != nil {
			n.t.Fatal(err)
		}
	} else if err != nil {
		n.t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{inplacev1.DesiredPlanAnnotation: hash}}})
	if _, err := client.CoreV1().Nodes().Patch(ctx, n.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// publishPlan seals the plan to the key the node's agent published, as the
// coordinator does, and publishes it.
func (n *node) publishPlan(p *protocol.NodePlan) string {
	n.t.Helper()
	raw, err := nodeplan.Seal(p, n.publicKey())
	if err != nil {
		n.t.Fatal(err)
	}
	hash, _ := p.Hash()
	n.publish(raw, hash)
	return hash
}

func (n *node) waitPhase(g Gomega, hash string, phase protocol.Phase, timeout time.Duration) protocol.NodeStatus {
	n.t.Helper()
	g.Eventually(func() string {
		s := n.status()
		return s.PlanHash + "/" + string(s.Phase)
	}, timeout, 200*time.Millisecond).Should(Equal(hash+"/"+string(phase)), func() string { return n.log.String() })
	return n.status()
}

func (n *node) runs() map[string]int {
	n.t.Helper()
	j, err := journal.NewFile(filepath.Join(n.root, "var/lib/capi-inplace"))
	if err != nil {
		n.t.Fatal(err)
	}
	e, err := j.Load()
	if err != nil {
		n.t.Fatal(err)
	}
	return e.Runs
}

func (n *node) read(p string) string {
	b, err := os.ReadFile(filepath.Join(n.root, p))
	if err != nil {
		return "<missing>"
	}
	return string(b)
}

func cpPlan(name string) *protocol.NodePlan {
	p := protocol.NewPlan(name)
	p.Machine = protocol.MachineRef{Namespace: "default", Name: name, Cluster: "c1"}
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply, EtcdSnapshot: true}
	p.Files = []protocol.File{{Path: "/etc/kubernetes/audit-policy.yaml", Content: []byte("rules: [{level: Metadata}]\n"), Permissions: "0600"}}
	p.KubeletExtraArgs = []protocol.Arg{{Name: "max-pods", Value: "200"}}
	p.OS = &protocol.OSImage{Backend: "simulated", Ref: "sim:os-v2", Digest: simulated.DigestOf([]byte("sim:os-v2"))}
	return p
}

func workerPlan(name string) *protocol.NodePlan {
	p := protocol.NewPlan(name)
	p.Machine = protocol.MachineRef{Namespace: "default", Name: name, Cluster: "c1"}
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	p.Files = []protocol.File{{Path: "/etc/app/app.conf", Content: []byte("new\n")}}
	p.Users = json.RawMessage(`[{"name":"ops","shell":"/bin/bash","sudo":"ALL=(ALL) NOPASSWD:ALL","sshAuthorizedKeys":["ssh-ed25519 AAAA ops@example"]}]`)
	p.NTP = json.RawMessage(`{"servers":["time.example.com"],"enabled":true}`)
	return p
}

func TestControlPlaneUpdateCommits(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "cp-commit", "v1.35.2", true)
	n.start("--gate-timeout", "60s")
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	// The only control-plane node restarts its API server during kubeadm upgrade:
	// the agent loses the API for a few seconds and must carry on and report later.
	g.Expect(os.WriteFile(n.sim("api-outage-seconds"), []byte("4"), 0o644)).To(Succeed())

	hash := n.publishPlan(cpPlan(n.name))
	st := n.waitPhase(g, hash, protocol.PhaseCommitted, 90*time.Second)
	g.Expect(st.Step).To(Equal(st.Steps))

	got := n.get()
	g.Expect(got.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.0"))
	g.Expect(got.Annotations[inplacev1.CurrentPlanAnnotation]).To(Equal(hash))
	g.Expect(got.Annotations[inplacev1.StateAnnotation]).To(Equal("Committed"))
	g.Expect(n.read("etc/kubernetes/audit-policy.yaml")).To(Equal("rules: [{level: Metadata}]\n"))
	g.Expect(n.read("var/lib/kubelet/kubeadm-flags.env")).To(ContainSubstring("--max-pods=200"))
	g.Expect(n.read("etc/kubernetes/manifests/kube-apiserver.yaml")).To(ContainSubstring("image: registry.k8s.io/kube-apiserver:v1.36.0"))
	g.Expect(n.read(".sim/boots")).To(Equal("2\n"), "one reboot into the new image")
	g.Expect(n.read(".sim/api-outage-seconds.done")).To(Equal("4"), "the API outage happened")
	pod, err := client.CoreV1().Pods("kube-system").Get(context.Background(), "kube-apiserver-"+n.name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pod.Spec.Containers[0].Image).To(Equal("registry.k8s.io/kube-apiserver:v1.36.0"))
	for k, v := range n.runs() {
		g.Expect(v).To(Equal(1), "action %s", k)
	}
	g.Expect(n.runs()).To(HaveLen(14))
	cmds := n.read(".sim/commands.log")
	g.Expect(cmds).To(ContainSubstring("kubeadm upgrade apply v1.36.0 --yes"))
	g.Expect(cmds).NotTo(ContainSubstring("etcdctl"), "etcd is reached through its Go client, not host tools")
	snaps, _ := filepath.Glob(filepath.Join(n.root, "var/lib/capi-inplace/attempts", hash+"-*", "etcd-snapshot.db"))
	g.Expect(snaps).To(HaveLen(1), "the committed attempt's snapshot is kept")
}

func TestKilledMidUpdateCompletesWithEachActionOnce(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "worker-kill", "v1.35.2", false)
	n.start("--gate-timeout", "60s")
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	// Pause after kubeadm upgrade, before the kubelet restarts; then kill -9.
	g.Expect(os.WriteFile(n.sim("pause-before-restart-kubelet"), nil, 0o644)).To(Succeed())
	hash := n.publishPlan(workerPlan(n.name))
	g.Eventually(func() string { return n.read(".sim/paused-at") }, 30*time.Second).Should(Equal("restart-kubelet\n"))
	n.kill()
	g.Expect(n.read("etc/app/app.conf")).To(Equal("new\n"))
	g.Expect(n.get().Status.NodeInfo.KubeletVersion).To(Equal("v1.35.2"), "the kubelet was not restarted yet")

	g.Expect(os.Remove(n.sim("pause-before-restart-kubelet"))).To(Succeed())
	n.start("--gate-timeout", "60s")
	n.waitPhase(g, hash, protocol.PhaseCommitted, 60*time.Second)
	g.Expect(n.get().Status.NodeInfo.KubeletVersion).To(Equal("v1.36.0"))
	runs := n.runs()
	g.Expect(runs).To(Equal(map[string]int{"backup-files": 1, "write-files": 1, "apply-users": 1, "apply-ntp": 1,
		"install-kubeadm": 1, "kubeadm-upgrade": 1, "install-kubelet": 1, "restart-kubelet": 1, "gates": 1}))
	g.Expect(n.read("etc/passwd")).To(ContainSubstring("ops:x:1000:1000::/home/ops:/bin/bash\n"))
	g.Expect(n.read("home/ops/.ssh/authorized_keys")).To(Equal("ssh-ed25519 AAAA ops@example\n"))
	g.Expect(n.read("etc/sudoers.d/90-capi-inplace-ops")).To(Equal("ops ALL=(ALL) NOPASSWD:ALL\n"))
	g.Expect(n.read("etc/chrony/conf.d/capi-inplace.conf")).To(ContainSubstring("server time.example.com iburst"))
	g.Expect(strings.Count(n.read(".sim/commands.log"), "kubeadm upgrade node")).To(Equal(1))
}

func TestFailedGateRollsBack(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "cp-gate", "v1.35.2", true)
	n.start("--gate-timeout", "3s")
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	g.Expect(os.WriteFile(n.sim("fail-gate"), []byte("etcd-health"), 0o644)).To(Succeed())
	oldFlags := n.read("var/lib/kubelet/kubeadm-flags.env")
	oldDB := n.read("var/lib/etcd/member/snap/db")

	hash := n.publishPlan(cpPlan(n.name))
	st := n.waitPhase(g, hash, protocol.PhaseRolledBack, 90*time.Second)
	g.Expect(st.Reason).To(Equal(state.ReasonGateFailed))
	g.Expect(st.Message).To(ContainSubstring("gate etcd-health did not pass within 3s"))
	g.Expect(st.Message).To(ContainSubstring("simulated fault (fail-gate)"))

	got := n.get()
	g.Expect(got.Annotations).NotTo(HaveKey(inplacev1.CurrentPlanAnnotation))
	g.Eventually(func() string { return n.get().Status.NodeInfo.KubeletVersion }, 10*time.Second).Should(Equal("v1.35.2"))
	g.Expect(n.read("etc/kubernetes/audit-policy.yaml")).To(Equal("<missing>"), "a file that did not exist is removed")
	g.Expect(n.read("var/lib/kubelet/kubeadm-flags.env")).To(Equal(oldFlags))
	g.Expect(n.read("etc/kubernetes/manifests/kube-apiserver.yaml")).To(ContainSubstring("kube-apiserver:v1.35.2"))
	g.Expect(n.read("var/lib/etcd/member/snap/db")).To(Equal(oldDB), "etcd data restored from the snapshot")
	g.Expect(n.read("usr/bin/kubelet")).To(Equal("v1.35.2\n"))
	g.Expect(n.read(".sim/boots")).To(Equal("3\n"), "rebooted into the new image and back")
	sim := simulated.New(n.root)
	bs, err := sim.Status(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bs.Booted).To(Equal(simulated.DigestOf([]byte(simulated.InitialRef))))
	runs := n.runs()
	for _, k := range []string{"gates", "rollback/restore-files", "rollback/restore-etcd", "rollback/backend-rollback", "rollback/reboot"} {
		g.Expect(runs).To(HaveKeyWithValue(k, 1))
	}
	g.Expect(runs).NotTo(HaveKey("backend-commit"))
}

func TestBadInput(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "worker-bad", "v1.35.2", false)
	n.start("--gate-timeout", "10s")
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	n.publicKey() // the key file is written (atomically) before it is published
	before := tree(t, n.root)

	unknown := workerPlan(n.name)
	unknown.OS = &protocol.OSImage{Backend: "ostree-nope", Ref: "fedora/x86_64/coreos/stable", Digest: simulated.DigestOf([]byte("x"))}
	other := workerPlan("some-other-node")
	skew := workerPlan(n.name)
	skew.Kubernetes.Version = "v1.37.0"
	tests := []struct {
		name       string
		raw        []byte
		hash       string
		plan       *protocol.NodePlan
		wantReason string
		wantMsg    string
	}{
		{name: "corrupt plan", raw: []byte(`{"apiVersion": "inplace.capi-inplace.dev/v1alpha1", "kind": "NodePlan", "nodeName": `), hash: "0123456789abcdef0123456789abcdef",
			wantReason: state.ReasonInvalidPlan, wantMsg: "cannot be used: invalid node plan: not a sealed plan"},
		{name: "unknown backend", plan: unknown, wantReason: state.ReasonUnknownBackend, wantMsg: `backend "ostree-nope", but this agent has only none, simulated`},
		{name: "plan for another node", plan: other, wantReason: state.ReasonPlanForAnotherNode, wantMsg: `the plan is for node "some-other-node"`},
		{name: "version skew", plan: skew, wantReason: state.ReasonVersionUnreachable, wantMsg: "more than one minor version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			hash := tt.hash
			if tt.plan != nil {
				hash = n.publishPlan(tt.plan)
			} else {
				n.publish(tt.raw, hash)
			}
			st := n.waitPhase(g, hash, protocol.PhaseFailed, 30*time.Second)
			g.Expect(st.Reason).To(Equal(tt.wantReason))
			g.Expect(st.Message).To(ContainSubstring(tt.wantMsg))
			g.Expect(n.get().Status.NodeInfo.KubeletVersion).To(Equal("v1.35.2"))
			g.Expect(n.read(".sim/commands.log")).To(Equal("<missing>"), "no command ran")
			g.Expect(tree(t, n.root)).To(Equal(before), "nothing on the host changed but the journal")
		})
	}

	// After the bad plans, a good one still applies: the node stayed usable.
	hash := n.publishPlan(workerPlan(n.name))
	n.waitPhase(g, hash, protocol.PhaseCommitted, 60*time.Second)
	g.Expect(n.get().Status.NodeInfo.KubeletVersion).To(Equal("v1.36.0"))
}

// tree lists the host's files and contents, except the agent's journal.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "var/lib/capi-inplace/journal.json" {
			return nil
		}
		b, _ := os.ReadFile(p)
		out[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCorruptJournalChangesNothing(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "worker-corrupt", "v1.35.2", false)
	n.start()
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	n.publicKey() // the agent is past its start-up (journal directory, key) before the kill
	n.kill()
	g.Expect(os.WriteFile(filepath.Join(n.root, "var/lib/capi-inplace/journal.json"), []byte(`{"key": "abc", "state": {`), 0o600)).To(Succeed())
	before := tree(t, n.root)
	n.start()
	hash := n.publishPlan(workerPlan(n.name))
	st := n.waitPhase(g, hash, protocol.PhaseFailed, 30*time.Second)
	g.Expect(st.Reason).To(Equal(state.ReasonJournalCorrupt))
	g.Expect(st.Message).To(ContainSubstring("journal is corrupt"))
	g.Consistently(func() map[string]string { return tree(t, n.root) }, 2*time.Second).Should(Equal(before))
}

// TestRetryWhileAgentDownStartsAfresh: a plan rolled back; while the agent is down
// the coordinator retries it (withdraws the plan and clears the agent's status and
// state, as its retry annotation does) and publishes the same plan again. The
// restarted agent never saw the withdrawal; it must run the plan afresh, not report
// the old failure again (what it did: the journal's RolledBack for that hash was
// re-reported, so a retry needed a second retry).
func TestRetryWhileAgentDownStartsAfresh(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "worker-retry", "v1.35.2", false)
	n.start("--gate-timeout", "2s")
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	g.Expect(os.WriteFile(n.sim("fail-gate"), nil, 0o644)).To(Succeed())
	hash := n.publishPlan(workerPlan(n.name))
	n.waitPhase(g, hash, protocol.PhaseRolledBack, 60*time.Second)
	n.kill()

	// The coordinator's retry, then the same plan published again.
	n.clearForRetry(g)
	g.Expect(os.Remove(n.sim("fail-gate"))).To(Succeed())
	g.Expect(n.publishPlan(workerPlan(n.name))).To(Equal(hash), "the retry republishes the same plan")

	n.start("--gate-timeout", "2s")
	n.waitPhase(g, hash, protocol.PhaseCommitted, 60*time.Second)
	g.Expect(n.get().Annotations).To(HaveKeyWithValue(inplacev1.CurrentPlanAnnotation, hash))
	g.Expect(n.read("etc/app/app.conf")).To(Equal("new\n"))
	g.Expect(strings.Count(n.read(".sim/commands.log"), "kubeadm upgrade node")).To(Equal(2), "the plan ran again")
}
