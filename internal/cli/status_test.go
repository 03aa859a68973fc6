package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/internal/status"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// TestStatusCommand runs `capi-inplace status` (and so `kubectl inplace status`) in-process against a real kube-apiserver
// that plays both the management cluster (Clusters, Machines, kubeconfig Secrets) and
// the workload clusters (Nodes with capi-inplace's annotations): each Cluster's
// "<cluster>-kubeconfig" Secret points back at the same API server, except for the
// "edge" Cluster, whose kubeconfig points at a closed port.
func TestStatusCommand(t *testing.T) {
	te := testenv.StartT(t, testenv.Options{CAPI: []testenv.CRDSet{testenv.CAPICore}})
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, env := te.Config, te.Environment
	scheme := runtime.NewScheme()
	g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())

	kubeconfigPath := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfigPath, env.KubeConfig, 0o600)).To(Succeed())
	unreachable := unreachableKubeconfig(t, env.KubeConfig)

	now := time.Now().UTC().Truncate(time.Second)
	planA := "sha256-aaaaaaaaaaaaaaaa"

	// healthy/demo: a control-plane node done, a worker applying (cordoned by us).
	mk := fixtures{t: t, ctx: ctx, c: c}
	mk.namespace("healthy")
	mk.cluster("healthy", "demo", env.KubeConfig)
	mk.machine("healthy", "demo", "demo-cp-0", true, "v1.36.0", "demo-cp-0", metav1.ConditionFalse)
	mk.machine("healthy", "demo", "demo-md-0", false, "v1.36.0", "demo-md-0", metav1.ConditionTrue)
	mk.node("demo-cp-0", "v1.36.0", false, map[string]string{
		inplacev1.DesiredPlanAnnotation: planA, inplacev1.CurrentPlanAnnotation: planA,
		inplacev1.StatusAnnotation: encode(t, protocol.NodeStatus{PlanHash: planA, Phase: protocol.PhaseCommitted, Step: 6, Steps: 6,
			StartedAt: now.Add(-4 * time.Minute), UpdatedAt: now.Add(-2 * time.Minute)}),
	})
	mk.node("demo-md-0", "v1.35.0", true, map[string]string{
		inplacev1.DesiredPlanAnnotation: planA, inplacev1.CordonedByAnnotation: "capi-inplace",
		inplacev1.StatusAnnotation: encode(t, protocol.NodeStatus{PlanHash: planA, Phase: protocol.PhaseApplying, Step: 3, Steps: 6,
			Action: "kubeadm-upgrade", Message: "running kubeadm upgrade node", StartedAt: now.Add(-70 * time.Second), UpdatedAt: now}),
	})

	// mixed/broken: a worker rolled back; mixed/edge: workload cluster unreachable.
	mk.namespace("mixed")
	mk.cluster("mixed", "broken", env.KubeConfig)
	mk.machine("mixed", "broken", "broken-md-0", false, "v1.36.0", "broken-md-0", metav1.ConditionTrue)
	mk.node("broken-md-0", "v1.35.0", false, map[string]string{
		inplacev1.DesiredPlanAnnotation: planA,
		inplacev1.StatusAnnotation: encode(t, protocol.NodeStatus{PlanHash: planA, Phase: protocol.PhaseRolledBack, Step: 4, Steps: 6,
			Reason: "HealthGateFailed", Message: "kubelet did not become Ready", StartedAt: now.Add(-3 * time.Minute), UpdatedAt: now.Add(-time.Minute)}),
	})
	mk.cluster("mixed", "edge", unreachable)
	mk.machine("mixed", "edge", "edge-cp-0", true, "v1.36.0", "edge-cp-0", metav1.ConditionTrue)

	// pools/fleet: a workers pool (the policy file below) whose budget is spent and
	// whose only window opens the day after tomorrow; the control plane is in the
	// default pool.
	mk.namespace("pools")
	mk.cluster("pools", "fleet", env.KubeConfig)
	mk.machine("pools", "fleet", "fleet-cp-0", true, "v1.36.0", "fleet-cp-0", metav1.ConditionFalse)
	mk.machine("pools", "fleet", "fleet-md-0", false, "v1.36.0", "fleet-md-0", metav1.ConditionFalse)
	mk.machine("pools", "fleet", "fleet-md-1", false, "v1.36.0", "fleet-md-1", metav1.ConditionFalse)
	for _, n := range []string{"fleet-cp-0", "fleet-md-0", "fleet-md-1"} {
		mk.node(n, "v1.36.0", false, nil)
	}
	record := fleet.State{Failures: []fleet.Failure{{Machine: "fleet-md-0", Node: "fleet-md-0", Pool: "workers",
		Cause: "RolledBack: GateFailed", Plan: planA, At: now}}}
	mk.annotateCluster("pools", "fleet", map[string]string{inplacev1.FleetStateAnnotation: record.Encode()})
	windowDay := now.AddDate(0, 0, 2)
	nextOpening := time.Date(windowDay.Year(), windowDay.Month(), windowDay.Day(), 10, 0, 0, 0, time.UTC)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	g.Expect(os.WriteFile(policyFile, []byte(`fleet:
- name: workers
  cluster: pools/fleet
  machineSelector:
    matchExpressions: [{key: cluster.x-k8s.io/control-plane, operator: DoesNotExist}]
  maintenanceWindows: ["`+windowDay.Weekday().String()[:3]+` 10:00-12:00 UTC"]
  expectedDurationSeconds: 900
`), 0o600)).To(Succeed())

	run := func(ctx context.Context, args ...string) (string, error) {
		cmd := NewStatusCommand("capi-inplace")
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs(append([]string{"--kubeconfig", kubeconfigPath}, args...))
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}

	t.Run("table for one healthy cluster, exit 0", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run(ctx, "demo", "-n", "healthy")
		g.Expect(err).NotTo(HaveOccurred())
		lines := strings.Split(out, "\n")
		g.Expect(lines[0]).To(Equal("CLUSTER healthy/demo"))
		g.Expect(lines[1]).To(MatchRegexp(`^MACHINE\s+ROLE\s+VERSION\s+KUBELET\s+PHASE\s+PROGRESS\s+DRAIN\s+ELAPSED\s+UPDATING\s+UP-TO-DATE\s+DETAILS$`))
		g.Expect(lines[2]).To(MatchRegexp(`^demo-cp-0\s+control-plane\s+v1\.36\.0\s+v1\.36\.0\s+Committed\s+\[##########\] 6/6\s+-\s+2m00s\s+False\s+-$`))
		g.Expect(lines[3]).To(MatchRegexp(`^demo-md-0\s+worker\s+v1\.36\.0\s+v1\.35\.0\s+Applying\s+\[#####-----\] 3/6\s+cordoned\s+1m1\ds\s+True\s+-\s+kubeadm-upgrade: running kubeadm upgrade node$`))
		g.Expect(out).To(HaveSuffix("\n2 machines: 1 in progress, 0 failed.\n"))
	})

	t.Run("json for the namespace, exit 0", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run(ctx, "-n", "healthy", "-o", "json")
		g.Expect(err).NotTo(HaveOccurred())
		var r status.Report
		g.Expect(json.Unmarshal([]byte(out), &r)).To(Succeed())
		g.Expect(r.APIVersion).To(Equal(status.ReportAPIVersion))
		g.Expect(r.Namespace).To(Equal("healthy"))
		g.Expect(r.Summary).To(Equal(status.Summary{Machines: 2, InProgress: 1}))
		g.Expect(r.Clusters).To(HaveLen(1))
		cv := r.Clusters[0]
		g.Expect(cv.WorkloadReachable).To(BeTrue())
		g.Expect(cv.Machines).To(HaveLen(2))
		cp, md := cv.Machines[0], cv.Machines[1]
		g.Expect(cp.Name).To(Equal("demo-cp-0"))
		g.Expect(cp.UID).NotTo(BeEmpty())
		g.Expect(cp.Role).To(Equal(status.RoleControlPlane))
		g.Expect(cp.Phase).To(Equal(protocol.PhaseCommitted))
		g.Expect(cp.KubeletVersion).To(Equal("v1.36.0"))
		g.Expect(cp.ElapsedSeconds).To(Equal(int64(120)))
		g.Expect(md.Phase).To(Equal(protocol.PhaseApplying))
		g.Expect([]int{md.Step, md.Steps}).To(Equal([]int{3, 6}))
		g.Expect(md.KubeletVersion).To(Equal("v1.35.0"), "read from the workload Node")
		g.Expect(md.Drain).To(Equal(status.Drain{State: status.DrainCordoned, Unschedulable: true, CordonedBy: "capi-inplace"}))
		g.Expect(md.Conditions.Updating).To(Equal(&status.Condition{Status: "True", Reason: clusterv1.MachineInPlaceUpdatingReason}))
		g.Expect(md.DesiredPlan).To(Equal(planA))
	})

	t.Run("a rolled-back node exits 3; an unreachable workload cluster still shows its machines", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run(ctx, "-n", "mixed")
		var coded interface{ ExitCode() int }
		g.Expect(errors.As(err, &coded)).To(BeTrue(), "error %v carries an exit code", err)
		g.Expect(coded.ExitCode()).To(Equal(ExitNodeFailed))
		g.Expect(ExitCode(err)).To(Equal(3), "main exits with it")
		g.Expect(err.Error()).To(Equal("in-place update failed on 1 machine(s): mixed/broken-md-0 (RolledBack)"))
		g.Expect(out).To(MatchRegexp(`(?m)^broken-md-0\s+worker\s+v1\.36\.0\s+v1\.35\.0\s+RolledBack\s+\[######----\] 4/6\s+-\s+2m00s\s+True\s+-\s+HealthGateFailed: kubelet did not become Ready$`))
		g.Expect(out).To(MatchRegexp(`(?m)^CLUSTER mixed/edge\n  workload cluster unreachable, showing management-side data only: .*127\.0\.0\.1:1.*$`))
		g.Expect(out).To(MatchRegexp(`(?m)^edge-cp-0\s+control-plane\s+v1\.36\.0\s+v1\.35\.0\s+\?\s+-\s+\?\s+`))
		g.Expect(out).To(HaveSuffix("\n2 machines: 0 in progress, 1 failed, 1 workload cluster unreachable.\n"))
	})

	t.Run("json for the unreachable cluster alone, exit 0", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run(ctx, "edge", "-n", "mixed", "-o", "json")
		g.Expect(err).NotTo(HaveOccurred())
		var r status.Report
		g.Expect(json.Unmarshal([]byte(out), &r)).To(Succeed())
		g.Expect(r.Clusters).To(HaveLen(1))
		g.Expect(r.Clusters[0].WorkloadReachable).To(BeFalse())
		g.Expect(r.Clusters[0].WorkloadError).To(ContainSubstring("list nodes of cluster mixed/edge"))
		g.Expect(r.Clusters[0].Machines).To(ConsistOf(And(
			HaveField("Name", "edge-cp-0"),
			HaveField("KubeletVersion", "v1.35.0"), // from the Machine's status.nodeInfo
			HaveField("Drain.State", status.DrainUnknown),
		)))
		g.Expect(r.Summary.UnreachableClusters).To(Equal(1))
	})

	t.Run("-A covers every namespace", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run(ctx, "-A", "-o", "json")
		g.Expect(err).To(HaveOccurred(), "mixed/broken rolled back")
		var r status.Report
		g.Expect(json.Unmarshal([]byte(out), &r)).To(Succeed())
		var names []string
		for _, c := range r.Clusters {
			names = append(names, c.Namespace+"/"+c.Name)
		}
		g.Expect(names).To(Equal([]string{"healthy/demo", "mixed/broken", "mixed/edge", "pools/fleet"}))
		g.Expect(r.Namespace).To(BeEmpty())
	})

	t.Run("--policy-file: a pool line per fleet pool, budget and window, exit 0", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run(ctx, "fleet", "-n", "pools", "--policy-file", policyFile)
		g.Expect(err).NotTo(HaveOccurred(), "a spent budget is not a failed node: exit 0")
		g.Expect(out).To(ContainSubstring("\n  pool (default): 1 machine; budget 0 of 1 spent; window always open\n"))
		g.Expect(out).To(ContainSubstring("\n  pool workers: 2 machines; budget 1 of 1 spent, halted (annotate the Cluster with inplace.capi-inplace.dev/resume to continue); " +
			"window closed, next opening " + nextOpening.Format(time.RFC3339) + "\n"))

		out, err = run(ctx, "fleet", "-n", "pools", "--policy-file", policyFile, "-o", "wide")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(MatchRegexp(`(?m)^  pool workers: 2 machines; .*; windows \(policy\) "[A-Z][a-z]{2} 10:00-12:00 UTC"; expected 15m00s; fleet-md-0, fleet-md-1$`))

		out, err = run(ctx, "fleet", "-n", "pools", "--policy-file", policyFile, "-o", "json")
		g.Expect(err).NotTo(HaveOccurred())
		var r status.Report
		g.Expect(json.Unmarshal([]byte(out), &r)).To(Succeed())
		g.Expect(r.Clusters).To(HaveLen(1))
		g.Expect(r.Clusters[0].Pools).To(Equal([]status.PoolView{
			{Name: "", Machines: []string{"fleet-cp-0"}, FailureBudget: 1, WindowOpen: true, ExpectedSeconds: 1800},
			{Name: "workers", Machines: []string{"fleet-md-0", "fleet-md-1"}, FailureBudget: 1, Failures: 1, BudgetSpent: true,
				Windows: []string{windowDay.Weekday().String()[:3] + " 10:00-12:00 UTC"}, WindowsSource: status.WindowsFromPolicy,
				NextOpening: &nextOpening, ExpectedSeconds: 900},
		}))

		out, err = run(ctx, "fleet", "-n", "pools", "--policy-file", policyFile, "-o", "yaml")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring("budgetSpent: true"))
		g.Expect(out).To(MatchRegexp(`nextOpening: "?` + regexp.QuoteMeta(nextOpening.Format(time.RFC3339)) + `"?\n`))

		out, err = run(ctx, "fleet", "-n", "pools")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).NotTo(ContainSubstring("  pool "), "without --policy-file the output is as before")
		out, err = run(ctx, "fleet", "-n", "pools", "-o", "json")
		g.Expect(err).NotTo(HaveOccurred())
		var doc struct {
			Clusters []map[string]json.RawMessage `json:"clusters"`
		}
		g.Expect(json.Unmarshal([]byte(out), &doc)).To(Succeed())
		g.Expect(doc.Clusters).To(HaveLen(1))
		g.Expect(doc.Clusters[0]).To(HaveKey("fleet"))
		g.Expect(doc.Clusters[0]).NotTo(HaveKey("pools"), "no pools field without --policy-file")
	})

	t.Run("an unreadable policy file is an ordinary error", func(t *testing.T) {
		g := NewWithT(t)
		_, err := run(ctx, "fleet", "-n", "pools", "--policy-file", filepath.Join(t.TempDir(), "missing.yaml"))
		g.Expect(err).To(MatchError(ContainSubstring("read policy file")))
		g.Expect(ExitCode(err)).To(Equal(1))
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		g.Expect(os.WriteFile(bad, []byte("fleet:\n- name: \"\"\n"), 0o600)).To(Succeed())
		_, err = run(ctx, "fleet", "-n", "pools", "--policy-file", bad)
		g.Expect(err).To(MatchError(ContainSubstring("fleet[0].name is empty")))
		g.Expect(ExitCode(err)).To(Equal(1))
	})

	t.Run("an unknown cluster is an ordinary error", func(t *testing.T) {
		g := NewWithT(t)
		_, err := run(ctx, "nope", "-n", "healthy")
		g.Expect(err).To(MatchError(status.ErrClusterNotFound))
		var coded interface{ ExitCode() int }
		g.Expect(errors.As(err, &coded)).To(BeFalse(), "exit code 1, not the failed-node code")
		g.Expect(ExitCode(err)).To(Equal(1))
	})

	t.Run("bad flags are refused before any API call", func(t *testing.T) {
		g := NewWithT(t)
		_, err := run(ctx, "-o", "xml")
		g.Expect(err).To(MatchError(ContainSubstring("--output must be one of table, wide, json, yaml")))
		_, err = run(ctx, "demo", "-A")
		g.Expect(err).To(MatchError(ContainSubstring("--all-namespaces cannot be used with a cluster name")))
	})

	t.Run("--watch refreshes until interrupted, then exits with the last look's code", func(t *testing.T) {
		g := NewWithT(t)
		wctx, wcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer wcancel()
		out, err := run(wctx, "demo", "-n", "healthy", "-w", "--interval=300ms")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.Count(out, "CLUSTER healthy/demo")).To(BeNumerically(">=", 2), out)
		g.Expect(out).To(ContainSubstring("Every 300ms, at "))

		wctx, wcancel = context.WithTimeout(ctx, 1500*time.Millisecond)
		defer wcancel()
		out, err = run(wctx, "broken", "-n", "mixed", "-w", "--interval=300ms", "-o", "json")
		g.Expect(err).To(MatchError(ContainSubstring("mixed/broken-md-0 (RolledBack)")))
		docs := strings.Split(strings.TrimSpace(out), "\n")
		g.Expect(len(docs)).To(BeNumerically(">=", 2), "one JSON document per line")
		for _, d := range docs {
			var r status.Report
			g.Expect(json.Unmarshal([]byte(d), &r)).To(Succeed())
			g.Expect(r.Summary.Failed).To(Equal(1))
		}
	})
}

type fixtures struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
}

func (f fixtures) create(obj client.Object) {
	f.t.Helper()
	if err := f.c.Create(f.ctx, obj); err != nil {
		f.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// annotateCluster adds annotations to a Cluster.
func (f fixtures) annotateCluster(ns, name string, annotations map[string]string) {
	f.t.Helper()
	c := &clusterv1.Cluster{}
	if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		f.t.Fatalf("get cluster %s/%s: %v", ns, name, err)
	}
	before := c.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		c.Annotations[k] = v
	}
	if err := f.c.Patch(f.ctx, c, client.MergeFrom(before)); err != nil {
		f.t.Fatalf("annotate cluster %s/%s: %v", ns, name, err)
	}
}

func (f fixtures) namespace(name string) {
	f.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

func (f fixtures) cluster(ns, name string, kubeconfig []byte) {
	f.create(&clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		// The CRD requires a non-empty spec.
		Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: name + ".example", Port: 6443}},
	})
	f.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-kubeconfig",
			Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": kubeconfig},
	})
}

// machine creates a Machine with a nodeRef and CAPI's Updating condition; its
// status.nodeInfo says kubelet v1.35.0 (what CAPI last copied from the Node).
func (f fixtures) machine(ns, clusterName, name string, controlPlane bool, version, nodeName string, updating metav1.ConditionStatus) {
	f.t.Helper()
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Spec: clusterv1.MachineSpec{
			ClusterName:       clusterName,
			Version:           version,
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptrTo(name + "-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DevMachine", Name: name},
		},
	}
	if controlPlane {
		m.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	f.create(m)
	reason := clusterv1.MachineNotUpdatingReason
	if updating == metav1.ConditionTrue {
		reason = clusterv1.MachineInPlaceUpdatingReason
	}
	m.Status = clusterv1.MachineStatus{
		NodeRef:  clusterv1.MachineNodeReference{Name: nodeName},
		NodeInfo: &corev1.NodeSystemInfo{KubeletVersion: "v1.35.0"},
		Phase:    "Running",
		Conditions: []metav1.Condition{{
			Type: clusterv1.MachineUpdatingCondition, Status: updating, Reason: reason, LastTransitionTime: metav1.Now(),
		}},
	}
	if err := f.c.Status().Update(f.ctx, m); err != nil {
		f.t.Fatalf("update status of machine %s: %v", name, err)
	}
}

func (f fixtures) node(name, kubelet string, unschedulable bool, annotations map[string]string) {
	f.t.Helper()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       corev1.NodeSpec{Unschedulable: unschedulable},
	}
	f.create(n)
	n.Status.NodeInfo.KubeletVersion = kubelet
	if err := f.c.Status().Update(f.ctx, n); err != nil {
		f.t.Fatalf("update status of node %s: %v", name, err)
	}
}

func encode(t *testing.T, s protocol.NodeStatus) string {
	t.Helper()
	v, err := protocol.EncodeStatus(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func ptrTo[T any](v T) *T { return &v }

// unreachableKubeconfig is kubeconfig with every server moved to a closed port.
func unreachableKubeconfig(t *testing.T, kubeconfig []byte) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://127.0.0.1:1"
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
