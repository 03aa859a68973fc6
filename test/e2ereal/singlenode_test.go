//go:build e2ereal

package e2ereal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
)

// TestSingleNodeControlPlane is the seed's first case on a real node: one control
// plane, no workers, no spare capacity, opted into the single-node path. One write
// asks for the next minor, an API server argument and a file; the node is updated
// where it stands while a workload on it keeps serving.
func TestSingleNodeControlPlane(t *testing.T) {
	// The scenarios run at once, each on clusters of its own: CI time.
	t.Parallel()
	g := newG(t)
	ctx := suite.ctx
	const ns, name = singleNamespace, singleCluster
	createCluster(t, clusterSpec{Namespace: ns, Name: name, Version: from, ControlPlanes: 1, SingleNode: true})
	created := time.Now()

	machine := waitMachinesRunning(t, ns, name, 1)[0]
	node := machine.Status.NodeRef.Name
	suite.figures.Add("single node: Cluster created -> Machine with a Ready node", time.Since(created))
	wc, err := workloadClient(ctx, ns, name)
	g.Expect(err).NotTo(HaveOccurred())
	// The extension installs the agent at a cluster's first update (agentinstall), so
	// the update below includes pulling and starting it.

	pod := deployWorkload(t, wc, "web", 1, true)
	waitControlPlaneHealthy(t, ns, name)
	ip, err := nodeIP(ctx, node)
	g.Expect(err).NotTo(HaveOccurred())
	web := probeAny([]string{fmt.Sprintf("http://%s:%d/", ip, workloadPort)})
	api := lanekit.ProbeAPI(wc)
	machines := watchMachines(t, ns)

	// One write: the next minor, an API server argument and a file.
	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp)).To(Succeed())
	before := kcp.DeepCopy()
	kcp.Spec.Version = to
	kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.ExtraArgs = append(kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.ExtraArgs,
		bootstrapv1.Arg{Name: "event-ttl", Value: ptr.To("2h0m0s")})
	kcp.Spec.KubeadmConfigSpec.Files = append(kcp.Spec.KubeadmConfigSpec.Files,
		bootstrapv1.File{Path: "/etc/capi-real/added.conf", Content: "added in place\n"})
	start := time.Now()
	g.Expect(suite.stack.Client.Patch(ctx, kcp, client.MergeFrom(before))).To(Succeed())
	cordon := lanekit.WatchCordon(wc, node)

	g.Eventually(func() error { return nodeAt(ctx, wc, node, to) }, 20*time.Minute).Should(Succeed())
	g.Eventually(func() error { return machineUpdated(ctx, ns, machine.Name, to) }).Should(Succeed())
	g.Eventually(func() error { return kcpReleased(ctx, ns, name, to) }).Should(Succeed())
	took := time.Since(start)
	webDown, webLongest, _ := web.Stop()
	ok, all := web.Availability()
	apiDown, apiLongest, apiWindows := api.Stop()
	suite.figures.Add("single node: "+from+" -> "+to+" + argument + file, write -> node at "+to+", Machine updated, KCP released", took)
	suite.figures.Add("single node: cordon -> uncordon", cordon.Stop())
	suite.figures.Add("single node: workload probes answered (every 100 ms)", fmt.Sprintf("%d of %d (%.2f %%), down %s, longest gap %s", ok, all, 100*float64(ok)/float64(max(all, 1)), webDown.Round(100*time.Millisecond), webLongest.Round(100*time.Millisecond)))
	suite.figures.Add("single node: API server unavailable (total, longest window, windows)", fmt.Sprintf("%s, %s, %d", apiDown.Round(100*time.Millisecond), apiLongest.Round(100*time.Millisecond), apiWindows))

	// No Machine was created or deleted; the one there is kept its UID.
	added, deleted := machines.result()
	g.Expect(added).To(BeEmpty(), "no Machine created")
	g.Expect(deleted).To(BeEmpty(), "no Machine deleted")
	now := waitMachinesRunning(t, ns, name, 1)[0]
	g.Expect(now.UID).To(Equal(machine.UID))

	// The workload's container is the one it was: not restarted, not evicted.
	after, err := wc.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "the workload's pod is still there")
	g.Expect(after.UID).To(Equal(pod.UID))
	g.Expect(containerIDs(after)).To(Equal(containerIDs(pod)), "the same container serves")
	g.Expect(restarts(after)).To(Equal(restarts(pod)))
	g.Expect(ok).To(BeNumerically(">", 0))

	// The change is on the node and in its API server.
	g.Expect(mustNodeExec(t, node, "cat", "/etc/capi-real/added.conf")).To(Equal("added in place\n"))
	cm, err := wc.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.Data["ClusterConfiguration"]).To(ContainSubstring("event-ttl"))
	g.Expect(cm.Data["ClusterConfiguration"]).To(ContainSubstring("kubernetesVersion: " + to))
	apiserver, err := wc.CoreV1().Pods("kube-system").Get(ctx, "kube-apiserver-"+node, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apiserver.Spec.Containers[0].Command).To(ContainElement("--event-ttl=2h0m0s"))
	g.Expect(apiserver.Spec.Containers[0].Image).To(HaveSuffix(":" + to))
	g.Expect(mustNodeExec(t, node, "kubelet", "--version")).To(ContainSubstring(to))

	silentControlPlanePastDeadline(t, wc, ns, name, node, machine)
	userSymlinkRefused(t, ns, name, node, machine)
}

// The single-node scenario's cluster.
const singleNamespace, singleCluster = "real-single", "single"

// silentControlPlanePastDeadline: the watchdog on the only control plane. The
// Machine joins the lane policy's watchdog pool (a label on the KCP's machine
// template, set in place), then a KCP write adds a file; while the agent runs the
// pool's gates the test stops the kubelet and kills the agent. Past the pool's
// verifying deadline the update fails honestly: the KCP and Cluster say
// DeadlineExceeded, the node stays cordoned with the cause on it, and the KCP
// stays held (no replacement of the only control plane). The kubelet comes back,
// the agent resumes and commits, and the single-node controller, which asks again
// about an update that failed on a deadline, aligns the Machine and releases the
// KCP: done without a retry, the same Machine.
func silentControlPlanePastDeadline(t *testing.T, wc kubernetes.Interface, ns, name, node string, machine clusterv1.Machine) {
	g := newG(t)
	ctx := suite.ctx
	waitControlPlaneHealthy(t, ns, name)
	kcpKey := client.ObjectKey{Namespace: ns, Name: name}
	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(suite.stack.Client.Get(ctx, kcpKey, kcp)).To(Succeed())
	base := kcp.DeepCopy()
	if kcp.Spec.MachineTemplate.ObjectMeta.Labels == nil {
		kcp.Spec.MachineTemplate.ObjectMeta.Labels = map[string]string{}
	}
	kcp.Spec.MachineTemplate.ObjectMeta.Labels[watchdogPoolLabel] = "true"
	g.Expect(suite.stack.Client.Patch(ctx, kcp, client.MergeFrom(base))).To(Succeed())
	g.Eventually(func() (map[string]string, error) {
		m := &clusterv1.Machine{}
		err := suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: machine.Name}, m)
		return m.Labels, err
	}, 2*time.Minute).Should(HaveKeyWithValue(watchdogPoolLabel, "true"), "the label reaches the Machine in place")

	silenced := duringAction(ctx, node, "gates", nil, func(ctx context.Context) error { return silenceNode(ctx, node) })
	g.Expect(suite.stack.Client.Get(ctx, kcpKey, kcp)).To(Succeed())
	base = kcp.DeepCopy()
	kcp.Spec.KubeadmConfigSpec.Files = append(kcp.Spec.KubeadmConfigSpec.Files,
		bootstrapv1.File{Path: "/etc/capi-real/watchdog.conf", Content: "watched\n"})
	start := time.Now()
	g.Expect(suite.stack.Client.Patch(ctx, kcp, client.MergeFrom(base))).To(Succeed())
	silentAt := awaitSilence(t, silenced, start, "single node watchdog: KCP write -> kubelet stopped and agent killed during the gates")

	g.Eventually(func() (string, error) { return kcpFailureReason(ctx, ns, name) }, 5*time.Minute, 2*time.Second).
		Should(Equal(inplacev1.ReasonDeadlineExceeded))
	expectPastDeadline(t, wc, node, silentAt, "single node watchdog: agent silent -> KCP InPlaceUpdateDeadlineExceeded")
	g.Expect(suite.stack.Client.Get(ctx, kcpKey, kcp)).To(Succeed())
	g.Expect(kcp.Annotations).To(HaveKey(inplacev1.HoldAnnotation), "held: released, KCP would replace the only control plane")
	g.Expect(kcp.Annotations).To(HaveKey(clusterv1.PausedAnnotation))

	// The kubelet comes back; the agent resumes and commits, and that ends it.
	mustNodeExec(t, node, "systemctl", "start", "kubelet")
	back := time.Now()
	g.Eventually(func() error {
		kcp := &controlplanev1.KubeadmControlPlane{}
		if err := suite.stack.Client.Get(ctx, kcpKey, kcp); err != nil {
			return err
		}
		if failed, err := failureRecorded(ctx, kcp); err != nil {
			return err
		} else if failed {
			return errors.New("the KCP's Machine still records the failure")
		}
		return kcpReleased(ctx, ns, name, to)
	}, 10*time.Minute, 2*time.Second).Should(Succeed())
	g.Eventually(func() error { return inServiceAgain(ctx, wc, node) }, 2*time.Minute).Should(Succeed())
	suite.figures.Add("single node watchdog: kubelet back -> the late commit wins, KCP released", time.Since(back))
	g.Expect(mustNodeExec(t, node, "cat", "/etc/capi-real/watchdog.conf")).To(Equal("watched\n"))
	now := waitMachinesRunning(t, ns, name, 1)[0]
	g.Expect(now.UID).To(Equal(machine.UID), "the same Machine")
}

// userSymlinkRefused: host paths on a real node (review item 6). A local user,
// alice, swaps her ~/.ssh for a link to root's; then one KCP write gives alice an
// SSH key. The agent resolves every host path inside the host root and follows no
// symlink a user could have made, so it writes nothing through the link (it would
// have replaced root's authorized_keys): the update fails before it changes
// anything, the KCP is held with the failure, root's keys are as they were with
// nothing beside them, and the Machine is the same.
func userSymlinkRefused(t *testing.T, ns, name, node string, machine clusterv1.Machine) {
	g := newG(t)
	ctx := suite.ctx
	for _, args := range [][]string{
		{"useradd", "-m", "alice"},
		{"mkdir", "-p", "-m", "0700", "/root/.ssh"},
		{"sh", "-c", "echo 'ssh-ed25519 AAAA root-only' >> /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys"},
		{"rm", "-rf", "/home/alice/.ssh"},
		{"ln", "-s", "/root/.ssh", "/home/alice/.ssh"},
		{"chown", "-h", "alice:alice", "/home/alice/.ssh"},
	} {
		mustNodeExec(t, node, args...)
	}
	// Names, modes, owners and sizes (no times), and the keys' digest.
	rootKeys := []string{"sh", "-c", "ls -la --time-style=+ /root/.ssh && sha256sum /root/.ssh/authorized_keys"}
	before := mustNodeExec(t, node, rootKeys...)
	// The guard refuses a change while KCP reports the control plane's pods
	// unhealthy (KCP would replace the Machine): they restarted with the update.
	waitControlPlaneHealthy(t, ns, name)

	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp)).To(Succeed())
	base := kcp.DeepCopy()
	kcp.Spec.KubeadmConfigSpec.Users = append(kcp.Spec.KubeadmConfigSpec.Users,
		bootstrapv1.User{Name: "alice", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAlice alice@lane"}})
	start := time.Now()
	g.Expect(suite.stack.Client.Patch(ctx, kcp, client.MergeFrom(base))).To(Succeed())
	// The agent refuses while it backs the user's files up, before it changes
	// anything: the update fails (no rollback needed) and KCP is held with it.
	g.Eventually(func() (string, error) { return kcpFailureReason(ctx, ns, name) }, 15*time.Minute, 2*time.Second).
		Should(Equal(inplacev1.ReasonFailed))
	suite.figures.Add("single node: write (a key for a user whose ~/.ssh links to root's) -> refused before any change, failure recorded on the Machine", time.Since(start))
	g.Expect(mustNodeExec(t, node, rootKeys...)).To(Equal(before), "root's keys as they were, nothing written beside them")
	g.Expect(mustNodeExec(t, node, "readlink", "/home/alice/.ssh")).To(Equal("/root/.ssh\n"), "the link left alone")
	now := waitMachinesRunning(t, ns, name, 1)[0]
	g.Expect(now.UID).To(Equal(machine.UID), "the same Machine")
}

// nodeAt checks the Node reports version, is Ready and schedulable, and its agent
// committed.
func nodeAt(ctx context.Context, wc kubernetes.Interface, name, version string) error {
	n, err := wc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Status.NodeInfo.KubeletVersion != version {
		return fmt.Errorf("node %s runs kubelet %s", name, n.Status.NodeInfo.KubeletVersion)
	}
	if !nodeReady(n) {
		return fmt.Errorf("node %s not Ready", name)
	}
	if n.Spec.Unschedulable {
		return fmt.Errorf("node %s cordoned", name)
	}
	st, err := protocol.DecodeStatus(n.Annotations[inplacev1.StatusAnnotation])
	if err != nil {
		return err
	}
	if st.Phase != protocol.PhaseCommitted {
		return fmt.Errorf("agent on %s: %s", name, st.Phase)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// machineUpdated checks the Machine asks for version and carries no update in progress.
func machineUpdated(ctx context.Context, ns, name, version string) error {
	m := &clusterv1.Machine{}
	if err := suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		return err
	}
	if m.Spec.Version != version {
		return fmt.Errorf("machine %s at %s", name, m.Spec.Version)
	}
	if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
		return fmt.Errorf("machine %s: update in progress", name)
	}
	return nil
}

// kcpReleased checks the single-node path let the KubeadmControlPlane go, at version.
func kcpReleased(ctx context.Context, ns, name, version string) error {
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp); err != nil {
		return err
	}
	if _, held := kcp.Annotations[inplacev1.HoldAnnotation]; held {
		return fmt.Errorf("KCP %s still held", name)
	}
	if _, paused := kcp.Annotations[clusterv1.PausedAnnotation]; paused {
		return fmt.Errorf("KCP %s still paused", name)
	}
	// Every Machine of the KCP at the version: one entry, that version.
	if v := kcp.Status.Versions; len(v) != 1 || v[0].Version != version {
		return fmt.Errorf("KCP %s reports versions %+v", name, v)
	}
	return nil
}

// waitMachinesRunning waits until the cluster has n Machines with a Ready node.
func waitMachinesRunning(t *testing.T, ns, cluster string, n int) []clusterv1.Machine {
	t.Helper()
	var ms []clusterv1.Machine
	newG(t).Eventually(func() error {
		list := &clusterv1.MachineList{}
		if err := suite.stack.Client.List(suite.ctx, list, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
			return err
		}
		ready := 0
		for _, m := range list.Items {
			if m.Status.NodeRef.IsDefined() && conditionTrue(m.Status.Conditions, clusterv1.MachineNodeHealthyCondition) {
				ready++
			}
		}
		if len(list.Items) != n || ready != n {
			return fmt.Errorf("%d Machines, %d with a healthy node (want %d)", len(list.Items), ready, n)
		}
		ms = list.Items
		return nil
	}, 15*time.Minute).Should(Succeed())
	return ms
}

// waitControlPlaneHealthy waits until KubeadmControlPlane reports every component of
// the cluster's control-plane Machines healthy, as an operator waits before a change:
// KCP replaces an outdated Machine whose components are unhealthy, so the guard
// refuses a change before then (seen in this lane when the write came too early).
func waitControlPlaneHealthy(t *testing.T, ns, cluster string) {
	t.Helper()
	newG(t).Eventually(func() error {
		list := &clusterv1.MachineList{}
		if err := suite.stack.Client.List(suite.ctx, list, client.InNamespace(ns), client.MatchingLabels{
			clusterv1.ClusterNameLabel: cluster, clusterv1.MachineControlPlaneLabel: "",
		}); err != nil {
			return err
		}
		for _, m := range list.Items {
			for _, c := range []string{
				controlplanev1.KubeadmControlPlaneMachineAPIServerPodHealthyCondition,
				controlplanev1.KubeadmControlPlaneMachineControllerManagerPodHealthyCondition,
				controlplanev1.KubeadmControlPlaneMachineSchedulerPodHealthyCondition,
				controlplanev1.KubeadmControlPlaneMachineEtcdPodHealthyCondition,
				controlplanev1.KubeadmControlPlaneMachineEtcdMemberHealthyCondition,
			} {
				if !conditionTrue(m.Status.Conditions, c) {
					return fmt.Errorf("control-plane Machine %s: %s not True", m.Name, c)
				}
			}
		}
		return nil
	}, 10*time.Minute).Should(Succeed())
}

func conditionTrue(conds []metav1.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// deployWorkload runs the lane's HTTP server as a Deployment on a host port and returns
// one of its pods once all serve.
func deployWorkload(t *testing.T, wc kubernetes.Interface, name string, replicas int32, onControlPlane bool) *corev1.Pod {
	t.Helper()
	g := newG(t)
	labels := map[string]string{"app": name}
	spec := corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "http", Image: workloadRef,
			Ports:          []corev1.ContainerPort{{ContainerPort: 8080, HostPort: workloadPort}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
		}},
	}
	if onControlPlane {
		spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	_, err := wc.AppsV1().Deployments("default").Create(suite.ctx, d, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var pod *corev1.Pod
	g.Eventually(func() error {
		pods, err := wc.CoreV1().Pods("default").List(suite.ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return err
		}
		ready := 0
		for i := range pods.Items {
			for _, c := range pods.Items[i].Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
					pod = &pods.Items[i]
				}
			}
		}
		if ready != int(replicas) {
			return fmt.Errorf("%d of %d pods of %s ready", ready, replicas, name)
		}
		return nil
	}, 5*time.Minute).Should(Succeed())
	return pod
}

func containerIDs(p *corev1.Pod) []string {
	var ids []string
	for _, s := range p.Status.ContainerStatuses {
		ids = append(ids, s.ContainerID)
	}
	return ids
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// machineWatch records the Machines created and deleted in a namespace, polled every
// second (a poll cannot miss a replacement: a new Machine lives for minutes).
type machineWatch struct {
	mu             sync.Mutex
	known          map[types.UID]string
	gone           map[types.UID]bool
	added, deleted []string
	stop           chan struct{}
}

func watchMachines(t *testing.T, ns string) *machineWatch {
	t.Helper()
	w := &machineWatch{gone: map[types.UID]bool{}, stop: make(chan struct{})}
	list := func() map[types.UID]string {
		l := &clusterv1.MachineList{}
		if err := suite.stack.Client.List(suite.ctx, l, client.InNamespace(ns)); err != nil {
			return nil
		}
		m := map[types.UID]string{}
		for _, x := range l.Items {
			m[x.UID] = x.Name
		}
		return m
	}
	w.known = list()
	if w.known == nil {
		t.Fatal("list Machines")
	}
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			now := list()
			if now == nil {
				continue
			}
			w.mu.Lock()
			for uid, n := range now {
				if _, ok := w.known[uid]; !ok {
					w.added = append(w.added, n)
					w.known[uid] = n
				}
			}
			for uid, n := range w.known {
				if _, ok := now[uid]; !ok && !w.gone[uid] {
					w.deleted = append(w.deleted, n)
					w.gone[uid] = true
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(w.stop) })
	return w
}

func (w *machineWatch) result() (added, deleted []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.added...), append([]string(nil), w.deleted...)
}
