//go:build e2e

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/internal/preview"
)

// TestPlanOnLocalStack runs `capi-inplace plan` against a ClusterClass cluster that the
// real upstream Cluster API managers (core, KCP, kubeadm bootstrap, Dev in-memory
// provider) created: 3 control-plane Machines (KCP maxSurge 0) and 2 workers
// (MachineDeployment maxUnavailable 1). It checks plan's comparison against objects as
// Cluster API really writes them (KubeadmConfigs by KCP and CABPK, DevMachines by the
// provider): unchanged with no change, all in place one minor up, all replaced two
// minors up, workers in place for a files change, and that plan never writes (specs'
// generations do not move; the controllers keep writing status).
//
// go test -tags e2e ./internal/cli -run TestPlanOnLocalStack (needs make tools-capi).
func TestPlanOnLocalStack(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := filepath.Join("..", "..")
	artifacts := filepath.Join(root, "_artifacts", "plan-e2e-"+time.Now().UTC().Format("20060102-150405"))
	stack, err := localstack.Start(ctx, localstack.Options{BinDir: filepath.Join(root, "bin"), ArtifactsDir: artifacts, Out: testWriter{t}})
	g.Expect(err).NotTo(HaveOccurred())
	defer stack.Stop()

	const ns, cluster = "plan", "pc"
	g.Expect(stack.CreateNamespace(ctx, ns, nil)).To(Succeed())
	g.Expect(stack.CreateClusterClass(ctx, ns, "inplace")).To(Succeed())
	g.Expect(stack.CreateCluster(ctx, localstack.ClusterSpec{
		Namespace: ns, Name: cluster, Class: "inplace", Version: "v1.35.0",
		ControlPlaneReplicas: 3, WorkerReplicas: 2, MDMaxSurge: 0, MDMaxUnavailable: 1,
		Files: []localstack.File{{Path: "/etc/plan-e2e", Content: "0"}},
	})).To(Succeed())
	healthyCluster := func() error {
		ms := &clusterv1.MachineList{}
		if err := stack.Client.List(ctx, ms, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(ms.Items) != 5 {
			return fmt.Errorf("%d machines", len(ms.Items))
		}
		for _, m := range ms.Items {
			if !m.Status.NodeRef.IsDefined() {
				return fmt.Errorf("machine %s has no node", m.Name)
			}
			// KCP replaces a control-plane Machine whose components are not yet
			// healthy, and plan says so (the guard's rule): wait for KCP's own
			// health filter to pass on every control-plane Machine, or the in-place
			// previews below race the cluster coming up.
			if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp && collections.HasUnhealthyControlPlaneComponents(true)(&m) {
				return fmt.Errorf("control-plane machine %s is not healthy yet", m.Name)
			}
		}
		return nil
	}
	// Settled: healthyCluster passes three times in a row (2 s apart). KCP's health
	// conditions of a control-plane Machine can drop again for a moment after they
	// first pass (seen once, cause not proven: the preview right after a single
	// passing check said "replace", EtcdMemberHealthy NotHealthy and the pod
	// conditions absent).
	settled := 0
	g.Eventually(func() error {
		if err := healthyCluster(); err != nil {
			settled = 0
			return err
		}
		if settled++; settled < 3 {
			return fmt.Errorf("healthy in %d check(s) in a row, want 3", settled)
		}
		return nil
	}, 5*time.Minute, 2*time.Second).Should(Succeed())
	before := generations(ctx, t, stack.Client, ns)

	guard := &writeGuard{}
	dir := t.TempDir()
	run := func(change string, args ...string) (string, error) {
		a := []string{cluster, "-n", ns, "--kubeconfig", stack.KubeconfigPath}
		if change != "" {
			p := filepath.Join(dir, "change.yaml")
			if err := os.WriteFile(p, []byte(change), 0o600); err != nil {
				return "", err
			}
			a = append(a, "-f", p)
		}
		out, err := runPlan(ctx, guard.newClient, "", append(a, args...)...)
		t.Logf("plan %s:\n%s", strings.Join(args, " "), out)
		return out, err
	}
	report := func(out string) preview.Report {
		var r preview.Report
		g.Expect(json.Unmarshal([]byte(out), &r)).To(Succeed())
		return r
	}
	verdicts := func(r preview.Report) map[string]int {
		out := map[string]int{}
		for _, m := range r.Machines {
			out[m.Role+"/"+string(m.Verdict)]++
		}
		return out
	}
	topology := func(v string) string {
		return "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: " + cluster + "}\nspec: {topology: {version: " + v + "}}\n"
	}

	out, err := run("", "-o", "json")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(verdicts(report(out))).To(Equal(map[string]int{"control-plane/unchanged": 3, "worker/unchanged": 2}),
		"with no change, every Machine created by Cluster API matches its owner")

	out, err = run(topology("v1.36.0"), "-o", "json")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(verdicts(report(out))).To(Equal(map[string]int{"control-plane/in-place": 3, "worker/in-place": 2}))

	out, err = run(topology("v1.37.0"), "-o", "json")
	g.Expect(ExitCode(err)).To(Equal(ExitReplace))
	r := report(out)
	g.Expect(verdicts(r)).To(Equal(map[string]int{"control-plane/replace": 3, "worker/replace": 2}))
	for _, m := range r.Machines {
		g.Expect(m.Reasons).To(ContainElement(ContainSubstring("skips a minor version")), m.Name)
	}

	// A files change as a new KubeadmConfigTemplate for the workers, based on the one
	// the topology controller generated.
	md := &clusterv1.MachineDeploymentList{}
	g.Expect(stack.Client.List(ctx, md, client.InNamespace(ns))).To(Succeed())
	g.Expect(md.Items).To(HaveLen(1))
	kct := &unstructured.Unstructured{}
	kct.SetGroupVersionKind(schema.GroupVersionKind{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfigTemplate"})
	g.Expect(stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: md.Items[0].Spec.Template.Spec.Bootstrap.ConfigRef.Name}, kct)).To(Succeed())
	files, _, _ := unstructured.NestedSlice(kct.Object, "spec", "template", "spec", "files")
	files = append(files, map[string]any{"path": "/etc/plan-e2e-new", "content": "1"})
	spec, _, _ := unstructured.NestedMap(kct.Object, "spec")
	g.Expect(unstructured.SetNestedSlice(spec, files, "template", "spec", "files")).To(Succeed())
	newKCT, err := json.Marshal(map[string]any{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
		"metadata": map[string]any{"name": "plan-e2e-workers"}, "spec": spec})
	g.Expect(err).NotTo(HaveOccurred())
	change := string(newKCT) + "\n---\napiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: " + md.Items[0].Name +
		"}\nspec: {template: {spec: {bootstrap: {configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfigTemplate, name: plan-e2e-workers}}}}}\n"
	out, err = run(change, "-o", "json")
	g.Expect(err).NotTo(HaveOccurred())
	r = report(out)
	g.Expect(verdicts(r)).To(Equal(map[string]int{"control-plane/unchanged": 3, "worker/in-place": 2}))
	for _, m := range r.Machines {
		if m.Role == preview.RoleWorker {
			g.Expect(m.Changes).To(ConsistOf(HaveField("Field", "spec.template.spec.files")), m.Name)
		}
	}

	out, err = run(topology("v1.36.0"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(HaveSuffix("\n5 machines: 5 in place, 0 replaced, 0 unchanged.\n"))

	g.Expect(guard.attempts()).To(BeEmpty())
	g.Expect(generations(ctx, t, stack.Client, ns)).To(Equal(before))
}

// generations returns "<kind>/<name>" -> metadata.generation of the objects a change
// is about: a spec write moves it, the controllers' status writes do not. (Machines
// and MachineSets are left out: their controllers may still sync them.)
func generations(ctx context.Context, t *testing.T, c client.Client, ns string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "ClusterList"},
		{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeploymentList"},
		{Group: "controlplane.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmControlPlaneList"},
		{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfigTemplateList"},
		{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta2", Kind: "DevMachineTemplateList"},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatalf("list %s: %v", gvk.Kind, err)
		}
		for _, item := range list.Items {
			out[item.GetKind()+"/"+item.GetName()] = item.GetGeneration()
		}
	}
	return out
}

// testWriter sends the stack's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
