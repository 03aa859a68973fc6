//go:build e2ereal

package e2ereal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clientv3 "go.etcd.io/etcd/client/v3"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/internal/status"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
)

// TestHAControlPlaneAndWorkers rolls a highly available ClusterClass cluster (three
// control planes with stacked etcd, two workers) to the next minor with one write of
// its topology version. Cluster API's topology controller moves the control plane,
// then the workers, and their own in-place hooks do the rest: KubeadmControlPlane
// (three replicas, maxSurge 0) picks each control-plane Machine in turn, then the
// MachineDeployment each worker. On the way:
//   - the second control plane fails its pool's gate (a file the test puts on that
//     node only): the node is rolled back with its etcd member kept (a snapshot
//     restore would split the cluster), KCP goes no further, and the operator's
//     retry takes it to done;
//   - the third control plane loses power during `kubeadm upgrade node`;
//   - a worker loses power during its gates.
//
// Throughout, a workload with a PodDisruptionBudget serves from the workers and an
// application writes to the workload API server through the load balancer: no
// acknowledged write may be lost. The etcd cluster is read from the test after each
// control plane: the same three members (an in-place update keeps each member; a
// replacement would remove one and add another), every one healthy.
func TestHAControlPlaneAndWorkers(t *testing.T) {
	haHeadStart.running.Store(true)
	t.Cleanup(releaseHAHeadStart)
	t.Parallel()
	g := newG(t)
	ctx := suite.ctx
	const ns, name = haNamespace, haCluster
	createCluster(t, clusterSpec{Namespace: ns, Name: name, Class: haClass, Version: from, ControlPlanes: 3, Workers: 2})
	created := time.Now()
	ms := waitMachinesRunning(t, ns, name, 5)
	suite.figures.Add("ha: Cluster created -> 5 Machines with Ready nodes", time.Since(created))
	releaseHAHeadStart()
	waitControlPlaneHealthy(t, ns, name)
	wc, err := workloadClient(ctx, ns, name)
	g.Expect(err).NotTo(HaveOccurred())

	var cps, workers []string
	uids, machineOf := map[string]string{}, map[string]string{}
	for _, m := range ms {
		uids[m.Name] = string(m.UID)
		machineOf[m.Status.NodeRef.Name] = m.Name
		if _, ok := m.Labels[clusterv1.MachineControlPlaneLabel]; ok {
			cps = append(cps, m.Status.NodeRef.Name)
		} else {
			workers = append(workers, m.Status.NodeRef.Name)
		}
	}
	g.Expect(cps).To(HaveLen(3))
	g.Expect(workers).To(HaveLen(2))
	before, err := etcdMembers(ctx, cps[0])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(before.healthy()).To(Succeed())
	g.Expect(before.ids).To(HaveLen(3))
	manifests := map[string]string{}
	for _, n := range cps {
		manifests[n] = mustNodeExec(t, n, "sh", "-c", "cd /etc/kubernetes/manifests && sha256sum *.yaml")
	}

	// Two replicas on the workers (a host port each), at least one available.
	deployWorkload(t, wc, "web", 2, false)
	createPDB(t, wc, "web", 1)
	var urls []string
	for _, w := range workers {
		ip, err := nodeIP(ctx, w)
		g.Expect(err).NotTo(HaveOccurred())
		urls = append(urls, fmt.Sprintf("http://%s:%d/", ip, workloadPort))
	}
	web := probeAny(urls)
	api := lanekit.ProbeAPI(wc)
	writes := lanekit.WriteEvery(wc, "default", "ha-write", time.Second, nil)
	machines := watchMachines(t, ns)
	cordons := watchCordons(wc, append(append([]string(nil), cps...), workers...))

	start := time.Now()
	cluster := &clusterv1.Cluster{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cluster)).To(Succeed())
	kcpName := cluster.Spec.ControlPlaneRef.Name
	base := cluster.DeepCopy()
	cluster.Spec.Topology.Version = to
	g.Expect(suite.stack.Client.Patch(ctx, cluster, client.MergeFrom(base))).To(Succeed())

	var order []string
	first := waitNextControlPlaneAt(t, wc, cps, &order)
	suite.figures.Add("ha: topology write -> first control plane at "+to, time.Since(start))
	waitEtcdKept(t, first, before)

	// KCP's next pick: the test makes that node, and only it, fail its gate.
	var second string
	g.Eventually(func() error {
		for _, n := range cps {
			if n != first && cordoned(ctx, wc, n) {
				second = n
				return nil
			}
		}
		return errors.New("no second control plane cordoned yet")
	}, 10*time.Minute).Should(Succeed())
	mustNodeExec(t, second, "sh", "-c", "mkdir -p /etc/capi-real && echo 'the gate fails while this file exists' > "+failUnhealthyFile)
	third := cps[slices.IndexFunc(cps, func(n string) bool { return n != first && n != second })]
	failedAt := time.Now()
	g.Eventually(func() error { return nodeRolledBack(ctx, wc, second) }, 15*time.Minute).Should(Succeed())
	g.Eventually(func() error { return machineFailed(ctx, ns, machineOf[second]) }, 2*time.Minute).Should(Succeed())
	suite.figures.Add("ha: second control plane cordoned -> gate failed, node rolled back", time.Since(failedAt))
	// Rolled back on the node: the old kubelet and, byte for byte, the old static
	// pods, with its etcd member kept and caught up.
	g.Expect(mustNodeExec(t, second, "kubelet", "--version")).To(ContainSubstring(from))
	g.Expect(mustNodeExec(t, second, "sh", "-c", "cd /etc/kubernetes/manifests && sha256sum *.yaml")).To(Equal(manifests[second]))
	waitEtcdKept(t, second, before)
	// KubeadmControlPlane asks again for the failed Machine and starts no other, and
	// the topology controller moves no worker while the control plane is not done.
	g.Consistently(func() error {
		for _, n := range append([]string{third}, workers...) {
			if cordoned(ctx, wc, n) {
				return fmt.Errorf("node %s cordoned while %s failed", n, second)
			}
		}
		return machineFailed(ctx, ns, machineOf[second])
	}, 30*time.Second, 2*time.Second).Should(Succeed())
	// The operator's view: the failed Machine rolled back, the failure recorded
	// against the cluster's budget (exit code 3: a node's plan failed).
	view := statusOf(t, ns, name, 3)
	failedView := slices.IndexFunc(view.Machines, func(m status.MachineView) bool { return m.Name == machineOf[second] })
	g.Expect(failedView).NotTo(Equal(-1), "capi-inplace status shows Machine %s", machineOf[second])
	g.Expect(view.Machines[failedView].Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(view.Fleet.Failures).To(ConsistOf(HavePrefix(second+":")), "the failure is recorded against the budget")

	// The operator repairs the node and retries; the third control plane then loses
	// power while `kubeadm upgrade node` runs on it.
	// The workers wait for the whole control plane. Once KubeadmControlPlane starts
	// on its last Machine it reports every Machine at the new version (it reads
	// their spec), and the topology controller moves the MachineDeployment; a
	// worker's kubelet must not be newer than an API server it may reach. Whenever
	// a worker is first seen cordoned, every control plane must be done. One worker
	// loses power during its gates.
	var skewMu sync.Mutex
	var skew []string
	var workerCordons []*lanekit.CordonWatch
	for _, w := range workers {
		workerCordons = append(workerCordons, lanekit.WatchCordonThen(wc, w, func(*corev1.Node) {
			for _, cp := range cps {
				if err := nodeAt(ctx, wc, cp, to); err != nil {
					skewMu.Lock()
					skew = append(skew, fmt.Sprintf("worker %s cordoned while %v", w, err))
					skewMu.Unlock()
				}
			}
		}))
	}
	workerCut := powerCutDuring(ctx, workers[0], "gates", nil)
	var workerStart time.Time
	backupsBefore := kubeadmBackups(ctx, third)
	powerCut := make(chan error, 1)
	kubeletAfterCut := make(chan string, 1)
	go func(cut <-chan error) {
		// The kubelet the node boots after the cut: the agent installs the new
		// one only after kubeadm upgraded the node, and resumes minutes later.
		err := <-cut
		if err == nil {
			var out string
			out, err = nodeExec(ctx, third, "kubelet", "--version")
			kubeletAfterCut <- out
		}
		powerCut <- err
	}(powerCutDuring(ctx, third, "kubeadm-upgrade", nil))
	mustNodeExec(t, second, "rm", "-f", failUnhealthyFile)
	retried := time.Now()
	annotateMachine(t, ns, machineOf[second], inplacev1.RetryAnnotation, "true")
	for len(order) < 3 {
		n := waitNextControlPlaneAt(t, wc, cps, &order)
		suite.figures.Add(fmt.Sprintf("ha: retry -> control plane %d of 3 at %s", len(order), to), time.Since(retried))
		if len(order) == 3 {
			workerStart = time.Now()
		}
		waitEtcdKept(t, n, before)
	}
	g.Expect(order).To(Equal([]string{first, second, third}))
	select {
	case err := <-powerCut:
		g.Expect(err).NotTo(HaveOccurred(), "the power cut")
		g.Expect(<-kubeletAfterCut).To(ContainSubstring(from), "the kubelet booted during kubeadm upgrade is the old one: never newer than its API server")
	default:
		t.Fatal("the third control plane's agent was never seen running kubeadm: no power cut")
	}
	j, err := readJournal(ctx, third)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(j.Runs["kubeadm-upgrade"]).To(Equal(2), "the interrupted kubeadm upgrade ran again: %v", j.Runs)
	// kubeadm leaves a manifest backup per run that got as far as the static pods;
	// the cut may have come before the first did.
	backups := lanekit.NewNames(backupsBefore, kubeadmBackups(ctx, third))
	g.Expect(len(backups)).To(BeNumerically(">=", 1), "kubeadm upgraded the static pods")
	g.Expect(len(backups)).To(BeNumerically("<=", j.Runs["kubeadm-upgrade"]), "kubeadm ran no more often than the journal says")
	g.Eventually(func() error {
		if err := kcpAt(ctx, ns, kcpName, to); err != nil {
			return err
		}
		for _, n := range cps {
			if err := machineUpdated(ctx, ns, machineOf[n], to); err != nil {
				return err
			}
		}
		return nil
	}, 5*time.Minute).Should(Succeed())
	suite.figures.Add("ha: three control planes "+from+" -> "+to+" (KCP in-place hooks, one failure and retry, one power cut)", time.Since(start))

	// The workers, which the topology controller moves once the control plane is
	// done, one of them through a power cut during its gates.
	for _, w := range workers {
		g.Eventually(func() error { return nodeAt(ctx, wc, w, to) }, 15*time.Minute).Should(Succeed())
		g.Eventually(func() error { return machineUpdated(ctx, ns, machineOf[w], to) }).Should(Succeed())
	}
	suite.figures.Add("ha: third control plane at "+to+" -> two workers at "+to+" (topology, MachineDeployment in-place hooks, one power cut)", time.Since(workerStart))
	for _, c := range workerCordons {
		c.Stop()
	}
	skewMu.Lock()
	g.Expect(skew).To(BeEmpty(), "no worker updated before the whole control plane")
	skewMu.Unlock()
	select {
	case err := <-workerCut:
		g.Expect(err).NotTo(HaveOccurred(), "the worker's power cut")
	default:
		t.Fatal("the worker's agent was never seen running its gates: no power cut")
	}

	acked, refused := writes.Stop()
	webDown, webLongest, _ := web.Stop()
	ok, all := web.Availability()
	apiDown, apiLongest, apiWindows := api.Stop()
	most := cordons.stop()
	lost, err := lanekit.Lost(ctx, wc, "default", acked)
	g.Expect(err).NotTo(HaveOccurred())
	suite.figures.Add("ha: workload probes answered by either worker (every 100 ms)", fmt.Sprintf("%d of %d (%.2f %%), down %s, longest gap %s", ok, all, 100*float64(ok)/float64(max(all, 1)), webDown.Round(100*time.Millisecond), webLongest.Round(100*time.Millisecond)))
	suite.figures.Add("ha: API server through the load balancer unavailable (total, longest window, windows)", fmt.Sprintf("%s, %s, %d", apiDown.Round(100*time.Millisecond), apiLongest.Round(100*time.Millisecond), apiWindows))
	suite.figures.Add("ha: workload writes (acknowledged, refused, lost)", fmt.Sprintf("%d, %d, %d", len(acked), refused, len(lost)))

	g.Expect(lost).To(BeEmpty(), "no acknowledged write lost")
	g.Expect(most).To(Equal(map[string]int{"control plane": 1, "worker": 1}), "one node of each kind cordoned at a time")
	added, deleted := machines.result()
	g.Expect(added).To(BeEmpty(), "no Machine created")
	g.Expect(deleted).To(BeEmpty(), "no Machine deleted")
	for _, m := range waitMachinesRunning(t, ns, name, 5) {
		g.Expect(uids).To(HaveKeyWithValue(m.Name, string(m.UID)), "Machine %s kept its name and UID", m.Name)
		g.Expect(m.Spec.Version).To(Equal(to))
	}
}

// The HA scenario's cluster, of a ClusterClass: its pool has the failure scenarios'
// gate.
const (
	haNamespace = "real-ha"
	haCluster   = "ha"
	haClass     = "lane"
)

// waitNextControlPlaneAt waits until one more of cps than order lists runs version
// to with its agent committed, appends it to order and returns it.
func waitNextControlPlaneAt(t *testing.T, wc kubernetes.Interface, cps []string, order *[]string) string {
	t.Helper()
	var next string
	newG(t).Eventually(func() error {
		for _, n := range cps {
			if !slices.Contains(*order, n) && nodeAt(suite.ctx, wc, n, to) == nil {
				next = n
				return nil
			}
		}
		return fmt.Errorf("%d of %d control planes at %s", len(*order), len(cps), to)
	}, 20*time.Minute).Should(Succeed())
	*order = append(*order, next)
	return next
}

// waitEtcdKept waits until the member on node answers with the members of before,
// each of them healthy.
func waitEtcdKept(t *testing.T, node string, before etcdView) {
	t.Helper()
	newG(t).Eventually(func() error {
		now, err := etcdMembers(suite.ctx, node)
		if err != nil {
			return err
		}
		if !slices.Equal(now.ids, before.ids) {
			return fmt.Errorf("etcd members %x, were %x", now.ids, before.ids)
		}
		return now.healthy()
	}, 3*time.Minute).Should(Succeed(), "etcd read from %s", node)
}

func cordoned(ctx context.Context, wc kubernetes.Interface, node string) bool {
	n, err := wc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	return err == nil && n.Spec.Unschedulable
}

// machineFailed checks the Machine carries our InPlaceUpdate=False condition with
// the rolled-back reason.
func machineFailed(ctx context.Context, ns, name string) error {
	m := &clusterv1.Machine{}
	if err := suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		return err
	}
	return rolledBack("machine "+name, m.Status.Conditions)
}

// createPDB creates a PodDisruptionBudget for the pods labelled app=name.
func createPDB(t *testing.T, wc kubernetes.Interface, name string, minAvailable int32) {
	t.Helper()
	_, err := wc.PolicyV1().PodDisruptionBudgets("default").Create(suite.ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(minAvailable)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
	}, metav1.CreateOptions{})
	newG(t).Expect(err).NotTo(HaveOccurred())
}

func annotateMachine(t *testing.T, ns, name, key, value string) {
	t.Helper()
	m := &clusterv1.Machine{}
	g := newG(t)
	g.Expect(suite.stack.Client.Get(suite.ctx, client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
	base := m.DeepCopy()
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[key] = value
	g.Expect(suite.stack.Client.Patch(suite.ctx, m, client.MergeFrom(base))).To(Succeed())
}

// kcpAt checks every Machine of the KubeadmControlPlane runs version.
func kcpAt(ctx context.Context, ns, name, version string) error {
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp); err != nil {
		return err
	}
	if v := kcp.Status.Versions; len(v) != 1 || v[0].Version != version {
		return fmt.Errorf("KCP %s reports versions %+v", name, v)
	}
	return nil
}

// etcdView is the etcd cluster as one member reports it, each member then probed on
// its own client URL.
type etcdView struct {
	ids      []uint64 // sorted
	problems map[uint64]error
}

func (v etcdView) healthy() error {
	var errs []error
	for id, p := range v.problems {
		if p != nil {
			errs = append(errs, fmt.Errorf("member %x: %w", id, p))
		}
	}
	return errors.Join(errs...)
}

// etcdMembers reads the etcd cluster from the test, with the node's own etcd
// health-check client certificate (kubeadm writes one on every control plane): the
// member list as that node's member knows it (linearizable: it must reach the
// leader), then a linearizable read from every member.
func etcdMembers(ctx context.Context, node string) (etcdView, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	read := func(f string) ([]byte, error) {
		s, err := nodeExec(ctx, node, "cat", "/etc/kubernetes/pki/etcd/"+f)
		return []byte(s), err
	}
	ca, err := read("ca.crt")
	if err != nil {
		return etcdView{}, err
	}
	crt, err := read("healthcheck-client.crt")
	if err != nil {
		return etcdView{}, err
	}
	key, err := read("healthcheck-client.key")
	if err != nil {
		return etcdView{}, err
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return etcdView{}, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return etcdView{}, fmt.Errorf("%s: no etcd CA", node)
	}
	ip, err := nodeIP(ctx, node)
	if err != nil {
		return etcdView{}, err
	}
	tlsConfig := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	connect := func(endpoint string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 5 * time.Second})
	}
	c, err := connect("https://" + ip + ":2379")
	if err != nil {
		return etcdView{}, err
	}
	defer c.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	list, err := c.MemberList(rctx)
	if err != nil {
		return etcdView{}, fmt.Errorf("etcd member list from %s: %w", node, err)
	}
	v := etcdView{problems: map[uint64]error{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range list.Members {
		v.ids = append(v.ids, m.ID)
		if m.IsLearner || len(m.ClientURLs) == 0 {
			v.problems[m.ID] = fmt.Errorf("%s: learner or not started", m.Name)
			continue
		}
		wg.Go(func() {
			err := func() error {
				mc, err := connect(m.ClientURLs[0])
				if err != nil {
					return err
				}
				defer mc.Close()
				pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
				defer pcancel()
				st, err := mc.Status(pctx, m.ClientURLs[0])
				if err != nil {
					return err
				}
				if len(st.Errors) > 0 {
					return fmt.Errorf("%s reports %v", m.Name, st.Errors)
				}
				if st.Leader == 0 {
					return fmt.Errorf("%s knows no leader", m.Name)
				}
				_, err = mc.Get(pctx, "health")
				return err
			}()
			mu.Lock()
			v.problems[m.ID] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(v.ids)
	return v, nil
}

// cordonWatch records the most nodes of each kind cordoned at once, polled every
// second.
type cordonWatch struct {
	mu   sync.Mutex
	most map[string]int
	done chan struct{}
	end  chan struct{}
}

func watchCordons(wc kubernetes.Interface, nodes []string) *cordonWatch {
	w := &cordonWatch{most: map[string]int{}, done: make(chan struct{}), end: make(chan struct{})}
	watched := map[string]bool{}
	for _, n := range nodes {
		watched[n] = true
	}
	go func() {
		defer close(w.end)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			list, err := wc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			cancel()
			if err == nil {
				now := map[string]int{}
				for _, n := range list.Items {
					if !watched[n.Name] || !n.Spec.Unschedulable {
						continue
					}
					kind := "worker"
					if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; ok {
						kind = "control plane"
					}
					now[kind]++
				}
				w.mu.Lock()
				for k, c := range now {
					w.most[k] = max(w.most[k], c)
				}
				w.mu.Unlock()
			}
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *cordonWatch) stop() map[string]int {
	close(w.done)
	<-w.end
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most
}
