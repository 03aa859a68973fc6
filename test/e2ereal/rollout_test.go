//go:build e2ereal

package e2ereal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
	"github.com/capi-inplace/capi-inplace/test/realcapi"
)

// TestControlPlaneAndWorker rolls a control plane and a worker to the next minor in
// place: the control plane through the single-node path (KubeadmControlPlane cannot
// update fewer than three replicas in place), then the worker through Cluster API's
// own MachineDeployment in-place hooks, drained with real evictions, while a
// workload with a PodDisruptionBudget serves from both nodes.
func TestControlPlaneAndWorker(t *testing.T) {
	// The scenarios run at once, each on clusters of its own: CI time.
	t.Parallel()
	g := newG(t)
	ctx := suite.ctx
	const ns, name = pairNamespace, pairCluster
	createCluster(t, clusterSpec{Namespace: ns, Name: name, Version: from, ControlPlanes: 1, Workers: 1, SingleNode: true})
	created := time.Now()
	ms := waitMachinesRunning(t, ns, name, 2)
	suite.figures.Add("pair: Cluster created -> 2 Machines with Ready nodes", time.Since(created))
	wc, err := workloadClient(ctx, ns, name)
	g.Expect(err).NotTo(HaveOccurred())
	var cp, worker clusterv1.Machine
	for _, m := range ms {
		if _, ok := m.Labels[clusterv1.MachineControlPlaneLabel]; ok {
			cp = m
		} else {
			worker = m
		}
	}
	g.Expect(cp.Name).NotTo(BeEmpty())
	g.Expect(worker.Name).NotTo(BeEmpty())

	// Two replicas, one per node (a host port each), at least one available.
	deployWorkload(t, wc, "web", 2, true)
	createPDB(t, wc, "web", 1)
	var urls []string
	for _, m := range ms {
		ip, err := nodeIP(ctx, m.Status.NodeRef.Name)
		g.Expect(err).NotTo(HaveOccurred())
		urls = append(urls, fmt.Sprintf("http://%s:%d/", ip, workloadPort))
	}
	waitControlPlaneHealthy(t, ns, name)
	web := probeAny(urls)
	api := lanekit.ProbeAPI(wc)
	machines := watchMachines(t, ns)

	start := time.Now()
	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp)).To(Succeed())
	base := kcp.DeepCopy()
	kcp.Spec.Version = to
	g.Expect(suite.stack.Client.Patch(ctx, kcp, client.MergeFrom(base))).To(Succeed())
	g.Eventually(func() error { return nodeAt(ctx, wc, cp.Status.NodeRef.Name, to) }, 20*time.Minute).Should(Succeed())
	g.Eventually(func() error { return kcpReleased(ctx, ns, name, to) }).Should(Succeed())
	suite.figures.Add("pair: control plane "+from+" -> "+to+" (single-node path)", time.Since(start))

	// The guard refuses, at the API, a write that would replace the worker: another
	// infrastructure template (another node image), which no node can take in place.
	md := &clusterv1.MachineDeployment{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-md"}, md)).To(Succeed())
	other, err := realcapi.Render(otherTemplate, struct{ Name string }{name})
	g.Expect(err).NotTo(HaveOccurred())
	other[0].SetNamespace(ns)
	g.Expect(suite.stack.Client.Create(ctx, other[0])).To(Succeed())
	replacing := md.DeepCopy()
	replacing.Spec.Template.Spec.InfrastructureRef.Name = other[0].GetName()
	err = suite.stack.Client.Patch(ctx, replacing, client.MergeFrom(md))
	g.Expect(err).To(HaveOccurred(), "the guard refuses a write that would replace a Machine")
	g.Expect(err.Error()).To(ContainSubstring(worker.Name), "the refusal names the Machine it would replace")
	sets := &clusterv1.MachineSetList{}
	g.Expect(suite.stack.Client.List(ctx, sets, client.InNamespace(ns))).To(Succeed())
	g.Expect(sets.Items).To(HaveLen(1), "no MachineSet created for the refused write")

	// The budget allows no disruption while the worker's update starts: the drain
	// is held, with the node cordoned and the Machine saying why, until the
	// operator relaxes the budget.
	setPDBMinAvailable(t, wc, "web", 2)
	workerStart := time.Now()
	cordon := lanekit.WatchCordon(wc, worker.Status.NodeRef.Name)
	// One write: the next minor, and a bootstrap template with a kubelet argument
	// and a file more.
	workerConfig, err := realcapi.Render(workerConfigTemplate, workerConfig{Name: name, Generation: 2})
	g.Expect(err).NotTo(HaveOccurred())
	workerConfig[0].SetNamespace(ns)
	g.Expect(suite.stack.Client.Create(ctx, workerConfig[0])).To(Succeed())
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-md"}, md)).To(Succeed())
	mdBase := md.DeepCopy()
	md.Spec.Template.Spec.Version = to
	md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = workerConfig[0].GetName()
	g.Expect(suite.stack.Client.Patch(ctx, md, client.MergeFrom(mdBase))).To(Succeed())
	g.Eventually(func() error { return drainHeld(ctx, wc, ns, worker.Name, worker.Status.NodeRef.Name, "web") }, 10*time.Minute).Should(Succeed())
	suite.figures.Add("pair: worker update -> drain held by the PodDisruptionBudget, shown on the Machine", time.Since(workerStart))
	g.Consistently(func() error { return drainHeld(ctx, wc, ns, worker.Name, worker.Status.NodeRef.Name, "web") }, 20*time.Second, 2*time.Second).Should(Succeed())
	setPDBMinAvailable(t, wc, "web", 1)
	g.Eventually(func() error { return nodeAt(ctx, wc, worker.Status.NodeRef.Name, to) }, 15*time.Minute).Should(Succeed())
	g.Eventually(func() error { return machineUpdated(ctx, ns, worker.Name, to) }).Should(Succeed())
	g.Eventually(func() (string, error) {
		c, err := inPlaceCondition(ctx, ns, worker.Name)
		if err != nil || c == nil {
			return "", err
		}
		return c.Reason, nil
	}).Should(Equal(inplacev1.ReasonSucceeded), "the drain's hold is no longer shown once the update is done")
	suite.figures.Add("pair: worker "+from+" -> "+to+", a kubelet argument and a file, through the MachineDeployment's in-place hooks (the drain held 20 s by the budget included)", time.Since(workerStart))
	suite.figures.Add("pair: worker cordon -> uncordon", cordon.Stop())

	webDown, webLongest, _ := web.Stop()
	ok, all := web.Availability()
	apiDown, apiLongest, apiWindows := api.Stop()
	suite.figures.Add("pair: workload probes answered by either node (every 100 ms)", fmt.Sprintf("%d of %d (%.2f %%), down %s, longest gap %s", ok, all, 100*float64(ok)/float64(max(all, 1)), webDown.Round(100*time.Millisecond), webLongest.Round(100*time.Millisecond)))
	suite.figures.Add("pair: API server unavailable (total, longest window, windows)", fmt.Sprintf("%s, %s, %d", apiDown.Round(100*time.Millisecond), apiLongest.Round(100*time.Millisecond), apiWindows))

	added, deleted := machines.result()
	g.Expect(added).To(BeEmpty(), "no Machine created")
	g.Expect(deleted).To(BeEmpty(), "no Machine deleted")
	for _, m := range waitMachinesRunning(t, ns, name, 2) {
		g.Expect([]string{string(cp.UID), string(worker.UID)}).To(ContainElement(string(m.UID)))
		g.Expect(m.Spec.Version).To(Equal(to))
	}
	workerNode := worker.Status.NodeRef.Name
	g.Expect(mustNodeExec(t, workerNode, "kubelet", "--version")).To(ContainSubstring(to))
	// The new bootstrap template on the node: its file, and its kubelet argument in
	// the running kubelet, which reports the node's capacity by it.
	g.Expect(mustNodeExec(t, workerNode, "cat", "/etc/capi-real/site.conf")).To(Equal("site=lane\n"))
	g.Expect(mustNodeExec(t, workerNode, "cat", "/var/lib/kubelet/kubeadm-flags.env")).To(ContainSubstring("--max-pods=111"))
	g.Eventually(func() (int64, error) {
		n, err := wc.CoreV1().Nodes().Get(ctx, workerNode, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		return n.Status.Capacity.Pods().Value(), nil
	}, 2*time.Minute).Should(Equal(int64(111)), "the running kubelet applies --max-pods")

	// The managed agent serves its metrics on the node's address, as Prometheus
	// scrapes it: the worker's agent has journaled and reported this update.
	workerIP, err := nodeIP(ctx, workerNode)
	g.Expect(err).NotTo(HaveOccurred())
	metrics, err := scrapeAgent(ctx, workerIP)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(metrics).To(HaveKeyWithValue(`capi_inplace_agent_journal_writes_total{result="ok"}`, BeNumerically(">", 0)))
	g.Expect(metrics).To(HaveKeyWithValue(`capi_inplace_agent_journal_writes_total{result="error"}`, BeZero()))
	g.Expect(metrics).To(HaveKeyWithValue("capi_inplace_agent_last_report_timestamp_seconds", BeNumerically(">=", float64(workerStart.Unix()))))

	silentAgentPastDeadline(t, wc, ns, name, worker, workerNode)
}

// scrapeAgent reads the metrics the agent on the node at ip serves on its port
// (agentinstall.MetricsPort), each sample keyed by its name and labels as
// Prometheus prints them.
func scrapeAgent(ctx context.Context, ip string) (map[string]float64, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, fmt.Sprintf("http://%s:%d/metrics", ip, agentinstall.MetricsPort), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agent metrics on %s: %s", ip, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("agent metrics on %s: %w", ip, err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out, nil
}

// silentAgentPastDeadline: the watchdog on a real node. The worker's Machine joins
// the lane policy's watchdog pool (a label on the MachineDeployment's template,
// which Cluster API carries to the Machine in place), whose verifying deadline is
// watchdogVerifying (deadlines.pools); then one more change (a file). While the
// agent runs that pool's gates, the node's kubelet stops and the agent dies, as
// after a reboot into a kubelet that cannot run pods: no report comes again. Past
// the pool's deadline the Machine says InPlaceUpdateDeadlineExceeded, the node
// stays cordoned with the cause on it, and the remediation hold is released.
// Once the kubelet is back, the agent resumes from its journal and commits: the
// node's own verdict wins, the node is back in service with the file, and the
// Machine is the same.
func silentAgentPastDeadline(t *testing.T, wc kubernetes.Interface, ns, name string, worker clusterv1.Machine, node string) {
	g := newG(t)
	machine := worker.Name
	ctx := suite.ctx
	md := &clusterv1.MachineDeployment{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-md"}, md)).To(Succeed())
	base := md.DeepCopy()
	if md.Spec.Template.Labels == nil {
		md.Spec.Template.Labels = map[string]string{}
	}
	md.Spec.Template.Labels[watchdogPoolLabel] = "true"
	g.Expect(suite.stack.Client.Patch(ctx, md, client.MergeFrom(base))).To(Succeed())
	g.Eventually(func() (map[string]string, error) {
		m := &clusterv1.Machine{}
		err := suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: machine}, m)
		return m.Labels, err
	}, 2*time.Minute).Should(HaveKeyWithValue(watchdogPoolLabel, "true"), "the label reaches the Machine in place")

	config, err := realcapi.Render(workerConfigTemplate, workerConfig{Name: name, Generation: 3, Watched: true})
	g.Expect(err).NotTo(HaveOccurred())
	config[0].SetNamespace(ns)
	g.Expect(suite.stack.Client.Create(ctx, config[0])).To(Succeed())
	silenced := duringAction(ctx, node, "gates", nil, func(ctx context.Context) error { return silenceNode(ctx, node) })
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-md"}, md)).To(Succeed())
	base = md.DeepCopy()
	md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = config[0].GetName()
	start := time.Now()
	g.Expect(suite.stack.Client.Patch(ctx, md, client.MergeFrom(base))).To(Succeed())
	silentAt := awaitSilence(t, silenced, start, "watchdog: worker change -> kubelet stopped and agent killed during the gates")

	g.Eventually(func() (string, error) {
		c, err := inPlaceCondition(ctx, ns, machine)
		if err != nil || c == nil {
			return "", err
		}
		return c.Reason, nil
	}, 5*time.Minute, 2*time.Second).Should(Equal(inplacev1.ReasonDeadlineExceeded))
	expectPastDeadline(t, wc, node, silentAt, "watchdog: agent silent -> Machine InPlaceUpdateDeadlineExceeded")
	g.Eventually(func() (map[string]string, error) {
		m := &clusterv1.Machine{}
		err := suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: machine}, m)
		return m.Annotations, err
	}, time.Minute).ShouldNot(HaveKey(clusterv1.MachineSkipRemediationAnnotation), "released to MachineHealthCheck")

	// The kubelet comes back; the agent resumes and commits.
	mustNodeExec(t, node, "systemctl", "start", "kubelet")
	back := time.Now()
	g.Eventually(func() (string, error) {
		c, err := inPlaceCondition(ctx, ns, machine)
		if err != nil || c == nil {
			return "", err
		}
		return c.Reason, nil
	}, 10*time.Minute, 2*time.Second).Should(Equal(inplacev1.ReasonSucceeded))
	g.Eventually(func() error { return inServiceAgain(ctx, wc, node) }, 2*time.Minute).Should(Succeed())
	suite.figures.Add("watchdog: kubelet back -> the agent's commit wins, node back in service", time.Since(back))
	g.Expect(mustNodeExec(t, node, "cat", "/etc/capi-real/watchdog.conf")).To(Equal("watched\n"))
	m := &clusterv1.Machine{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: machine}, m)).To(Succeed())
	g.Expect(m.UID).To(Equal(worker.UID), "the same Machine")
}

// awaitSilence waits until silenced says the node was silenced (silenceNode
// during the watchdog pool's gates) and adds how long after start to the
// figures under figure; it returns when.
func awaitSilence(t *testing.T, silenced <-chan error, start time.Time, figure string) time.Time {
	t.Helper()
	select {
	case err := <-silenced:
		if err != nil {
			t.Fatalf("silencing the node: %v", err)
		}
	case <-time.After(10 * time.Minute):
		t.Fatal("the agent was never seen running the watchdog pool's gates")
	}
	silentAt := time.Now()
	suite.figures.Add(figure, silentAt.Sub(start))
	return silentAt
}

// expectPastDeadline checks a watchdog phase's failure, seen now: it came no
// earlier than the pool's verifying deadline after silentAt (the figure, under
// what), and the node stays cordoned with the deadline's cause on it.
func expectPastDeadline(t *testing.T, wc kubernetes.Interface, node string, silentAt time.Time, what string) {
	t.Helper()
	g := newG(t)
	failed := time.Since(silentAt)
	suite.figures.Add(fmt.Sprintf("%s (the pool's verifying deadline %s)", what, watchdogVerifying), failed)
	g.Expect(failed).To(BeNumerically(">=", watchdogVerifying-10*time.Second), "the deadline fired before it was due")
	n, err := wc.CoreV1().Nodes().Get(suite.ctx, node, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.Spec.Unschedulable).To(BeTrue(), "a node the agent may be changing is never put back in service")
	g.Expect(n.Annotations).To(HaveKeyWithValue(inplacev1.DeadlineExceededAnnotation, ContainSubstring("phase Verifying")))
}

// inServiceAgain checks a node past a deadline is back in service: uncordoned,
// the deadline's cause removed.
func inServiceAgain(ctx context.Context, wc kubernetes.Interface, node string) error {
	n, err := wc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Spec.Unschedulable {
		return fmt.Errorf("node %s still cordoned", node)
	}
	if v, marked := n.Annotations[inplacev1.DeadlineExceededAnnotation]; marked {
		return fmt.Errorf("node %s still marked past a deadline: %s", node, v)
	}
	return nil
}

// silenceNode stops the node's kubelet (so that nothing restarts the agent) and
// kills the agent.
func silenceNode(ctx context.Context, node string) error {
	for _, args := range [][]string{{"systemctl", "stop", "kubelet"}, {"pkill", "-KILL", "-f", "^/capi-inplace-agent "}} {
		if out, err := nodeExec(ctx, node, args...); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// The pair scenario's cluster.
const pairNamespace, pairCluster = "real-pair", "pair"

// The lane policy's watchdog pool (writePolicy): Machines with the label, a gate
// that takes a few seconds (so the silence finds the agent in its gates) and a
// short verifying deadline.
const (
	watchdogPoolLabel = "e2ereal.capi-inplace.dev/watchdog"
	watchdogVerifying = 60 * time.Second
)

// workerConfigTemplate is the worker's bootstrap template with a kubelet argument
// and a file more than the cluster's (workerConfig names it; Watched adds one
// more file, the watchdog phase's change).
const workerConfigTemplate = `
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata:
  name: {{.Name}}-worker-{{.Generation}}
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          kubeletExtraArgs:
          - name: max-pods
            value: "111"
      files:
      - path: /etc/capi-real/cluster.conf
        content: "generation 1\n"
      - path: /etc/capi-real/site.conf
        content: "site=lane\n"
{{- if .Watched}}
      - path: /etc/capi-real/watchdog.conf
        content: "watched\n"
{{- end}}
`

// workerConfig fills workerConfigTemplate.
type workerConfig struct {
	Name       string
	Generation int
	Watched    bool
}

// otherTemplate is an infrastructure template with another node image.
const otherTemplate = `
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevMachineTemplate
metadata:
  name: {{.Name}}-node-other
spec:
  template:
    spec:
      backend:
        docker:
          customImage: capi-real/node:other
`

// probeAny probes urls every 100 ms; a probe succeeds when any of them answers.
func probeAny(urls []string) *lanekit.Outage {
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	return lanekit.Probe(100*time.Millisecond, func(ctx context.Context) error {
		var errs []error
		for _, u := range urls {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
				err = fmt.Errorf("%s: HTTP %d", u, resp.StatusCode)
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

// drainHeld checks that the update of Machine machine is held by its drain: its
// InPlaceUpdate condition says DrainBlocked, its node is cordoned and still runs
// a pod labelled app, which the drain could not evict.
func drainHeld(ctx context.Context, wc kubernetes.Interface, ns, machine, node, app string) error {
	c, err := inPlaceCondition(ctx, ns, machine)
	if err != nil {
		return err
	}
	if c == nil || c.Reason != inplacev1.ReasonDrainBlocked {
		return fmt.Errorf("machine %s: InPlaceUpdate condition %v, not %s", machine, c, inplacev1.ReasonDrainBlocked)
	}
	n, err := wc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !n.Spec.Unschedulable {
		return fmt.Errorf("node %s not cordoned", node)
	}
	pods, err := wc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return nil
		}
	}
	return fmt.Errorf("no running pod app=%s left on node %s", app, node)
}

// inPlaceCondition is the Machine's InPlaceUpdate condition; nil when it has none.
func inPlaceCondition(ctx context.Context, ns, name string) (*metav1.Condition, error) {
	m := &clusterv1.Machine{}
	if err := suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(m.Status.Conditions, inplacev1.InPlaceUpdateCondition), nil
}

// setPDBMinAvailable sets the minAvailable of the PodDisruptionBudget name.
func setPDBMinAvailable(t *testing.T, wc kubernetes.Interface, name string, minAvailable int32) {
	t.Helper()
	g := newG(t)
	pdb, err := wc.PolicyV1().PodDisruptionBudgets("default").Get(suite.ctx, name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pdb.Spec.MinAvailable = ptr.To(intstr.FromInt32(minAvailable))
	_, err = wc.PolicyV1().PodDisruptionBudgets("default").Update(suite.ctx, pdb, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
}
