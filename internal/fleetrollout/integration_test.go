package fleetrollout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// The controller runs against a real API server with Cluster API's CRDs and ours;
// no Cluster API controller runs: the tests play them, marking Machines updated.
var (
	env *testenv.Env
	c   client.Client
	// reg holds the controller's metrics (Options.Metrics), read by the tests.
	reg *prometheus.Registry
)

const (
	from   = "v1.35.0"
	target = "v1.36.0"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.MainFunc(m, testenv.Options{
		CAPI:    []testenv.CRDSet{testenv.CAPICore, testenv.KubeadmControlPlane},
		CRDDirs: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	}, &env, startManager))
}

func startManager(e *testenv.Env) (func(), error) {
	ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{}))
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return nil, err
	}
	reg = prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	if err := SetupWithManager(mgr, Options{Interval: 200 * time.Millisecond, Metrics: m}); err != nil {
		return nil, err
	}
	if c, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}, nil
}

// stores creates n plain Clusters (KubeadmControlPlane at from, one control-plane
// Machine; with workers, a MachineDeployment and one worker Machine) labelled
// fleet=<ns> in a namespace that opted in.
func stores(ctx context.Context, g Gomega, ns string, n int, workers bool) []string {
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}})).To(Succeed())
	infra := func(name string) clusterv1.ContractVersionedObjectReference {
		return clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DevMachine", Name: name}
	}
	var names []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("%s-%d", ns, i)
		names = append(names, name)
		g.Expect(c.Create(ctx, &clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"fleet": ns}},
			Spec: clusterv1.ClusterSpec{ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: name}},
		})).To(Succeed())
		g.Expect(c.Create(ctx, &controlplanev1.KubeadmControlPlane{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
			Spec: controlplanev1.KubeadmControlPlaneSpec{Replicas: ptr.To[int32](1), Version: from,
				MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{InfrastructureRef: infra(name)}}},
		})).To(Succeed())
		machine := func(suffix string, labels map[string]string) {
			g.Expect(c.Create(ctx, &clusterv1.Machine{
				ObjectMeta: metav1.ObjectMeta{Name: name + suffix, Namespace: ns, Labels: labels},
				Spec: clusterv1.MachineSpec{ClusterName: name, Version: from, InfrastructureRef: infra(name + suffix),
					Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")}},
			})).To(Succeed())
		}
		machine("-cp", map[string]string{clusterv1.ClusterNameLabel: name, clusterv1.MachineControlPlaneLabel: ""})
		if !workers {
			continue
		}
		g.Expect(c.Create(ctx, &clusterv1.MachineDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-md", Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
			Spec: clusterv1.MachineDeploymentSpec{ClusterName: name,
				Selector: metav1.LabelSelector{MatchLabels: map[string]string{"md": name}},
				Template: clusterv1.MachineTemplateSpec{
					ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"md": name}},
					Spec: clusterv1.MachineSpec{ClusterName: name, Version: from, InfrastructureRef: infra(name + "-tmpl"),
						Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")}}}},
		})).To(Succeed())
		machine("-w", map[string]string{clusterv1.ClusterNameLabel: name, clusterv1.MachineDeploymentNameLabel: name + "-md", "md": name})
	}
	return names
}

func kcpVersion(ctx context.Context, ns, name string) func() (string, error) {
	return func() (string, error) {
		kcp := &controlplanev1.KubeadmControlPlane{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp)
		return kcp.Spec.Version, err
	}
}

func mdVersion(ctx context.Context, ns, name string) func() (string, error) {
	return func() (string, error) {
		md := &clusterv1.MachineDeployment{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-md"}, md)
		return md.Spec.Template.Spec.Version, err
	}
}

// versions are the KubeadmControlPlanes' versions of the named Clusters.
func versions(ctx context.Context, ns string, names ...string) func() ([]string, error) {
	return func() ([]string, error) {
		var out []string
		for _, n := range names {
			v, err := kcpVersion(ctx, ns, n)()
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// setMachine plays Cluster API, the node and the coordinator on one Machine:
// spec.version, the node's kubelet at that version in status.nodeInfo (without it
// nothing proves the Machine reached it) and, when cond is set, our InPlaceUpdate
// condition.
func setMachine(ctx context.Context, g Gomega, ns, name, version string, cond *metav1.Condition) {
	m := &clusterv1.Machine{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m)).To(Succeed())
	m.Spec.Version = version
	g.Expect(c.Update(ctx, m)).To(Succeed())
	m.Status.NodeInfo = &corev1.NodeSystemInfo{KubeletVersion: version}
	if cond != nil {
		meta.SetStatusCondition(&m.Status.Conditions, *cond)
	}
	g.Expect(c.Status().Update(ctx, m)).To(Succeed())
}

// finish plays an in-place update of a whole Cluster: its control plane once the
// rollout wrote the KubeadmControlPlane, then its workers once it wrote the
// MachineDeployment.
func finish(ctx context.Context, g Gomega, ns, name string, workers bool) {
	g.Eventually(kcpVersion(ctx, ns, name)).Should(Equal(target), "the rollout writes %s's KubeadmControlPlane", name)
	if workers {
		g.Expect(mdVersion(ctx, ns, name)()).To(Equal(from), "workers wait for the control plane")
	}
	setMachine(ctx, g, ns, name+"-cp", target, nil)
	if workers {
		g.Eventually(mdVersion(ctx, ns, name)).Should(Equal(target), "the rollout writes %s's MachineDeployment once the control plane is done", name)
		setMachine(ctx, g, ns, name+"-w", target, nil)
	}
}

func fleetRollout(name, ns string, mod func(*inplacev1.FleetRolloutSpec)) *inplacev1.FleetRollout {
	fr := &inplacev1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: inplacev1.FleetRolloutSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": ns}},
		Canary:          &inplacev1.FleetCanary{Count: ptr.To[int32](1)},
		Target:          inplacev1.FleetTarget{Version: target},
		Strategy:        inplacev1.FleetStrategy{BatchSize: ptr.To(intstr.FromInt32(2))},
	}}
	if mod != nil {
		mod(&fr.Spec)
	}
	return fr
}

func status(ctx context.Context, name string) func() (inplacev1.FleetRolloutStatus, error) {
	return func() (inplacev1.FleetRolloutStatus, error) {
		fr := &inplacev1.FleetRollout{}
		err := c.Get(ctx, client.ObjectKey{Name: name}, fr)
		return fr.Status, err
	}
}

func setPaused(ctx context.Context, g Gomega, name string, paused bool) {
	fr := &inplacev1.FleetRollout{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, fr)).To(Succeed())
	orig := fr.DeepCopy()
	fr.Spec.Paused = paused
	g.Expect(c.Patch(ctx, fr, client.MergeFrom(orig))).To(Succeed())
}

// nameSeq numbers the objects the tests name, so that a test run again in the
// same API server (go test -count=2) starts from objects of its own.
var nameSeq atomic.Int64

// uniqueName is base with a number no other test of this process used.
func uniqueName(base string) string {
	return fmt.Sprintf("%s-%d", base, nameSeq.Add(1))
}

const hold = 1500 * time.Millisecond // several controller passes (200 ms apart)

func TestRolloutGoesBatchByBatch(t *testing.T) {
	env.Require(t)
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(20 * time.Second)
	ctx := context.Background()
	ns := uniqueName("wave")
	s := stores(ctx, g, ns, 5, true)
	g.Expect(c.Create(ctx, fleetRollout(ns, ns, nil))).To(Succeed())

	// The canary alone.
	g.Eventually(kcpVersion(ctx, ns, s[0])).Should(Equal(target))
	g.Consistently(versions(ctx, ns, s[1:]...)).WithTimeout(hold).Should(Equal(repeat(from, 4)), "nothing else starts while the canary updates")
	finish(ctx, g, ns, s[0], true)
	// Batch 1: s[1], s[2]; batch 2 waits for both.
	g.Eventually(versions(ctx, ns, s[1], s[2])).Should(Equal(repeat(target, 2)))
	g.Consistently(versions(ctx, ns, s[3:]...)).WithTimeout(hold).Should(Equal(repeat(from, 2)))
	finish(ctx, g, ns, s[1], true)
	g.Consistently(versions(ctx, ns, s[3:]...)).WithTimeout(hold).Should(Equal(repeat(from, 2)), "batch 2 waits for all of batch 1")
	finish(ctx, g, ns, s[2], true)
	// Batch 2.
	finish(ctx, g, ns, s[3], true)
	finish(ctx, g, ns, s[4], true)
	g.Eventually(status(ctx, ns)).Should(And(
		HaveField("Phase", inplacev1.FleetPhaseCompleted),
		HaveField("Counts", inplacev1.FleetCounts{Total: 5, Succeeded: 5}),
		HaveField("Batches", int32(2)), // the canaries are batch 0, not counted
	))
	st, _ := status(ctx, ns)()
	g.Expect(st.ObservedGeneration).To(Equal(int64(1)))
	for i, e := range st.Clusters {
		g.Expect(*e.Batch).To(Equal(int32((i+1)/2)), "canary in batch 0, then two per batch: %s", e.Name)
		g.Expect(e.StartedAt).NotTo(BeNil())
	}

	// The metrics show the status written; the Events its transitions, each once.
	g.Eventually(metric("capi_inplace_fleet_rollout_phase", "rollout", ns, "phase", PhaseLabelCompleted)).Should(Equal(1.0))
	g.Expect(metric("capi_inplace_fleet_rollout_phase", "rollout", ns, "phase", PhaseLabelProgressing)()).To(Equal(0.0))
	g.Expect(metric("capi_inplace_fleet_rollout_clusters", "rollout", ns, "state", StateLabelSucceeded)()).To(Equal(5.0))
	g.Expect(metric("capi_inplace_fleet_rollout_clusters", "rollout", ns, "state", StateLabelPending)()).To(Equal(0.0))
	g.Expect(metric("capi_inplace_fleet_rollout_current_batch", "rollout", ns)()).To(Equal(2.0))
	g.Expect(metric("capi_inplace_fleet_rollout_batches", "rollout", ns)()).To(Equal(2.0))
	g.Eventually(eventsOf(ctx, ns)).Should(HaveKeyWithValue(inplacev1.EventRolloutCompleted, []string{actionComplete}))
	g.Expect(eventsOf(ctx, ns)()).To(Equal(map[string][]string{
		inplacev1.EventBatchStarted:     {actionStartBatch, actionStartBatch, actionStartBatch},
		inplacev1.EventRolloutCompleted: {actionComplete},
	}), "the canaries, batch 1 and batch 2 started; nothing failed, halted or was skipped")
}

// metric reads the value of the series of name with the given label pairs from
// the controller's registry (valueIn); -1 when there is none.
func metric(name string, labels ...string) func() (float64, error) {
	return func() (float64, error) { return valueIn(reg, name, labels...) }
}

// seriesOf counts the series of the controller's metrics that name rollout.
func seriesOf(rollout string) func() (int, error) {
	return func() (int, error) {
		families, err := reg.Gather()
		if err != nil {
			return 0, err
		}
		n := 0
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "rollout" && l.GetValue() == rollout {
						n++
					}
				}
			}
		}
		return n, nil
	}
}

// eventsOf are the Events recorded on FleetRollout name: the actions of each
// reason's Events. An Event recorded twice (the recorder's series: the same
// reason, action and note again) lists its action twice.
func eventsOf(ctx context.Context, name string) func() (map[string][]string, error) {
	return func() (map[string][]string, error) {
		// A cluster-scoped object's Events go to the default namespace.
		list := &eventsv1.EventList{}
		if err := c.List(ctx, list, client.InNamespace(metav1.NamespaceDefault)); err != nil {
			return nil, err
		}
		out := map[string][]string{}
		for _, e := range list.Items {
			if e.Regarding.Kind != inplacev1.FleetRolloutKind || e.Regarding.Name != name {
				continue
			}
			times := 1
			if e.Series != nil {
				times = int(e.Series.Count)
			}
			for range times {
				out[e.Reason] = append(out[e.Reason], e.Action)
			}
		}
		return out, nil
	}
}

func TestFailedCanaryHaltsBeforeTheFirstBatch(t *testing.T) {
	env.Require(t)
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(20 * time.Second)
	ctx := context.Background()
	ns := uniqueName("canary")
	s := stores(ctx, g, ns, 5, false)
	// A failure budget of 3 would let one failure through: the canary's rule does not.
	g.Expect(c.Create(ctx, fleetRollout(ns, ns, func(s *inplacev1.FleetRolloutSpec) { s.Strategy.MaxFailures = ptr.To[int32](3) }))).To(Succeed())

	g.Eventually(kcpVersion(ctx, ns, s[0])).Should(Equal(target))
	setMachine(ctx, g, ns, s[0]+"-cp", target, &metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse,
		Reason: inplacev1.ReasonRolledBack, Message: "gate kubelet-ready failed; rolled back"})
	g.Eventually(status(ctx, ns)).Should(And(
		HaveField("Phase", inplacev1.FleetPhaseHalted),
		HaveField("Counts", inplacev1.FleetCounts{Total: 5, Failed: 1, Pending: 4}),
	))
	st, _ := status(ctx, ns)()
	halted := meta.FindStatusCondition(st.Conditions, inplacev1.FleetHaltedCondition)
	g.Expect(halted).NotTo(BeNil())
	g.Expect(halted.Reason).To(Equal(inplacev1.FleetHaltCanaryFailed))
	g.Expect(st.Clusters[0].Reason).To(Equal(inplacev1.FleetReasonMachineFailed))
	g.Expect(st.Clusters[0].Message).To(ContainSubstring("gate kubelet-ready failed"))
	g.Consistently(versions(ctx, ns, s[1:]...)).WithTimeout(hold).Should(Equal(repeat(from, 4)), "no batch starts after a failed canary")

	// Passes go on every 200 ms while it is halted: one halt, one Event each.
	want := map[string][]string{
		inplacev1.EventBatchStarted:  {actionStartBatch},
		inplacev1.EventClusterFailed: {inplacev1.FleetReasonMachineFailed},
		inplacev1.EventRolloutHalted: {inplacev1.FleetHaltCanaryFailed},
	}
	g.Eventually(eventsOf(ctx, ns)).Should(Equal(want))
	g.Consistently(eventsOf(ctx, ns)).WithTimeout(hold).Should(Equal(want), "Events on transitions only, not on every pass")
	g.Expect(metric("capi_inplace_fleet_rollout_halts_total", "rollout", ns, "reason", inplacev1.FleetHaltCanaryFailed)()).To(Equal(1.0))
	g.Expect(metric("capi_inplace_fleet_rollout_halted", "rollout", ns, "reason", inplacev1.FleetHaltCanaryFailed)()).To(Equal(1.0))
	g.Expect(metric("capi_inplace_fleet_rollout_halted", "rollout", ns, "reason", inplacev1.FleetHaltFailureBudget)()).To(Equal(0.0))
	g.Expect(metric("capi_inplace_fleet_rollout_phase", "rollout", ns, "phase", PhaseLabelHalted)()).To(Equal(1.0))
	g.Expect(metric("capi_inplace_fleet_rollout_clusters", "rollout", ns, "state", StateLabelFailed)()).To(Equal(1.0))
	g.Expect(metric("capi_inplace_fleet_rollout_clusters", "rollout", ns, "state", StateLabelPending)()).To(Equal(4.0))
}

// TestRaisedBudgetLiftsTheHalt checks that a halt's end is as visible as its
// start: one Normal Event when the Halted condition turns False, however many
// passes follow.
func TestRaisedBudgetLiftsTheHalt(t *testing.T) {
	env.Require(t)
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(20 * time.Second)
	ctx := context.Background()
	ns := uniqueName("lift")
	s := stores(ctx, g, ns, 3, false)
	g.Expect(c.Create(ctx, fleetRollout(ns, ns, func(s *inplacev1.FleetRolloutSpec) {
		s.Canary = nil
		s.Strategy.MaxFailures = ptr.To[int32](1)
	}))).To(Succeed())

	// Batch 1 (s[0], s[1]); s[0] fails: one failure of one allowed halts it.
	g.Eventually(versions(ctx, ns, s[0], s[1])).Should(Equal(repeat(target, 2)))
	setMachine(ctx, g, ns, s[0]+"-cp", target, &metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse,
		Reason: inplacev1.ReasonRolledBack, Message: "gate kubelet-ready failed; rolled back"})
	g.Eventually(status(ctx, ns)).Should(HaveField("Phase", inplacev1.FleetPhaseHalted))
	halted := map[string][]string{
		inplacev1.EventBatchStarted:  {actionStartBatch},
		inplacev1.EventClusterFailed: {inplacev1.FleetReasonMachineFailed},
		inplacev1.EventRolloutHalted: {inplacev1.FleetHaltFailureBudget},
	}
	g.Eventually(eventsOf(ctx, ns)).Should(Equal(halted))
	g.Expect(metric("capi_inplace_fleet_rollout_halted", "rollout", ns, "reason", inplacev1.FleetHaltFailureBudget)()).To(Equal(1.0))

	// The operator looked into it and allows two failures: the halt lifts.
	raise := []byte(`{"spec":{"strategy":{"maxFailures":2}}}`)
	g.Expect(c.Patch(ctx, fleetRollout(ns, ns, nil), client.RawPatch(types.MergePatchType, raise))).To(Succeed())
	g.Eventually(status(ctx, ns)).Should(HaveField("Phase", inplacev1.FleetPhaseProgressing))
	st, _ := status(ctx, ns)()
	cond := meta.FindStatusCondition(st.Conditions, inplacev1.FleetHaltedCondition)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
	lifted := map[string][]string{
		inplacev1.EventBatchStarted:      {actionStartBatch},
		inplacev1.EventClusterFailed:     {inplacev1.FleetReasonMachineFailed},
		inplacev1.EventRolloutHalted:     {inplacev1.FleetHaltFailureBudget},
		inplacev1.EventRolloutHaltLifted: {inplacev1.FleetHaltFailureBudget},
	}
	g.Eventually(eventsOf(ctx, ns)).Should(Equal(lifted))
	g.Consistently(eventsOf(ctx, ns)).WithTimeout(hold).Should(Equal(lifted), "one Event for the lift, not one per pass")
	g.Expect(metric("capi_inplace_fleet_rollout_halted", "rollout", ns, "reason", inplacev1.FleetHaltFailureBudget)()).To(Equal(0.0))
	g.Expect(metric("capi_inplace_fleet_rollout_phase", "rollout", ns, "phase", PhaseLabelProgressing)()).To(Equal(1.0))
	g.Expect(metric("capi_inplace_fleet_rollout_halts_total", "rollout", ns, "reason", inplacev1.FleetHaltFailureBudget)()).To(Equal(1.0), "a lift is no halt")
}

func TestDeletedRolloutLeavesNoSeries(t *testing.T) {
	env.Require(t)
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(20 * time.Second)
	ctx := context.Background()
	ns := uniqueName("deleted")
	stores(ctx, g, ns, 2, false)
	fr := fleetRollout(ns, ns, func(s *inplacev1.FleetRolloutSpec) { s.Paused = true })
	g.Expect(c.Create(ctx, fr)).To(Succeed())
	g.Eventually(metric("capi_inplace_fleet_rollout_phase", "rollout", ns, "phase", PhaseLabelPaused)).Should(Equal(1.0))
	g.Expect(metric("capi_inplace_fleet_rollout_clusters", "rollout", ns, "state", StateLabelPending)()).To(Equal(2.0))
	g.Expect(metric("capi_inplace_fleet_rollout_current_batch", "rollout", ns)()).To(Equal(-1.0), "no batch started while paused from the start")

	g.Expect(c.Delete(ctx, fr)).To(Succeed())
	g.Eventually(seriesOf(ns)).Should(BeZero(), "a deleted rollout's series go with it")
}

func TestPauseStopsNewStarts(t *testing.T) {
	env.Require(t)
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(20 * time.Second)
	ctx := context.Background()
	ns := uniqueName("paused")
	s := stores(ctx, g, ns, 3, false)
	g.Expect(c.Create(ctx, fleetRollout(ns, ns, func(s *inplacev1.FleetRolloutSpec) { s.Paused = true }))).To(Succeed())

	g.Eventually(status(ctx, ns)).Should(HaveField("Phase", inplacev1.FleetPhasePaused))
	g.Consistently(versions(ctx, ns, s...)).WithTimeout(hold).Should(Equal(repeat(from, 3)), "paused from the start: nothing starts")

	setPaused(ctx, g, ns, false)
	g.Eventually(kcpVersion(ctx, ns, s[0])).Should(Equal(target), "resumed: the canary starts")
	setPaused(ctx, g, ns, true)
	// The canary, already updating, goes on and finishes; the batch after it waits.
	setMachine(ctx, g, ns, s[0]+"-cp", target, nil)
	g.Eventually(status(ctx, ns)).Should(And(
		HaveField("Phase", inplacev1.FleetPhasePaused),
		HaveField("Counts.Succeeded", int32(1)),
	))
	g.Consistently(versions(ctx, ns, s[1:]...)).WithTimeout(hold).Should(Equal(repeat(from, 2)), "paused: the first batch does not start")
	setPaused(ctx, g, ns, false)
	g.Eventually(versions(ctx, ns, s[1:]...)).Should(Equal(repeat(target, 2)))
}

func TestAPIRefusesUnsafeSpecs(t *testing.T) {
	env.Require(t)
	g := NewWithT(t)
	ctx := context.Background()
	empty := fleetRollout("empty-selector", "x", func(s *inplacev1.FleetRolloutSpec) { s.ClusterSelector = metav1.LabelSelector{} })
	err := c.Create(ctx, empty)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "an empty clusterSelector selects every Cluster: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("clusterSelector must hold at least one requirement"))

	fr := fleetRollout(uniqueName("abort-once"), "x", func(s *inplacev1.FleetRolloutSpec) { s.Abort = true })
	g.Expect(c.Create(ctx, fr)).To(Succeed())
	err = c.Patch(ctx, fr, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"abort":false}}`)))
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "abort cannot be undone: %v", err)
}

func TestApprovalBetweenBatches(t *testing.T) {
	env.Require(t)
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(20 * time.Second)
	ctx := context.Background()
	ns := uniqueName("approval")
	s := stores(ctx, g, ns, 3, false)
	g.Expect(c.Create(ctx, fleetRollout(ns, ns, func(s *inplacev1.FleetRolloutSpec) {
		s.Strategy.Approval = &inplacev1.FleetApproval{Mode: inplacev1.FleetApprovalEveryBatch}
	}))).To(Succeed())

	// Creating the rollout approved the canaries.
	finish(ctx, g, ns, s[0], false)
	g.Eventually(status(ctx, ns)).Should(And(
		HaveField("Phase", inplacev1.FleetPhaseWaitingForApproval),
		HaveField("WaitingForApproval", ptr.To[int32](1)),
	))
	st, _ := status(ctx, ns)()
	progressing := meta.FindStatusCondition(st.Conditions, inplacev1.FleetProgressingCondition)
	g.Expect(progressing).NotTo(BeNil())
	g.Expect(progressing.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(progressing.Reason).To(Equal(inplacev1.FleetReasonWaitingForApproval))
	g.Expect(progressing.Message).To(ContainSubstring(`kubectl patch fleetrollout %s --type merge -p '{"spec":{"approvedBatch":1}}'`, ns))
	g.Consistently(versions(ctx, ns, s[1:]...)).WithTimeout(hold).Should(Equal(repeat(from, 2)), "batch 1 waits for its approval")

	// Pause works while waiting; an approval given meanwhile waits for the resume.
	setPaused(ctx, g, ns, true)
	g.Eventually(status(ctx, ns)).Should(HaveField("Phase", inplacev1.FleetPhasePaused))
	approve := []byte(`{"spec":{"approvedBatch":1}}`)
	g.Expect(c.Patch(ctx, fleetRollout(ns, ns, nil), client.RawPatch(types.MergePatchType, approve))).To(Succeed())
	g.Consistently(versions(ctx, ns, s[1:]...)).WithTimeout(hold).Should(Equal(repeat(from, 2)), "paused: the approved batch does not start")
	setPaused(ctx, g, ns, false)
	g.Eventually(versions(ctx, ns, s[1:]...)).Should(Equal(repeat(target, 2)), "resumed and approved: batch 1 starts")
	finish(ctx, g, ns, s[1], false)
	finish(ctx, g, ns, s[2], false)
	g.Eventually(status(ctx, ns)).Should(And(
		HaveField("Phase", inplacev1.FleetPhaseCompleted),
		HaveField("WaitingForApproval", BeNil()),
	))
}

// label sets a label on each named Cluster of ns.
func label(ctx context.Context, g Gomega, ns, key string, values map[string]string) {
	for name, v := range values {
		cl := &clusterv1.Cluster{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl)).To(Succeed())
		orig := cl.DeepCopy()
		cl.Labels[key] = v
		g.Expect(c.Patch(ctx, cl, client.MergeFrom(orig))).To(Succeed())
	}
}

func TestSpreadBySite(t *testing.T) {
	env.Require(t)
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(20 * time.Second)
	ctx := context.Background()
	ns := uniqueName("spread")
	s := stores(ctx, g, ns, 4, false)
	label(ctx, g, ns, "site", map[string]string{s[0]: "lyon", s[1]: "lyon", s[2]: "oslo", s[3]: "oslo"})
	g.Expect(c.Create(ctx, fleetRollout(ns, ns, func(s *inplacev1.FleetRolloutSpec) {
		s.Canary = nil
		s.Strategy.BatchSize = ptr.To(intstr.FromInt32(4))
		s.Strategy.SpreadBy = &inplacev1.FleetSpread{LabelKey: "site"}
	}))).To(Succeed())

	g.Eventually(versions(ctx, ns, s...)).Should(Equal([]string{target, from, target, from}), "one store per site")
	g.Consistently(versions(ctx, ns, s...)).WithTimeout(hold).Should(Equal([]string{target, from, target, from}))
	st, _ := status(ctx, ns)()
	g.Expect(st.Batches).To(Equal(int32(1)))
	// The stores that wait for their site are counted and named.
	g.Expect(st.Counts.HeldBySpread).To(Equal(int32(2)))
	g.Expect(st.CurrentBatch.Counts.HeldBySpread).To(Equal(int32(2)))
	for _, e := range st.Clusters {
		if e.Name == s[1] || e.Name == s[3] {
			g.Expect(e.State).To(Equal(inplacev1.FleetClusterPending), e.Name)
			g.Expect(e.Reason).To(Equal(inplacev1.FleetReasonHeldBySpread), e.Name)
		}
	}
	g.Eventually(metric("capi_inplace_fleet_rollout_clusters_held_by_spread", "rollout", ns)).Should(Equal(2.0))
	finish(ctx, g, ns, s[0], false)
	g.Eventually(kcpVersion(ctx, ns, s[1])).Should(Equal(target), "lyon's second store starts once its first is done")
	g.Expect(kcpVersion(ctx, ns, s[3])()).To(Equal(from), "oslo's first store is still updating")
	g.Eventually(status(ctx, ns)).Should(HaveField("Counts.HeldBySpread", int32(1)))
	g.Eventually(metric("capi_inplace_fleet_rollout_clusters_held_by_spread", "rollout", ns)).Should(Equal(1.0))
}

func TestGrowingBatches(t *testing.T) {
	env.Require(t)
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(20 * time.Second)
	ctx := context.Background()
	ns := uniqueName("growing")
	s := stores(ctx, g, ns, 4, false)
	g.Expect(c.Create(ctx, fleetRollout(ns, ns, func(s *inplacev1.FleetRolloutSpec) {
		s.Canary = nil
		s.Strategy.BatchSize = nil
		s.Strategy.BatchSizes = []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("75%")}
	}))).To(Succeed())

	g.Eventually(kcpVersion(ctx, ns, s[0])).Should(Equal(target))
	g.Eventually(status(ctx, ns)).Should(HaveField("Batches", int32(2)))
	g.Consistently(versions(ctx, ns, s[1:]...)).WithTimeout(hold).Should(Equal(repeat(from, 3)), "batch 1 holds one store")
	finish(ctx, g, ns, s[0], false)
	g.Eventually(versions(ctx, ns, s[1:]...)).Should(Equal(repeat(target, 3)), "batch 2 holds 75% of 4: three stores")
}

func TestAPIRefusesBadHowFastSettings(t *testing.T) {
	env.Require(t)
	ctx := context.Background()
	tests := []struct {
		name string
		mod  func(*inplacev1.FleetRolloutSpec)
		want string
	}{
		{"batchSize and batchSizes", func(s *inplacev1.FleetRolloutSpec) {
			s.Strategy.BatchSizes = []intstr.IntOrString{intstr.FromInt32(1)}
		}, "set batchSize or batchSizes, not both"},
		{"a zero batch size", func(s *inplacev1.FleetRolloutSpec) {
			s.Strategy.BatchSize = nil
			s.Strategy.BatchSizes = []intstr.IntOrString{intstr.FromInt32(1), intstr.FromString("0%")}
		}, "each of batchSizes is a count of at least 1 or a percentage from 1% to 100%"},
		{"a batch size past 100%", func(s *inplacev1.FleetRolloutSpec) {
			s.Strategy.BatchSize = nil
			s.Strategy.BatchSizes = []intstr.IntOrString{intstr.FromString("150%")}
		}, "each of batchSizes is a count of at least 1 or a percentage from 1% to 100%"},
		{"AfterCanaries without canaries", func(s *inplacev1.FleetRolloutSpec) {
			s.Canary = nil
			s.Strategy.Approval = &inplacev1.FleetApproval{Mode: inplacev1.FleetApprovalAfterCanaries}
		}, "strategy.approval.mode AfterCanaries needs canary"},
		{"an unknown approval mode", func(s *inplacev1.FleetRolloutSpec) {
			s.Strategy.Approval = &inplacev1.FleetApproval{Mode: "Sometimes"}
		}, "spec.strategy.approval.mode"},
		{"a negative approvedBatch", func(s *inplacev1.FleetRolloutSpec) { s.ApprovedBatch = ptr.To[int32](-1) }, "spec.approvedBatch"},
		{"a label key that is no label key", func(s *inplacev1.FleetRolloutSpec) {
			s.Strategy.SpreadBy = &inplacev1.FleetSpread{LabelKey: "site name"}
		}, "spec.strategy.spreadBy.labelKey"},
		{"zero Clusters per site", func(s *inplacev1.FleetRolloutSpec) {
			s.Strategy.SpreadBy = &inplacev1.FleetSpread{LabelKey: "site", MaxConcurrent: -1}
		}, "spec.strategy.spreadBy.maxConcurrent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := c.Create(ctx, fleetRollout(uniqueName("refused"), "x", tt.mod))
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tt.want))
		})
	}

	g := NewWithT(t)
	fr := fleetRollout(uniqueName("accepted"), "x", func(s *inplacev1.FleetRolloutSpec) {
		s.Paused = true
		s.Strategy.BatchSize = nil
		s.Strategy.BatchSizes = []intstr.IntOrString{intstr.FromInt32(1), intstr.FromInt32(5), intstr.FromString("25%"), intstr.FromString("100%")}
		s.Strategy.SpreadBy = &inplacev1.FleetSpread{LabelKey: "topology.kubernetes.io/zone"}
		s.Strategy.Approval = &inplacev1.FleetApproval{Mode: inplacev1.FleetApprovalAfterCanaries}
		s.ApprovedBatch = ptr.To[int32](0)
	})
	g.Expect(c.Create(ctx, fr)).To(Succeed())
	g.Expect(fr.Spec.Strategy.SpreadBy.MaxConcurrent).To(Equal(int32(1)), "one Cluster per zone by default")
}
