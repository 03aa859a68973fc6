//go:build e2enode

package e2enode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/bench"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
)

var (
	lane    *Lane
	figures = &lanekit.Figures{Title: "Real-node lane figures"}
	from    string // e.g. v1.35.4
	to      string // e.g. v1.36.3
	// mirror serves the images of `to` (lanekit.Registry.PushRelease); nodes start with `from`'s.
	mirror *lanekit.Registry
)

// The lane's addresses (hack/realnode/node.sh: the host is 10.250.0.1).
var (
	hostIP   = "10.250.0.1"
	baseNode = Node{Name: "rn-base", IP: "10.250.0.20", PodCIDR: "10.244.9.0/24"}
	cpNode   = Node{Name: "rn-cp", IP: "10.250.0.10", PodCIDR: "10.244.0.0/24"}
	wNode    = Node{Name: "rn-w1", IP: "10.250.0.11", PodCIDR: "10.244.1.0/24"}
)

// Preflight checks kubeadm fails on this machine for reasons of the machine: cgroup
// v1 (SystemVerification), and the CoreDNS upgrade checks of a cluster without CoreDNS.
var upgradePreflightIgnores = []string{"SystemVerification", "CoreDNSUnsupportedPlugins", "CoreDNSMigration"}

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime; the processes under test log to files.
	ctrl.SetLogger(logr.Discard())
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2enode: needs root (namespaces, mounts, cgroups): run `make e2e-node` as root")
		os.Exit(1)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	lane = &Lane{
		Root:  root,
		Cache: envOr("REALNODE_CACHE", filepath.Join(root, "_cache", "realnode")),
		State: envOr("REALNODE_STATE", filepath.Join(root, "_artifacts", "realnode")),
	}
	versions, err := os.ReadFile(filepath.Join(root, "hack", "realnode", "versions.sh"))
	if err != nil {
		panic(err)
	}
	for _, l := range strings.Split(string(versions), "\n") {
		if v, ok := strings.CutPrefix(l, "FROM_VERSION="); ok {
			from = v
		}
		if v, ok := strings.CutPrefix(l, "TO_VERSION="); ok {
			to = v
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if _, err := lane.Run(ctx, "switch-up"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cancel()
	mirrorDir, err := os.MkdirTemp("", "e2enode-mirror-")
	if err != nil {
		panic(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Minute)
	mirror, err = lanekit.StartRegistry(mirrorAddr, mirrorDir)
	if err == nil {
		if err = mirror.PushRelease(ctx, lane.Cache, to); err != nil {
			mirror.Close()
		}
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2enode: image mirror:", err)
		_, _ = lane.Run(context.Background(), "switch-down")
		os.Exit(1)
	}
	laneStart := time.Now()
	code := m.Run()
	failed.Write(os.Stderr)
	mirror.Close()
	_ = os.RemoveAll(mirrorDir)
	figures.Add("lane: go test wall time (clusters, management cluster, every test; without build.sh and install-deps)", time.Since(laneStart))
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	holder, _ := lane.Run(ctx, "pid", "switch")
	_, _ = lane.Run(ctx, "switch-down")
	cancel()
	// Teardown leaves no process: the switch holder (`unshare --fork`, which ignores
	// SIGTERM) outlived every switch-down until switch_down killed its namespace.
	if p := strings.TrimSpace(holder); p != "" {
		if _, err := os.Stat("/proc/" + p); err == nil {
			fmt.Fprintf(os.Stderr, "e2enode: the switch holder (pid %s) still runs after switch-down\n", p)
			code = 1
		}
	}
	if err := figures.Write(filepath.Join(lane.State, "figures.md")); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func bin(name string) string { return filepath.Join(lane.Root, "bin", name) }

func k8sBin(version, name string) string { return filepath.Join(lane.Cache, "k8s", version, name) }

// TestBareKubeadmUpgrade is the baseline: the documented kubeadm procedure by hand on a
// single control-plane node (kubeadm binary, upgrade apply, kubelet binary, restart),
// timed to the same end point as the agent's update below.
func TestBareKubeadmUpgrade(t *testing.T) {
	if os.Getenv("E2ENODE_SKIP_BASELINE") != "" {
		t.Skip("E2ENODE_SKIP_BASELINE set")
	}
	g := newG(t)
	ctx := context.Background()
	c, err := lane.CreateCluster(ctx, t, from, baseNode)
	defer lane.Destroy(c)
	g.Expect(err).NotTo(HaveOccurred())

	start := time.Now()
	lane.MustExec(t, baseNode, "install", "-m", "0755", k8sBin(to, "kubeadm"), "/usr/bin/kubeadm")
	applyStart := time.Now()
	lane.MustExec(t, baseNode, "kubeadm", "upgrade", "apply", to, "--yes", "--ignore-preflight-errors="+strings.Join(upgradePreflightIgnores, ","))
	apply := time.Since(applyStart)
	lane.MustExec(t, baseNode, "install", "-m", "0755", k8sBin(to, "kubelet"), "/usr/bin/kubelet")
	swap := time.Now()
	lane.MustExec(t, baseNode, "systemctl", "daemon-reload")
	lane.MustExec(t, baseNode, "systemctl", "restart", "kubelet")
	g.Expect(WaitNode(ctx, c.Client, baseNode.Name, to, 5*time.Minute)).To(Succeed())
	g.Expect(WaitStaticPods(ctx, c.Client, baseNode.Name, to, 5*time.Minute)).To(Succeed())
	total := time.Since(start)
	figures.Add("baseline (bare kubeadm): kubeadm upgrade apply "+from+" -> "+to, apply)
	figures.Add("baseline (bare kubeadm): kubelet swap -> node Ready at "+to+" with static pods ready", time.Since(swap))
	figures.Add("baseline (bare kubeadm): whole procedure (control-plane node)", total)
	t.Logf("bare kubeadm procedure: %s (upgrade apply %s)", total, apply)
	baselineTotal = total
}

var baselineTotal time.Duration

// TestAgentUpgradesRealNodes upgrades a real control-plane node and a real worker in
// place through the extension's UpdateMachine hook, then changes their configuration.
func TestAgentUpgradesRealNodes(t *testing.T) {
	g := newG(t)
	ctx := context.Background()
	work := t.TempDir()

	wc, err := lane.CreateCluster(ctx, t, from, cpNode, wNode)
	defer lane.Destroy(wc)
	g.Expect(err).NotTo(HaveOccurred())

	image := os.Getenv("E2ENODE_AGENT_IMAGE")
	imageTar := os.Getenv("E2ENODE_AGENT_IMAGE_TAR")
	g.Expect(image).NotTo(BeEmpty(), "E2ENODE_AGENT_IMAGE (make e2e-node sets it)")
	for _, n := range []Node{cpNode, wNode} {
		lane.MustExec(t, n, "ctr", "-n", "k8s.io", "images", "import", imageTar)
	}

	env, err := bench.StartEnv(filepath.Join(lane.Root, "bin"), work)
	g.Expect(err).NotTo(HaveOccurred())
	defer env.Stop()
	mc, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	mgmt := &Mgmt{Env: env, Client: mc}
	g.Expect(mgmt.SeedCluster(ctx, wc, from)).To(Succeed())

	artifacts, err := lanekit.ServeArtifacts(hostIP+":0", filepath.Join(lane.Cache, "k8s"))
	g.Expect(err).NotTo(HaveOccurred())
	defer artifacts.Close()
	policyFile := filepath.Join(work, "policy.yaml")
	g.Expect(writePolicy(policyFile, artifacts.URL)).To(Succeed())

	logDir := filepath.Join(lane.State, "logs")
	g.Expect(os.MkdirAll(logDir, 0o755)).To(Succeed())
	ext, err := bench.StartServer(ctx, bench.ServerSpec{
		Name: "capi-inplace",
		Path: bin("capi-inplace"),
		Args: func(port int, certDir, metricsAddr string) []string {
			return []string{"extension", "--webhook-port=" + strconv.Itoa(port), "--webhook-host=127.0.0.1",
				"--webhook-cert-dir=" + certDir, "--health-addr=127.0.0.1:0",
				"--diagnostics-address=" + metricsAddr, "--insecure-diagnostics",
				"--policy-file=" + policyFile, "--agent-image=" + image}
		},
		Env: []string{"KUBECONFIG=" + env.Kubeconfig},
	}, work, logDir)
	g.Expect(err).NotTo(HaveOccurred())
	defer ext.Stop()

	machines := &MachineController{Mgmt: mgmt, Hooks: ext.Client, Logf: t.Logf}

	// The control plane is upgraded twice: the first attempt fails its pool's
	// health gate and is rolled back, the retry passes it, with the agent killed and
	// the kubelet restarted under it mid-update.
	var cpChange = Change{Version: to, Config: func(s *bootstrapv1.KubeadmConfigSpec) {
		s.Files = append(s.Files,
			bootstrapv1.File{Path: "/etc/realnode/cp.conf", Content: "after\n", Permissions: "0644"},
			bootstrapv1.File{Path: "/etc/realnode/cp-new.conf", Content: "new\n", Permissions: "0644"})
	}}
	if !t.Run("control plane "+from+" to "+to+": a failing health gate rolls it back", func(t *testing.T) {
		g := newG(t)
		lane.MustExec(t, cpNode, "sh", "-c", "mkdir -p /etc/realnode && echo before >/etc/realnode/cp.conf && rm -f "+healthyFile)
		before := readNodeState(t, cpNode)
		var rollbackMu sync.Mutex
		var rollbackAt time.Time
		steps := WatchJournal(cpNode, func(e lanekit.Journal) {
			rollbackMu.Lock()
			defer rollbackMu.Unlock()
			if rollbackAt.IsZero() && strings.HasPrefix(e.InFlight, "rollback/") {
				rollbackAt = time.Now()
			}
		})
		// The target release's control-plane images are not on the node: the agent
		// pulls them from the lane's mirror while the node stages, before the cordon.
		missing, err := missingImages(ctx, cpNode, mirror.Refs)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(mirror.Refs).NotTo(BeEmpty())
		g.Expect(missing).To(ConsistOf(mirror.Refs), "the node starts without %s's images", to)
		var atCordon struct {
			sync.Mutex
			missing []string
			err     error
			staging protocol.StagingStatus
		}
		cordon := lanekit.WatchCordonThen(wc.Client, cpNode.Name, func(n *corev1.Node) {
			atCordon.Lock()
			defer atCordon.Unlock()
			atCordon.missing, atCordon.err = missingImages(ctx, cpNode, mirror.Refs)
			atCordon.staging, _ = protocol.DecodeStagingStatus(n.Annotations[inplacev1.StagingStatusAnnotation])
		})
		outage := lanekit.ProbeAPI(wc.Client)
		res, err := machines.Update(ctx, cpNode.Name, cpChange, 25*time.Minute, func(c HookCall) bool {
			// Not any Failure: a call during the API outage may answer one that CAPI
			// simply retries.
			return c.Status == runtimehooksv1.ResponseStatusFailure && strings.Contains(c.Message, laneGate)
		})
		figures.Add("agent: control-plane steps of the failed attempt (time in flight on the node)", steps.Stop())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Done).To(BeFalse())
		last := res.Calls[len(res.Calls)-1]
		g.Expect(last.Message).To(ContainSubstring(laneGate), "the hook names the failed gate")
		figures.Add("agent: control-plane failed attempt, first UpdateMachine call to Failure (upgrade, gate timeout, rollback)", res.Duration)
		figures.Add("agent: control-plane failed attempt, cordon -> uncordon", cordon.Stop())
		atCordon.Lock()
		g.Expect(atCordon.err).NotTo(HaveOccurred())
		g.Expect(atCordon.missing).To(BeEmpty(), "every control-plane image of %s is in the node's containerd when it is cordoned", to)
		g.Expect(atCordon.staging.Phase).To(Equal(protocol.StagePhaseStaged))
		figures.Add("agent: control-plane staging, asked to Staged (kubeadm and kubelet from the HTTP server, "+strings.Join(mirror.Refs, ", ")+" pulled from the lane's mirror)", atCordon.staging.Message)
		atCordon.Unlock()

		// The node is back at the old release, as it was.
		g.Expect(readNodeState(t, cpNode).diff(before)).To(BeEmpty(), "binaries, manifests, kubelet configuration and files restored")
		g.Expect(lane.MustExec(t, cpNode, "cat", "/etc/realnode/cp.conf")).To(Equal("before\n"))
		for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			g.Expect(lane.MustExec(t, cpNode, "cat", "/etc/kubernetes/manifests/"+c+".yaml")).To(ContainSubstring("image: registry.k8s.io/" + c + ":" + from))
		}
		g.Expect(lane.MustExec(t, cpNode, "/usr/bin/kubelet", "--version")).To(ContainSubstring(from))
		g.Expect(strings.TrimSpace(lane.MustExec(t, cpNode, "/usr/bin/kubeadm", "version", "-o", "short"))).To(Equal(from))
		// The control plane serves again, at the old release.
		g.Expect(WaitNode(ctx, wc.Client, cpNode.Name, from, 5*time.Minute)).To(Succeed())
		g.Expect(WaitStaticPods(ctx, wc.Client, cpNode.Name, from, 5*time.Minute)).To(Succeed())
		rollbackMu.Lock()
		rolledBackFrom := rollbackAt
		rollbackMu.Unlock()
		down, longest, windows := outage.StopSince(rolledBackFrom)
		g.Expect(rolledBackFrom.IsZero()).To(BeFalse(), "a rollback action was seen in flight")
		// The etcd restore stops the API server first (kube.RestoreEtcd): one
		// outage for the restore, then the old release serves.
		figures.Add("agent: control-plane rollback, API server unavailable from the first rollback action until the old release's static pods are ready (total, longest window, windows)",
			fmt.Sprintf("%s, %s, %d", down.Round(100*time.Millisecond), longest.Round(100*time.Millisecond), windows))
		node, err := wc.Client.CoreV1().Nodes().Get(ctx, cpNode.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(node.Spec.Unschedulable).To(BeFalse(), "a rolled back node is put back in service; %s", nodeWriters(node))
		st, err := protocol.DecodeStatus(node.Annotations[inplacev1.StatusAnnotation])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))

		// The failure is on the Machine and in `capi-inplace status`.
		m := &clusterv1.Machine{}
		g.Expect(mc.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cpNode.Name}, m)).To(Succeed())
		cond := meta.FindStatusCondition(m.Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonRolledBack))
		g.Expect(cond.Message).To(ContainSubstring(laneGate))
		out, code := statusCLI(t, env.Kubeconfig)
		g.Expect(code).To(Equal(3), "status exits 3 when a node rolled back:\n%s", out)
		g.Expect(out).To(MatchRegexp(`"name": *"`+cpNode.Name+`"`), out)
		g.Expect(out).To(ContainSubstring(`"phase": "RolledBack"`), out)
		g.Expect(out).To(ContainSubstring(laneGate), out)

		// The operator asks for a retry (docs/fleet-controls.md): the coordinator
		// withdraws the failed plan and clears the agent's verdict, and the agent
		// forgets the failed plan on the node.
		retryFailedPlan(ctx, t, machines, cpNode)
	}) {
		// The later scenarios start from a node with no failed plan: retry it as an
		// operator would, so one failure here does not hide what they would show.
		if st := nodeStatus(ctx, t, wc.Client, cpNode); st.Phase == protocol.PhaseRolledBack || st.Phase == protocol.PhaseFailed {
			retryFailedPlan(ctx, t, machines, cpNode)
		}
	}

	t.Run("control plane "+from+" to "+to+", the agent killed and the kubelet restarted mid-update", func(t *testing.T) {
		g := newG(t)
		lane.MustExec(t, cpNode, "sh", "-c", "touch "+healthyFile)
		backupsBefore := listPrefixed(t, cpNode, "/etc/kubernetes/tmp", "kubeadm-backup-manifests-")
		oldPID := agentPID(cpNode)
		g.Expect(oldPID).NotTo(BeZero(), "the agent runs on %s", cpNode.Name)
		killed := make(chan string, 1)
		var once sync.Once
		steps := WatchJournal(cpNode, func(e lanekit.Journal) {
			// Kill once every action before the gates is done: kubeadm upgrade
			// apply and the kubelet swap must not run again on resume.
			if e.InFlight != "gates" {
				return
			}
			once.Do(func() {
				pid := agentPID(cpNode)
				if pid == 0 {
					killed <- "no agent process"
					return
				}
				_ = syscall.Kill(pid, syscall.SIGKILL)
				kctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				_, err := lane.Exec(kctx, cpNode, "systemctl", "restart", "kubelet")
				killed <- fmt.Sprintf("agent %d killed during %s; kubelet restarted (%v)", pid, e.InFlight, err)
			})
		})
		outage := lanekit.ProbeAPI(wc.Client)
		cordon := lanekit.WatchCordon(wc.Client, cpNode.Name)
		res, err := machines.Update(ctx, cpNode.Name, Change{}, 25*time.Minute, nil)
		down, longest, windows := outage.Stop()
		cordoned := cordon.Stop()
		figures.Add("agent: control-plane steps (time in flight on the node; gates include the kill and restart)", steps.Stop())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Done).To(BeTrue())
		select {
		case k := <-killed:
			t.Log(k)
			g.Expect(k).To(ContainSubstring("killed during gates"))
		default:
			t.Fatal("the agent was never seen running the gates")
		}
		newPID := agentPID(cpNode)
		g.Expect(newPID).NotTo(BeZero())
		g.Expect(newPID).NotTo(Equal(oldPID), "the agent runs as a new process")

		assertNodeAt(t, wc, cpNode, to)
		g.Expect(WaitStaticPods(ctx, wc.Client, cpNode.Name, to, 2*time.Minute)).To(Succeed())
		manifest := lane.MustExec(t, cpNode, "cat", "/etc/kubernetes/manifests/kube-apiserver.yaml")
		g.Expect(manifest).To(ContainSubstring("image: registry.k8s.io/kube-apiserver:" + to))
		g.Expect(lane.MustExec(t, cpNode, "cat", "/etc/realnode/cp.conf")).To(Equal("after\n"))
		// Each action ran once: kubeadm upgrade apply keeps one manifest backup per
		// run, the attempt has one etcd snapshot, and the journal counts one start
		// per action but the gates, which the kill interrupted and the new agent ran
		// again.
		g.Expect(lanekit.NewNames(backupsBefore, listPrefixed(t, cpNode, "/etc/kubernetes/tmp", "kubeadm-backup-manifests-"))).To(HaveLen(1), "kubeadm upgrade apply ran once")
		j, err := readJournal(ctx, cpNode)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(j.State.Phase).To(Equal(string(protocol.PhaseCommitted)))
		for a, n := range j.Runs {
			if a == "gates" {
				g.Expect(n).To(Equal(2), "the interrupted gates ran again: %v", j.Runs)
				continue
			}
			g.Expect(n).To(Equal(1), "action %s ran once: %v", a, j.Runs)
		}
		g.Expect(j.Runs).To(HaveKey("kubeadm-upgrade"))
		g.Expect(j.Runs).To(HaveKey("etcd-snapshot"))
		snaps := strings.Fields(lane.MustExec(t, cpNode, "find", agentWorkDir+"/attempts/"+j.Attempt, "-name", "*.db"))
		g.Expect(snaps).To(HaveLen(1), "one etcd snapshot for the attempt")
		assertSnapshotValid(t, cpNode)
		// The coordinator never claims step 1 once the node is at step 5 (it cannot
		// read the node while its API server is down).
		at5 := false
		for _, c := range res.Calls {
			at5 = at5 || strings.HasPrefix(c.Message, "step 5/6")
			g.Expect(at5 && strings.HasPrefix(c.Message, "step 1/6")).To(BeFalse(), "message after step 5: %q", c.Message)
		}

		figures.Add("agent: control-plane node update "+from+" -> "+to+" (first UpdateMachine call to done; includes the agent kill and a kubelet restart)", res.Duration)
		figures.Add("agent: control-plane disruption, cordon -> uncordon (of the update's total above)", cordoned)
		figures.Add("agent: control-plane API server unavailable (total, longest window, windows)", fmt.Sprintf("%s, %s, %d", down.Round(100*time.Millisecond), longest.Round(100*time.Millisecond), windows))
		figures.Add("agent: UpdateMachine calls for the control-plane node", len(res.Calls))
		if baselineTotal > 0 {
			figures.Add("agent / bare kubeadm (control-plane node, same run, target <= 1.15; the agent's run includes the kill and kubelet restart)", fmt.Sprintf("%.2f", res.Duration.Seconds()/baselineTotal.Seconds()))
		}
		figures.Add("agent pod memory cgroup on the control-plane node (usage / max; counts kubeadm and page cache)", agentMemory(t, wc, cpNode))
		figures.Add("agent process memory on the control-plane node (/proc/<pid>/status)", agentRSS(cpNode))
	})

	t.Run("worker "+from+" to "+to+" with a PodDisruptionBudget", func(t *testing.T) {
		g := newG(t)
		guarded := guardedDeployment(ctx, t, wc.Client, wNode.Name)
		cordon := lanekit.WatchCordon(wc.Client, wNode.Name)
		start := time.Now()
		blocked := false
		res, err := machines.Update(ctx, wNode.Name, Change{Version: to}, 5*time.Minute, func(c HookCall) bool {
			blocked = c.Status == runtimehooksv1.ResponseStatusSuccess && c.Retry > 0 && strings.Contains(c.Message, "guarded")
			return blocked
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(blocked).To(BeTrue(), "the drain reports the PodDisruptionBudget that blocks it")
		// The pod is still there, on a cordoned node.
		pods, err := wc.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=guarded"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods.Items).To(HaveLen(1))
		g.Expect(pods.Items[0].Spec.NodeName).To(Equal(wNode.Name))
		node, err := wc.Client.CoreV1().Nodes().Get(ctx, wNode.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(node.Spec.Unschedulable).To(BeTrue())

		// The operator allows the disruption; the eviction goes through.
		pdb, err := wc.Client.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "guarded", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		pdb.Spec.MinAvailable = &intstr.IntOrString{IntVal: 0}
		_, err = wc.Client.PolicyV1().PodDisruptionBudgets("default").Update(ctx, pdb, metav1.UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		allowed := time.Now()
		steps := WatchJournal(wNode, nil)
		res2, err := machines.Update(ctx, wNode.Name, Change{Version: to}, 10*time.Minute, nil)
		figures.Add("agent: worker steps (time in flight on the node)", steps.Stop())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res2.Done).To(BeTrue())
		total := time.Since(start)
		// The hook answers done once the node is uncordoned; the watch polls, so wait
		// for it to see that (it stopped first once and the window had no end).
		g.Eventually(cordon.Uncordoned, 10*time.Second, 100*time.Millisecond).ShouldNot(BeZero(), "the node is uncordoned")
		cordoned := cordon.Stop()
		uncordonedAfterAllow := cordon.Uncordoned().Sub(allowed)
		_, err = wc.Client.CoreV1().Pods("default").Get(ctx, guarded, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the guarded pod was evicted")
		assertNodeAt(t, wc, wNode, to)

		figures.Add("agent: worker update "+from+" -> "+to+" after the PDB allowed it (UpdateMachine calls to done)", res2.Duration)
		figures.Add("agent: worker update total, first UpdateMachine call to done (staging, drain blocked by the PDB, the operator's wait, the update)", total)
		figures.Add("agent: worker disruption, cordon -> uncordon (including the wait for the operator to relax the PDB)", cordoned)
		figures.Add("agent: worker disruption after the PDB was relaxed, -> uncordoned (eviction, kubeadm upgrade node, kubelet swap, gates; target < 60 s)", uncordonedAfterAllow)
		figures.Add("agent: worker drain reported blocked by the PDB after", res.Duration)
		figures.Add("agent pod memory cgroup on the worker (usage / max; counts kubeadm and page cache)", agentMemory(t, wc, wNode))
		figures.Add("agent process memory on the worker (/proc/<pid>/status)", agentRSS(wNode))
	})

	t.Run("KubeadmConfig changes on the real nodes", func(t *testing.T) {
		g := newG(t)
		// Worker: a file and a kubelet argument.
		res, err := machines.Update(ctx, wNode.Name, Change{Config: func(s *bootstrapv1.KubeadmConfigSpec) {
			s.Files = append(s.Files, bootstrapv1.File{Path: "/etc/realnode/site.conf", Content: "site=lane\n", Permissions: "0644"})
			s.JoinConfiguration.NodeRegistration.KubeletExtraArgs = append(s.JoinConfiguration.NodeRegistration.KubeletExtraArgs,
				bootstrapv1.Arg{Name: "max-pods", Value: ptr.To("111")})
		}}, 10*time.Minute, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Done).To(BeTrue())
		g.Expect(lane.MustExec(t, wNode, "cat", "/etc/realnode/site.conf")).To(Equal("site=lane\n"))
		g.Expect(kubeletCmdline(t, wNode)).To(ContainSubstring("--max-pods=111"))
		g.Eventually(func() int64 {
			n, err := wc.Client.CoreV1().Nodes().Get(ctx, wNode.Name, metav1.GetOptions{})
			if err != nil {
				return 0
			}
			return n.Status.Capacity.Pods().Value()
		}, 2*time.Minute, time.Second).Should(Equal(int64(111)), "the running kubelet applies --max-pods")
		figures.Add("agent: worker configuration change (file + kubelet argument), calls to done", res.Duration)

		// Control plane: an apiServer argument. KubeadmControlPlane writes the
		// ClusterConfiguration into the workload cluster's kubeadm-config before it
		// marks the Machine; this stand-in does the same.
		g.Expect(setAPIServerArg(ctx, wc.Client, "audit-log-maxage", "7")).To(Succeed())
		res, err = machines.Update(ctx, cpNode.Name, Change{Config: func(s *bootstrapv1.KubeadmConfigSpec) {
			s.ClusterConfiguration.APIServer.ExtraArgs = append(s.ClusterConfiguration.APIServer.ExtraArgs, bootstrapv1.Arg{Name: "audit-log-maxage", Value: ptr.To("7")})
		}}, 10*time.Minute, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Done).To(BeTrue())
		g.Expect(lane.MustExec(t, cpNode, "cat", "/etc/kubernetes/manifests/kube-apiserver.yaml")).To(ContainSubstring("--audit-log-maxage=7"))
		g.Eventually(func() string { return processCmdline(t, cpNode, "kube-apiserver") }, 3*time.Minute, 2*time.Second).
			Should(ContainSubstring("--audit-log-maxage=7"), "the running kube-apiserver has the argument")
		figures.Add("agent: control-plane configuration change (apiServer argument), calls to done", res.Duration)
	})
}

// writePolicy writes the extension's policy for the lane: the Kubernetes binaries of
// the target release from the artifact server, kubeadm's preflight exceptions this
// machine needs, and a health gate for the control plane that passes only while
// healthyFile exists on the node.
func writePolicy(path, artifactURL string) error {
	sums := map[string]string{}
	for _, b := range []string{"kubeadm", "kubelet"} {
		s, err := lanekit.SHA256File(k8sBin(to, b))
		if err != nil {
			return err
		}
		sums[b] = s
	}
	policy := fmt.Sprintf(`kubeadm:
  ignorePreflightErrors: [%s]
kubernetesBinaries:
  %s:
    linux/amd64:
      kubeadm: {url: %s/%s/kubeadm, digest: "sha256:%s"}
      kubelet: {url: %s/%s/kubelet, digest: "sha256:%s"}
gates:
- cluster: %s/%s
  machineSelector:
    matchExpressions:
    - {key: cluster.x-k8s.io/control-plane, operator: Exists}
  gates:
  - name: %s
    command: ["/bin/sh", "-c", "test -f %s"]
    passWithinSeconds: 20
`, strings.Join(upgradePreflightIgnores, ", "), to, artifactURL, to, sums["kubeadm"], artifactURL, to, sums["kubelet"],
		namespace, clusterName, laneGate, healthyFile)
	return os.WriteFile(path, []byte(policy), 0o600)
}

// assertNodeAt checks the node at version on the node itself and in its API: the
// binaries, the running kubelet's reported version, Ready and uncordoned.
func assertNodeAt(t *testing.T, c *Cluster, n Node, version string) {
	t.Helper()
	g := newG(t)
	g.Expect(lane.MustExec(t, n, "/usr/bin/kubelet", "--version")).To(ContainSubstring(version))
	g.Expect(strings.TrimSpace(lane.MustExec(t, n, "/usr/bin/kubeadm", "version", "-o", "short"))).To(Equal(version))
	g.Expect(WaitNode(context.Background(), c.Client, n.Name, version, 2*time.Minute)).To(Succeed())
	node, err := c.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Spec.Unschedulable).To(BeFalse(), "the node is back in service")
	st, err := protocol.DecodeStatus(node.Annotations[inplacev1.StatusAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
}

// assertSnapshotValid checks the etcd snapshot the agent took before the upgrade with
// etcd's own tool.
func assertSnapshotValid(t *testing.T, n Node) {
	t.Helper()
	g := newG(t)
	files := strings.Fields(lane.MustExec(t, n, "find", "/var/lib/capi-inplace", "-name", "*.db", "-size", "+0"))
	g.Expect(files).NotTo(BeEmpty(), "an etcd snapshot under /var/lib/capi-inplace")
	out := lane.MustExec(t, n, bin("etcdutl"), "snapshot", "status", files[len(files)-1], "-w", "json")
	var st struct {
		Revision  int64 `json:"revision"`
		TotalKey  int64 `json:"totalKey"`
		TotalSize int64 `json:"totalSize"`
	}
	g.Expect(json.Unmarshal([]byte(out), &st)).To(Succeed(), out)
	g.Expect(st.TotalKey).To(BeNumerically(">", 100), out)
	g.Expect(st.Revision).To(BeNumerically(">", 0), out)
}

// guardedDeployment runs one pod on node, protected by a PodDisruptionBudget that
// allows no disruption; it returns the pod's name.
func guardedDeployment(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) string {
	t.Helper()
	g := newG(t)
	labels := map[string]string{"app": "guarded"}
	pause := "registry.k8s.io/pause:" + pauseTag(t, to)
	_, err := cs.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
					TerminationGracePeriodSeconds: ptr.To[int64](2),
					Containers:                    []corev1.Container{{Name: "app", Image: pause, ImagePullPolicy: corev1.PullNever}},
				},
			},
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &intstr.IntOrString{IntVal: 1}, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var name string
	g.Eventually(func() bool {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=guarded"})
		if err != nil || len(pods.Items) != 1 || !podReady(&pods.Items[0]) || pods.Items[0].Status.PodIP == "" {
			return false
		}
		name = pods.Items[0].Name
		return true
	}, 3*time.Minute, time.Second).Should(BeTrue(), "the guarded pod runs on %s with a pod IP from the bridge CNI", node)
	g.Eventually(func() int32 {
		p, err := cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "guarded", metav1.GetOptions{})
		if err != nil {
			return -1
		}
		return p.Status.CurrentHealthy
	}, time.Minute, time.Second).Should(Equal(int32(1)))
	return name
}

func pauseTag(t *testing.T, version string) string {
	t.Helper()
	out, err := execOut(k8sBin(version, "kubeadm"), "config", "images", "list", "--kubernetes-version", version)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Fields(out) {
		if _, tag, ok := strings.Cut(l, "/pause:"); ok {
			return tag
		}
	}
	t.Fatalf("kubeadm %s lists no pause image", version)
	return ""
}

// setAPIServerArg sets an apiServer extra argument in the workload cluster's
// kubeadm-config ClusterConfiguration, as KubeadmControlPlane does.
func setAPIServerArg(ctx context.Context, cs kubernetes.Interface, name, value string) error {
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		return err
	}
	cc := cm.Data["ClusterConfiguration"]
	entry := fmt.Sprintf("  extraArgs:\n  - name: %s\n    value: %q\n", name, value)
	switch {
	case strings.Contains(cc, "apiServer:\n  extraArgs:\n"):
		cc = strings.Replace(cc, "apiServer:\n  extraArgs:\n", "apiServer:\n"+entry, 1)
	case strings.Contains(cc, "apiServer:\n"):
		cc = strings.Replace(cc, "apiServer:\n", "apiServer:\n"+entry, 1)
	default:
		return fmt.Errorf("kubeadm-config has no apiServer section:\n%s", cc)
	}
	cm.Data["ClusterConfiguration"] = cc
	_, err = cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// nodeWriters says who last wrote a Node's fields and what its annotations are, for
// a failure message about its schedulability.
func nodeWriters(n *corev1.Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, "annotations %v; managed fields:", n.Annotations)
	for _, f := range n.ManagedFields {
		fields := ""
		if f.FieldsV1 != nil {
			fields = f.FieldsV1.GetRawString()
		}
		fmt.Fprintf(&b, "\n  %s %s %s at %s: %s", f.Manager, f.Operation, f.Subresource, f.Time, fields)
	}
	return b.String()
}

// nodeStatus is the agent's status on n's Node (zero when it has none).
func nodeStatus(ctx context.Context, t *testing.T, c kubernetes.Interface, n Node) protocol.NodeStatus {
	t.Helper()
	node, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Logf("get node %s: %v", n.Name, err)
		return protocol.NodeStatus{}
	}
	st, err := protocol.DecodeStatus(node.Annotations[inplacev1.StatusAnnotation])
	if err != nil {
		return protocol.NodeStatus{}
	}
	return st
}
