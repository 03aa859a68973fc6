package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/status"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// TestFleetStatusCommand runs `fleet status` against a real API server holding
// Clusters in each state, read from the management cluster alone (the Clusters'
// kubeconfig Secrets point nowhere).
func TestFleetStatusCommand(t *testing.T) {
	te := testenv.StartT(t, testenv.Options{CAPI: []testenv.CRDSet{testenv.CAPICore}})
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scheme := runtime.NewScheme()
	g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(te.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfigPath := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfigPath, te.Environment.KubeConfig, 0o600)).To(Succeed())
	unreachable := unreachableKubeconfig(t, te.Environment.KubeConfig)

	mk := fixtures{t: t, ctx: ctx, c: c}
	mk.namespace("stores")
	mk.namespace("lab")
	machine := func(ns, cluster, version, kubelet, osImage string, annotations map[string]string, cond *metav1.Condition) {
		t.Helper()
		m := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster + "-cp", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}, Annotations: annotations},
			Spec: clusterv1.MachineSpec{ClusterName: cluster, Version: version,
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptrTo(cluster + "-bootstrap")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DevMachine", Name: cluster}},
		}
		mk.create(m)
		m.Status = clusterv1.MachineStatus{NodeRef: clusterv1.MachineNodeReference{Name: cluster + "-cp"}, NodeInfo: &corev1.NodeSystemInfo{KubeletVersion: kubelet, OSImage: osImage}}
		if cond != nil {
			m.Status.Conditions = []metav1.Condition{*cond}
		}
		g.Expect(c.Status().Update(ctx, m)).To(Succeed())
	}
	label := func(ns, name string, labels map[string]string) {
		t.Helper()
		cl := &clusterv1.Cluster{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl)).To(Succeed())
		before := cl.DeepCopy()
		cl.Labels = labels
		g.Expect(c.Patch(ctx, cl, client.MergeFrom(before))).To(Succeed())
	}
	// stores/done: up to date. stores/busy: Cluster API is updating it in place.
	// stores/broken: its Machine rolled back. lab/held: outdated and paused.
	for _, cl := range []struct{ ns, name, site string }{{"stores", "done", "eu"}, {"stores", "busy", "eu"}, {"stores", "broken", "us"}, {"lab", "held", "lab"}} {
		mk.cluster(cl.ns, cl.name, unreachable)
		label(cl.ns, cl.name, map[string]string{"site": cl.site})
	}
	// The OS image is read from the Machines (Cluster API's copy of the Node's
	// status.nodeInfo), as everything else: no workload cluster is dialled.
	machine("stores", "done", "v1.36.0", "v1.36.0", "Edge OS 2026.12", nil, nil)
	machine("stores", "busy", "v1.36.0", "v1.35.0", "Edge OS 2026.06", map[string]string{clusterv1.UpdateInProgressAnnotation: ""}, nil)
	machine("stores", "broken", "v1.36.0", "v1.35.0", "", nil, &metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse,
		Reason: inplacev1.ReasonRolledBack, Message: "gate lane-health failed", LastTransitionTime: metav1.Now()})
	machine("lab", "held", "v1.36.0", "v1.35.0", "", nil, nil)
	mk.annotateCluster("lab", "held", map[string]string{inplacev1.PausedAnnotation: "true"})

	run := func(args ...string) (string, int) {
		cmd := NewFleetCommand("capi-inplace")
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs(append([]string{"status", "--kubeconfig", kubeconfigPath}, args...))
		err := cmd.ExecuteContext(ctx)
		return out.String(), ExitCode(err)
	}

	t.Run("every namespace as JSON: one line per Cluster, a failed one exits 3", func(t *testing.T) {
		g := NewWithT(t)
		out, code := run("-A", "-o", "json")
		g.Expect(code).To(Equal(ExitNodeFailed), out)
		var l status.FleetList
		g.Expect(json.Unmarshal([]byte(out), &l)).To(Succeed(), out)
		g.Expect(l.Kind).To(Equal(status.FleetListKind))
		states := map[string]string{}
		images := map[string][]string{}
		for _, c := range l.Clusters {
			states[c.Namespace+"/"+c.Name] = c.State
			images[c.Namespace+"/"+c.Name] = c.OSImages
		}
		g.Expect(images).To(Equal(map[string][]string{
			"lab/held": {}, "stores/broken": {}, "stores/busy": {"Edge OS 2026.06"}, "stores/done": {"Edge OS 2026.12"},
		}))
		g.Expect(states).To(Equal(map[string]string{
			"lab/held": status.FleetPaused, "stores/broken": status.ClusterFailed, "stores/busy": status.ClusterUpdating, "stores/done": status.ClusterUpToDate,
		}))
		g.Expect(l.Summary).To(Equal(status.FleetSummary{Clusters: 4, UpToDate: 1, Updating: 1, Failed: 1, Held: 1}))
		for _, c := range l.Clusters {
			if c.State == status.ClusterFailed {
				g.Expect(c.Message).To(ContainSubstring(inplacev1.ReasonRolledBack))
			}
		}
	})
	t.Run("a label selector in one namespace, as a table", func(t *testing.T) {
		g := NewWithT(t)
		out, code := run("-n", "stores", "-l", "site=eu")
		g.Expect(code).To(Equal(ExitOK), out)
		g.Expect(out).To(HavePrefix("2 clusters: 1 up to date, 1 updating, 0 staged, 0 failed, 0 outdated, 0 held\n"))
		g.Expect(out).To(MatchRegexp(`(?m)^stores\s+done\s+v1\.36\.0\s+Edge OS 2026\.12\s+1/1\s+UpToDate\s`))
		g.Expect(out).To(MatchRegexp(`(?m)^stores\s+busy\s+v1\.36\.0\s+Edge OS 2026\.06\s+0/1\s+Updating\s`))
		g.Expect(out).NotTo(ContainSubstring("broken"))
	})
	t.Run("--failed lists the failed Clusters, the summary counts all", func(t *testing.T) {
		g := NewWithT(t)
		out, code := run("-A", "--failed", "-o", "json")
		g.Expect(code).To(Equal(ExitNodeFailed), out)
		var l status.FleetList
		g.Expect(json.Unmarshal([]byte(out), &l)).To(Succeed(), out)
		g.Expect(l.Clusters).To(HaveLen(1))
		g.Expect(l.Clusters[0].Name).To(Equal("broken"))
		g.Expect(l.Summary.Clusters).To(Equal(4))
	})
	t.Run("a bad selector is the command's error", func(t *testing.T) {
		g := NewWithT(t)
		out, code := run("-A", "-l", "site in (")
		g.Expect(code).To(Equal(ExitError), out)
	})
}
