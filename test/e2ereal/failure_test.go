//go:build e2ereal

package e2ereal

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/internal/singlenode"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
)

// The failure scenario's cluster and the pool gate the lane's policy gives it
// (writePolicy): the gate fails while the node has failUnhealthyFile, which the
// failing change itself delivers.
const (
	failNamespace     = "real-fail"
	failCluster       = "fail"
	failGate          = "lane-health"
	failUnhealthyFile = "/etc/capi-real/unhealthy"
)

// TestSingleNodeFailureAndRetry fails a configuration change of a single
// control plane on its health gate and checks that nothing is lost or replaced:
// the change (an API server argument and a file that makes the pool's gate fail)
// is rolled back on the node, the failure is visible on the KubeadmControlPlane,
// which stays held, and every write the workload cluster acknowledged during the
// update is still there (a configuration change leaves etcd's data as it was, so
// the rollback does not restore the snapshot). Then the operator fixes the spec and
// the next attempt runs to done on the same Machine.
func TestSingleNodeFailureAndRetry(t *testing.T) {
	// The scenarios run at once, each on clusters of its own: CI time.
	t.Parallel()
	g := newG(t)
	ctx := suite.ctx
	const ns, name = failNamespace, failCluster
	createCluster(t, clusterSpec{Namespace: ns, Name: name, Version: from, ControlPlanes: 1, SingleNode: true})
	machine := waitMachinesRunning(t, ns, name, 1)[0]
	node := machine.Status.NodeRef.Name
	wc, err := workloadClient(ctx, ns, name)
	g.Expect(err).NotTo(HaveOccurred())
	pod := deployWorkload(t, wc, "web", 1, true)
	waitControlPlaneHealthy(t, ns, name)
	machines := watchMachines(t, ns)
	const manifest = "/etc/kubernetes/manifests/kube-apiserver.yaml"
	manifestBefore := mustNodeExec(t, node, "cat", manifest)

	// The failing change: an API server argument and the file the gate refuses.
	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp)).To(Succeed())
	base := kcp.DeepCopy()
	kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.ExtraArgs = append(kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.ExtraArgs,
		bootstrapv1.Arg{Name: "event-ttl", Value: ptr.To("2h0m0s")})
	kcp.Spec.KubeadmConfigSpec.Files = append(kcp.Spec.KubeadmConfigSpec.Files,
		bootstrapv1.File{Path: failUnhealthyFile, Content: "the gate fails while this file exists\n"})
	writes := lanekit.WriteEvery(wc, "default", "during-update", time.Second, func(ctx context.Context) string {
		return string(agentPhase(ctx, wc, node))
	})
	start := time.Now()
	g.Expect(suite.stack.Client.Patch(ctx, kcp, client.MergeFrom(base))).To(Succeed())

	g.Eventually(func() error { return kcpRolledBack(ctx, ns, name) }, 20*time.Minute).Should(Succeed())
	suite.figures.Add("failure: write -> gate failed, node rolled back, failure recorded on the Machine", time.Since(start))
	acked, refused := writes.Stop()

	// Some acknowledged write landed after the change was applied (the agent was
	// verifying or rolling back): that is the write a snapshot restore would drop.
	var afterApply int
	for _, w := range acked {
		switch protocol.Phase(w.Label) {
		case protocol.PhaseVerifying, protocol.PhaseRollingBack, protocol.PhaseRolledBack:
			afterApply++
		}
	}
	g.Expect(afterApply).To(BeNumerically(">", 0), "no write was acknowledged after the change was applied: the scenario proves nothing")
	var lost []lanekit.Write
	g.Eventually(func() (err error) {
		lost, err = lanekit.Lost(ctx, wc, "default", acked)
		return err
	}, 5*time.Minute).Should(Succeed())
	suite.figures.Add("failure: workload-cluster writes during the failed update (acknowledged, of them after apply, refused, lost)",
		fmt.Sprintf("%d, %d, %d, %d", len(acked), afterApply, refused, len(lost)))
	g.Expect(lost).To(BeEmpty(), "writes acknowledged during the update and gone after the rollback")

	// The node is as it was and in service: its file and manifest restored, the
	// API server without the argument, uncordoned, the agent's verdict RolledBack.
	g.Eventually(func() error { return nodeRolledBack(ctx, wc, node) }, 5*time.Minute).Should(Succeed())
	_, err = nodeExec(ctx, node, "test", "!", "-e", failUnhealthyFile)
	g.Expect(err).NotTo(HaveOccurred(), "the failed change's file is still on the node")
	g.Expect(mustNodeExec(t, node, "cat", manifest)).To(Equal(manifestBefore), "the API server's manifest is not the one before the update")
	g.Eventually(func() error {
		p, err := wc.CoreV1().Pods("kube-system").Get(ctx, "kube-apiserver-"+node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if args := strings.Join(p.Spec.Containers[0].Command, " "); strings.Contains(args, "--event-ttl") {
			return fmt.Errorf("the API server still runs with the rolled-back argument: %s", args)
		}
		return nil
	}, 5*time.Minute).Should(Succeed())

	// Nothing was replaced, and KCP is not released with an outdated Machine (it would
	// create a surge Machine on a node with no spare capacity).
	held := &controlplanev1.KubeadmControlPlane{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, held)).To(Succeed())
	g.Expect(held.Annotations).To(HaveKey(clusterv1.PausedAnnotation), "KCP released with an outdated Machine")
	now := waitMachinesRunning(t, ns, name, 1)[0]
	g.Expect(now.UID).To(Equal(machine.UID))
	after, err := wc.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the workload's pod is still there")
	g.Expect(containerIDs(after)).To(Equal(containerIDs(pod)), "the same container serves")

	// The operator's fix: the same argument without the file. A new target, so a new
	// attempt, which runs to done and releases the KCP.
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp)).To(Succeed())
	base = kcp.DeepCopy()
	var files []bootstrapv1.File
	for _, f := range kcp.Spec.KubeadmConfigSpec.Files {
		if f.Path != failUnhealthyFile {
			files = append(files, f)
		}
	}
	kcp.Spec.KubeadmConfigSpec.Files = files
	// The attempt survives a power cut: the node container is killed (SIGKILL, no
	// shutdown) while its agent runs the gates, after every action that changed the
	// node, and started again; the agent resumes from its journal on the node's disk.
	backupsBefore := kubeadmBackups(ctx, node)
	ipBefore, err := nodeIP(ctx, node)
	g.Expect(err).NotTo(HaveOccurred())
	powerCut := powerCutDuring(ctx, node, "gates", nil)
	retry := time.Now()
	g.Expect(suite.stack.Client.Patch(ctx, kcp, client.MergeFrom(base))).To(Succeed())
	g.Eventually(func() error { return nodeAt(ctx, wc, node, from) }, 20*time.Minute).Should(Succeed())
	g.Eventually(func() error { return kcpReleased(ctx, ns, name, from) }).Should(Succeed())
	suite.figures.Add("failure: fixed spec, power cut during the gates -> node committed, KCP released", time.Since(retry))
	select {
	case err := <-powerCut:
		g.Expect(err).NotTo(HaveOccurred(), "the power cut")
	default:
		t.Fatal("the node's agent was never seen running the gates: no power cut")
	}
	ipAfter, err := nodeIP(ctx, node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ipAfter).To(Equal(ipBefore), "Docker gave the restarted node another address")
	// Each action ran once but the gates, which the power cut interrupted and the
	// restarted agent ran again; kubeadm leaves one manifest backup per run, of
	// `upgrade apply` or, for a configuration change, `upgrade node`.
	j, err := readJournal(ctx, node)
	g.Expect(err).NotTo(HaveOccurred())
	for a, n := range j.Runs {
		if a == "gates" {
			g.Expect(n).To(Equal(2), "the interrupted gates ran again: %v", j.Runs)
			continue
		}
		g.Expect(n).To(Equal(1), "action %s ran once: %v", a, j.Runs)
	}
	g.Expect(j.Runs).To(HaveKey("control-plane-config"), "a configuration change re-renders the static pods")
	g.Expect(lanekit.NewNames(backupsBefore, kubeadmBackups(ctx, node))).To(HaveLen(j.Runs["kubeadm-upgrade"]+j.Runs["control-plane-config"]),
		"kubeadm ran as often as the journal says")
	apiserver, err := wc.CoreV1().Pods("kube-system").Get(ctx, "kube-apiserver-"+node, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apiserver.Spec.Containers[0].Command).To(ContainElement("--event-ttl=2h0m0s"))
	_, err = nodeExec(ctx, node, "test", "!", "-e", failUnhealthyFile)
	g.Expect(err).NotTo(HaveOccurred(), "the file the fix removed from the spec is on the node")

	added, deleted := machines.result()
	g.Expect(added).To(BeEmpty(), "no Machine created")
	g.Expect(deleted).To(BeEmpty(), "no Machine deleted")
	g.Expect(waitMachinesRunning(t, ns, name, 1)[0].UID).To(Equal(machine.UID))
}

// The restore scenario's cluster: the same pool gate as the failure scenario's.
const (
	restoreNamespace = "real-restore"
	restoreCluster   = "restore"
)

// TestSingleNodeMinorUpgradeRollbackRestoresEtcd fails a minor upgrade of a single
// control plane on its health gate. A minor upgrade may have rewritten what etcd
// stores in storage versions the old API server cannot read, so the rollback
// restores the snapshot taken when the update started: the writes made before the
// update are all there, those acknowledged while the new release ran are all gone,
// and the node's status says so in a field (etcdData Restored), not only in text.
// The node loses power during the restore, with its API server and etcd stopped:
// the agent's rescue static pod finishes the restore and the rollback.
// The node is back at the old release and nothing was replaced.
func TestSingleNodeMinorUpgradeRollbackRestoresEtcd(t *testing.T) {
	// The scenarios run at once, each on clusters of its own: CI time.
	t.Parallel()
	g := newG(t)
	ctx := suite.ctx
	const ns, name = restoreNamespace, restoreCluster
	createCluster(t, clusterSpec{Namespace: ns, Name: name, Version: from, ControlPlanes: 1, SingleNode: true})
	machine := waitMachinesRunning(t, ns, name, 1)[0]
	node := machine.Status.NodeRef.Name
	wc, err := workloadClient(ctx, ns, name)
	g.Expect(err).NotTo(HaveOccurred())
	waitControlPlaneHealthy(t, ns, name)
	machines := watchMachines(t, ns)

	// The writer runs from before the change to after the rollback.
	writes := lanekit.WriteEvery(wc, "default", "around-restore", time.Second, func(ctx context.Context) string {
		return string(agentPhase(ctx, wc, node))
	})
	time.Sleep(5 * time.Second)
	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp)).To(Succeed())
	base := kcp.DeepCopy()
	kcp.Spec.Version = to
	kcp.Spec.KubeadmConfigSpec.Files = append(kcp.Spec.KubeadmConfigSpec.Files,
		bootstrapv1.File{Path: failUnhealthyFile, Content: "the gate fails while this file exists\n"})
	// The node loses power while its agent restores etcd, once the API server's
	// manifest is out of the manifest directory: no DaemonSet pod starts without
	// an API server, so only the agent's rescue static pod can finish the restore
	// and the rollback; the agent then reports it.
	powerCut := powerCutDuring(ctx, node, "rollback/restore-etcd", func(ctx context.Context) bool {
		_, err := nodeExec(ctx, node, "test", "!", "-e", "/etc/kubernetes/manifests/kube-apiserver.yaml")
		return err == nil
	})
	start := time.Now()
	g.Expect(suite.stack.Client.Patch(ctx, kcp, client.MergeFrom(base))).To(Succeed())

	g.Eventually(func() error { return kcpRolledBack(ctx, ns, name) }, 25*time.Minute).Should(Succeed())
	suite.figures.Add("restore: write ("+from+" -> "+to+" + the file the gate refuses) -> rolled back with etcd restored (power cut during the restore), failure recorded on the Machine", time.Since(start))
	g.Eventually(func() error { return nodeRolledBack(ctx, wc, node) }, 5*time.Minute).Should(Succeed())
	select {
	case err := <-powerCut:
		g.Expect(err).NotTo(HaveOccurred(), "the power cut")
	default:
		t.Fatal("the node's agent was never seen restoring etcd: no power cut")
	}
	j, err := readJournal(ctx, node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(j.Runs).To(HaveKey("rollback/restore-etcd"))
	g.Expect(j.Runs["rollback/restore-etcd"]).To(BeNumerically(">=", 2), "the rescue pod repeated the restore the power cut interrupted")
	_, err = nodeExec(ctx, node, "test", "!", "-e", "/etc/kubernetes/manifests/capi-inplace-rescue.yaml")
	g.Expect(err).NotTo(HaveOccurred(), "the rescue static pod is still on the node")
	// Writes made while the rolled-back node still serves, after the restore.
	time.Sleep(5 * time.Second)
	acked, refused := writes.Stop()

	// Before the change: kept. While the new release ran (the snapshot long taken):
	// gone. Writes labelled otherwise fall around the snapshot or the restore.
	var before, during []lanekit.Write
	for _, w := range acked {
		switch {
		case w.At.Before(start):
			before = append(before, w)
		case protocol.Phase(w.Label) == protocol.PhaseApplying || protocol.Phase(w.Label) == protocol.PhaseVerifying:
			during = append(during, w)
		}
	}
	g.Expect(before).NotTo(BeEmpty(), "no write before the change")
	g.Expect(during).NotTo(BeEmpty(), "no write acknowledged while the new release ran: the scenario proves nothing")
	var lostBefore, lostDuring []lanekit.Write
	g.Eventually(func() (err error) {
		if lostBefore, err = lanekit.Lost(ctx, wc, "default", before); err != nil {
			return err
		}
		lostDuring, err = lanekit.Lost(ctx, wc, "default", during)
		return err
	}, 5*time.Minute).Should(Succeed())
	suite.figures.Add("restore: workload writes (before the change: acknowledged, lost; while the new release ran: acknowledged, lost; refused throughout)",
		fmt.Sprintf("%d, %d; %d, %d; %d", len(before), len(lostBefore), len(during), len(lostDuring), refused))
	g.Expect(lostBefore).To(BeEmpty(), "writes from before the update are gone: the restore went further back than its snapshot")
	g.Expect(lostDuring).To(HaveLen(len(during)), "writes acknowledged after the snapshot survived a restore: the restore did not happen")

	// Said after, in a field: the node's status.
	n, err := wc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	st, err := protocol.DecodeStatus(n.Annotations[inplacev1.StatusAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.EtcdData).To(Equal(protocol.EtcdDataRestored))

	// The node runs the old release again, the file is gone, nothing was replaced,
	// and KCP stays held rather than replace the outdated Machine.
	g.Expect(mustNodeExec(t, node, "kubelet", "--version")).To(ContainSubstring(from))
	g.Expect(mustNodeExec(t, node, "cat", "/etc/kubernetes/manifests/kube-apiserver.yaml")).To(ContainSubstring("kube-apiserver:" + from))
	_, err = nodeExec(ctx, node, "test", "!", "-e", failUnhealthyFile)
	g.Expect(err).NotTo(HaveOccurred(), "the failed change's file is still on the node")
	held := &controlplanev1.KubeadmControlPlane{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, held)).To(Succeed())
	g.Expect(held.Annotations).To(HaveKey(clusterv1.PausedAnnotation), "KCP released with an outdated Machine")
	added, deleted := machines.result()
	g.Expect(added).To(BeEmpty(), "no Machine created")
	g.Expect(deleted).To(BeEmpty(), "no Machine deleted")
	g.Expect(waitMachinesRunning(t, ns, name, 1)[0].UID).To(Equal(machine.UID))
}

func readJournal(ctx context.Context, node string) (lanekit.Journal, error) {
	out, err := nodeExec(ctx, node, "cat", lanekit.AgentJournal)
	if err != nil {
		return lanekit.Journal{}, err
	}
	j, err := lanekit.ParseJournal([]byte(out))
	if err != nil {
		return lanekit.Journal{}, fmt.Errorf("%s: %w", node, err)
	}
	return j, nil
}

// powerCutDuring kills the node container (SIGKILL to every process: no
// shutdown, as a power cut) and starts it again the first time the agent has
// action in flight (duringAction).
func powerCutDuring(ctx context.Context, node, action string, when func(context.Context) bool) <-chan error {
	return duringAction(ctx, node, action, when, func(ctx context.Context) error {
		for _, args := range [][]string{{"kill", "--signal", "KILL", node}, {"start", node}} {
			if out, err := exec.CommandContext(ctx, dockerCLI, args...).CombinedOutput(); err != nil {
				return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, out)
			}
		}
		return nil
	})
}

// duringAction reads the node's journal every second and runs do the first time
// the agent has action in flight (any action when empty; and when, if not nil,
// holds). The channel gets do's outcome once it ran; nothing if it never did
// before ctx ends.
func duringAction(ctx context.Context, node, action string, when func(context.Context) bool, do func(context.Context) error) <-chan error {
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			e, err := readJournal(rctx, node)
			cancel()
			if err != nil || e.InFlight == "" || (action != "" && e.InFlight != action) {
				continue
			}
			if when != nil {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				ok := when(rctx)
				cancel()
				if !ok {
					continue
				}
			}
			done <- do(ctx)
			return
		}
	}()
	return done
}

// kubeadmBackups lists the manifest backups kubeadm upgrade leaves on the node, one
// per run.
func kubeadmBackups(ctx context.Context, node string) []string {
	out, _ := nodeExec(ctx, node, "ls", "/etc/kubernetes/tmp")
	var names []string
	for _, n := range strings.Fields(out) {
		if strings.HasPrefix(n, "kubeadm-backup-manifests-") {
			names = append(names, n)
		}
	}
	return names
}

// agentPhase is the phase the node's agent reports, empty when it cannot be read.
func agentPhase(ctx context.Context, wc kubernetes.Interface, node string) protocol.Phase {
	n, err := wc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	st, err := protocol.DecodeStatus(n.Annotations[inplacev1.StatusAnnotation])
	if err != nil {
		return ""
	}
	return st.Phase
}

// kcpRolledBack checks the single-node path reports a rolled-back update: the
// failure recorded on the KCP's Machine for its current target, and InPlaceUpdate=False
// with the RolledBack reason on the KCP.
func kcpRolledBack(ctx context.Context, ns, name string) error {
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp); err != nil {
		return err
	}
	failed, err := failureRecorded(ctx, kcp)
	if err != nil {
		return err
	}
	if !failed {
		return fmt.Errorf("KCP %s: no Machine records the failure of its target yet (%s)", name, inplacev1.FailedUpdateAnnotation)
	}
	return rolledBack("KCP "+name, kcp.Status.Conditions)
}

// kcpFailureReason is the reason of the KubeadmControlPlane's InPlaceUpdate
// condition once the single-node path recorded a failure on its Machine; "" before.
func kcpFailureReason(ctx context.Context, ns, name string) (string, error) {
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp); err != nil {
		return "", err
	}
	failed, err := failureRecorded(ctx, kcp)
	if err != nil {
		return "", err
	}
	c := meta.FindStatusCondition(kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	if !failed || c == nil {
		return "", nil
	}
	return c.Reason, nil
}

// failureRecorded reports whether a Machine of the KCP carries the single-node
// path's failure record (inplacev1.FailedUpdateAnnotation) for the KCP's current
// target, the one failure record of that path.
func failureRecorded(ctx context.Context, kcp *controlplanev1.KubeadmControlPlane) (bool, error) {
	list := &clusterv1.MachineList{}
	if err := suite.stack.Client.List(ctx, list, client.InNamespace(kcp.Namespace)); err != nil {
		return false, err
	}
	for i := range list.Items {
		m := &list.Items[i]
		if !metav1.IsControlledBy(m, kcp) {
			continue
		}
		if rec, ok := singlenode.MachineFailedUpdate(m); ok && rec.Target == singlenode.TargetHash(kcp) {
			return true, nil
		}
	}
	return false, nil
}

// rolledBack checks conds carry our InPlaceUpdate=False condition with the
// rolled-back reason; what names the object in the error.
func rolledBack(what string, conds []metav1.Condition) error {
	c := meta.FindStatusCondition(conds, inplacev1.InPlaceUpdateCondition)
	switch {
	case c == nil:
		return fmt.Errorf("%s: no %s condition", what, inplacev1.InPlaceUpdateCondition)
	case c.Status == metav1.ConditionFalse && c.Reason == inplacev1.ReasonRolledBack:
		return nil
	}
	err := fmt.Errorf("%s: %s=%s/%s: %s", what, c.Type, c.Status, c.Reason, protocol.BoundText(c.Message, 600))
	switch c.Reason {
	case inplacev1.ReasonDegraded, inplacev1.ReasonFailed, inplacev1.ReasonDeadlineExceeded, inplacev1.ReasonPlanNotPickedUp:
		// Final verdicts other than a rollback: waiting longer shows nothing more.
		return StopTrying("a final verdict other than rolled back").Wrap(err)
	}
	return err
}

// nodeRolledBack checks the node's agent reports RolledBack and the node is in
// service again (Ready, uncordoned).
func nodeRolledBack(ctx context.Context, wc kubernetes.Interface, node string) error {
	n, err := wc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !nodeReady(n) || n.Spec.Unschedulable {
		return fmt.Errorf("node %s: ready %v, cordoned %v", node, nodeReady(n), n.Spec.Unschedulable)
	}
	st, err := protocol.DecodeStatus(n.Annotations[inplacev1.StatusAnnotation])
	if err != nil {
		return err
	}
	if st.Phase != protocol.PhaseRolledBack {
		return fmt.Errorf("agent on %s: %s %s: %s", node, st.Phase, st.Reason, protocol.BoundText(st.Message, 600))
	}
	return nil
}
