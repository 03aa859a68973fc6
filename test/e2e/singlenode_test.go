//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/internal/singlenode"
)

// singleNodeLabel marks the namespaces whose KubeadmControlPlanes go through the
// single-node hold webhook; the webhook's namespaceSelector keeps it away from every
// other scenario of the shared stack.
const singleNodeLabel = "e2e.capi-inplace.dev/single-node"

// singleNodeWebhooks remembers, per stack, that the hold webhook is registered.
var singleNodeWebhooks sync.Map // *localstack.Stack -> error

// registerSingleNodeWebhook registers our extension's hold webhook with the stack's API
// server (as a deployment's MutatingWebhookConfiguration would), after checking that
// the extension process serves it.
func registerSingleNodeWebhook(ctx context.Context, stack *localstack.Stack, ext *localstack.Extension) error {
	if v, ok := singleNodeWebhooks.Load(stack); ok {
		if v == nil {
			return nil
		}
		return v.(error)
	}
	err := func() error {
		url := fmt.Sprintf("https://127.0.0.1:%d%s", ext.Port, singlenode.DefaultWebhookPath)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ext.Cert.CAPEM)
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		resp, err := hc.Post(url, "application/json", bytes.NewReader([]byte(`{}`)))
		if err != nil {
			return fmt.Errorf("probe %s: %w", url, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("the extension does not serve %s (HTTP 404): wire singlenode.SetupWithManager into `capi-inplace extension` with WebhookServer set to the hook server", singlenode.DefaultWebhookPath)
		}
		hook := singlenode.MutatingWebhook(admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ext.Cert.CAPEM})
		hook.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{singleNodeLabel: "true"}}
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-single-node"},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{hook},
		}
		if err := stack.Client.Create(ctx, cfg); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create MutatingWebhookConfiguration: %w", err)
		}
		return nil
	}()
	if err != nil {
		singleNodeWebhooks.Store(stack, err)
	} else {
		singleNodeWebhooks.Store(stack, nil)
	}
	return err
}

// newSingleNodeScenario is a scenario on stack (the shared one when nil) served by
// our extension ext, whose namespace goes through the hold webhook.
func newSingleNodeScenario(t *testing.T, stack *localstack.Stack, ext *localstack.Extension, ns string) *scenario {
	t.Helper()
	var s *scenario
	if stack == nil {
		s = newScenario(t, ns, extOurs)
	} else {
		s = &scenario{t: t, ctx: suite.ctx, ns: ns, stack: stack, start: time.Now()}
		if err := stack.CreateNamespace(s.ctx, ns, map[string]string{extensionLabel: extOurs, inplacev1.NamespaceEnabledLabel: "true"}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s.dump()
			t.Logf("EVIDENCE %s: scenario wall time %s", t.Name(), time.Since(s.start).Round(time.Second))
		})
	}
	if err := registerSingleNodeWebhook(s.ctx, s.stack, ext); err != nil {
		t.Fatal(err)
	}
	if err := s.stack.CreateNamespace(s.ctx, ns, map[string]string{singleNodeLabel: "true"}); err != nil {
		t.Fatal(err)
	}
	return s
}

// createSingleNodeClass creates our ClusterClass with its KubeadmControlPlaneTemplate at
// KCP's default rollout (maxSurge 1): KCP refuses maxSurge 0 below three replicas, so a
// single-node ClusterClass cluster has maxSurge 1, and the proof is that no Machine is
// created anyway. (The template is immutable, so it is replaced before first use.)
func (s *scenario) createSingleNodeClass(class string) {
	s.t.Helper()
	if err := s.stack.CreateClusterClass(s.ctx, s.ns, class); err != nil {
		s.t.Fatal(err)
	}
	tmpl := &unstructured.Unstructured{}
	tmpl.SetAPIVersion(controlplanev1.GroupVersion.String())
	tmpl.SetKind("KubeadmControlPlaneTemplate")
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: class + "-control-plane"}, tmpl); err != nil {
		s.t.Fatal(err)
	}
	if err := s.stack.Client.Delete(s.ctx, tmpl); err != nil {
		s.t.Fatal(err)
	}
	unstructured.RemoveNestedField(tmpl.Object, "spec", "template", "spec", "rollout")
	fresh := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": tmpl.GetAPIVersion(), "kind": tmpl.GetKind(),
		"metadata": map[string]any{"name": tmpl.GetName(), "namespace": s.ns},
		"spec":     tmpl.Object["spec"],
	}}
	s.eventually(30*time.Second, "KubeadmControlPlaneTemplate recreated", func() error {
		return s.stack.Client.Create(s.ctx, fresh)
	})
}

// createControlPlaneOnlyCluster creates an opted-in ClusterClass cluster with one
// control-plane node and no MachineDeployment (localstack's template always lists
// workers), with the same network and files variable as localstack's clusters.
func (s *scenario) createControlPlaneOnlyCluster(cluster, class string) {
	s.createControlPlaneOnlyClusterOpt(cluster, class, true)
}

// createControlPlaneOnlyClusterOpt is createControlPlaneOnlyCluster with the opt-in
// at creation or not (optIn adds it later).
func (s *scenario) createControlPlaneOnlyClusterOpt(cluster, class string, optInAtCreation bool) {
	s.t.Helper()
	files, err := jsonValue([]localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}})
	if err != nil {
		s.t.Fatal(err)
	}
	c := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods:          clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}},
				Services:      clusterv1.NetworkRanges{CIDRBlocks: []string{"10.128.0.0/12"}},
				ServiceDomain: "cluster.local",
			},
			Topology: clusterv1.Topology{
				ClassRef:     clusterv1.ClusterClassRef{Name: class},
				Version:      fromVersion,
				ControlPlane: clusterv1.ControlPlaneTopology{Replicas: ptr.To[int32](1)},
				Variables:    []clusterv1.ClusterVariable{{Name: "files", Value: files}},
			},
		},
	}
	if optInAtCreation {
		c.Annotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
	}
	if err := s.stack.Client.Create(s.ctx, c); err != nil {
		s.t.Fatalf("create cluster %s: %v", cluster, err)
	}
	s.logf("created cluster %s/%s (class %s, %s, 1 control-plane node, no workers, opted in at creation: %v)", s.ns, cluster, class, fromVersion, optInAtCreation)
}

// optIn annotates the Cluster for the single-node control-plane path.
func (s *scenario) optIn(cluster string) {
	s.t.Helper()
	c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster}}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, inplacev1.SingleNodeControlPlaneAnnotation))
	if err := s.stack.Client.Patch(s.ctx, c, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		s.t.Fatalf("opt cluster %s in: %v", cluster, err)
	}
}

// optInTopology opts a ClusterClass cluster in through
// spec.topology.controlPlane.metadata.annotations (the topology controller puts it on
// the KubeadmControlPlane).
func (s *scenario) optInTopology(cluster string) {
	s.t.Helper()
	c := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster}}
	patch := []byte(fmt.Sprintf(`{"spec":{"topology":{"controlPlane":{"metadata":{"annotations":{%q:"true"}}}}}}`, inplacev1.SingleNodeControlPlaneAnnotation))
	if err := s.stack.Client.Patch(s.ctx, c, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		s.t.Fatalf("opt cluster %s in through its topology: %v", cluster, err)
	}
	s.eventually(time.Minute, "the opt-in on the KubeadmControlPlane", func() error {
		if v := s.kcp(s.kcpOf(cluster)).Annotations[inplacev1.SingleNodeControlPlaneAnnotation]; v != "true" {
			return fmt.Errorf("KCP opt-in annotation %q", v)
		}
		return nil
	})
}

func (s *scenario) kcp(name string) *controlplanev1.KubeadmControlPlane {
	s.t.Helper()
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, kcp); err != nil {
		s.t.Fatal(err)
	}
	return kcp
}

// kcpOf returns the name of the cluster's KubeadmControlPlane.
func (s *scenario) kcpOf(cluster string) string {
	s.t.Helper()
	c := &clusterv1.Cluster{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster}, c); err != nil {
		s.t.Fatal(err)
	}
	if c.Spec.ControlPlaneRef.Name == "" {
		s.t.Fatalf("cluster %s has no controlPlaneRef yet", cluster)
	}
	return c.Spec.ControlPlaneRef.Name
}

// kcpWatch records every state of the namespace's KubeadmControlPlanes and the
// resourceVersion at which a control-plane Machine first reached the target version:
// the evidence that KCP never saw the new version unpaused while a Machine was
// outdated. resourceVersions are etcd revisions in kube-apiserver, so they order events
// of the two watches exactly, unlike arrival times.
type kcpWatch struct {
	mu        sync.Mutex
	target    string
	states    []kcpState
	alignedRV int64
}

type kcpState struct {
	rv      int64
	version string
	paused  bool
	held    bool
}

func (s *scenario) watchKCPs(target string) *kcpWatch {
	s.t.Helper()
	wc, err := client.NewWithWatch(s.stack.Config, client.Options{Scheme: s.stack.Client.Scheme()})
	if err != nil {
		s.t.Fatal(err)
	}
	kw := &kcpWatch{target: target}
	kcps, err := wc.Watch(s.ctx, &controlplanev1.KubeadmControlPlaneList{}, client.InNamespace(s.ns))
	if err != nil {
		s.t.Fatal(err)
	}
	machines, err := wc.Watch(s.ctx, &clusterv1.MachineList{}, client.InNamespace(s.ns), client.HasLabels{clusterv1.MachineControlPlaneLabel})
	if err != nil {
		s.t.Fatal(err)
	}
	rv := func(o metav1.Object) int64 {
		n, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
		return n
	}
	go func() {
		for ev := range kcps.ResultChan() {
			kcp, ok := ev.Object.(*controlplanev1.KubeadmControlPlane)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			_, paused := kcp.Annotations[clusterv1.PausedAnnotation]
			_, held := kcp.Annotations[inplacev1.HoldAnnotation]
			kw.mu.Lock()
			kw.states = append(kw.states, kcpState{rv: rv(kcp), version: kcp.Spec.Version, paused: paused, held: held})
			kw.mu.Unlock()
		}
	}()
	go func() {
		for ev := range machines.ResultChan() {
			m, ok := ev.Object.(*clusterv1.Machine)
			if !ok || m.Spec.Version != target {
				continue
			}
			kw.mu.Lock()
			if kw.alignedRV == 0 {
				kw.alignedRV = rv(m)
			}
			kw.mu.Unlock()
		}
	}()
	s.t.Cleanup(kcps.Stop)
	s.t.Cleanup(machines.Stop)
	return kw
}

// check fails when KCP was at the target version without the pause before a Machine
// was aligned, or when its first state at the target was not held.
func (w *kcpWatch) check() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.alignedRV == 0 {
		return fmt.Errorf("no control-plane Machine was seen at %s", w.target)
	}
	first := true
	for _, st := range w.states {
		if st.version != w.target {
			continue
		}
		if first && (!st.paused || !st.held) {
			return fmt.Errorf("KCP's first state at %s (rv %d) was not held: %+v", w.target, st.rv, st)
		}
		first = false
		if !st.paused && st.rv < w.alignedRV {
			return fmt.Errorf("KCP at %s unpaused at rv %d, before the Machine was aligned at rv %d", w.target, st.rv, w.alignedRV)
		}
	}
	if first {
		return fmt.Errorf("KCP was never seen at %s", w.target)
	}
	return nil
}

func (w *kcpWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.states)
}

// waitReleased waits until the KCP carries no hold and no pause.
func (s *scenario) waitReleased(kcpName string, timeout time.Duration) {
	s.t.Helper()
	s.eventually(timeout, "KubeadmControlPlane "+kcpName+" released", func() error {
		kcp := s.kcp(kcpName)
		if _, ok := kcp.Annotations[inplacev1.HoldAnnotation]; ok {
			return fmt.Errorf("still held (%v)", kcp.Annotations)
		}
		if _, ok := kcp.Annotations[clusterv1.PausedAnnotation]; ok {
			return fmt.Errorf("still paused")
		}
		return nil
	})
}

// singleNodeClusterClassRound is the ClusterClass scenario on stack (shared when nil):
// one control-plane node, no workers, spec.topology.version one minor up.
func singleNodeClusterClassRound(t *testing.T, stack *localstack.Stack, ext *localstack.Extension, ns string, lateOptIn bool) {
	s := newSingleNodeScenario(t, stack, ext, ns)
	const cluster, class = "sn", "inplace-sn"
	s.createSingleNodeClass(class)
	s.createControlPlaneOnlyClusterOpt(cluster, class, !lateOptIn)
	s.waitClusterReady(cluster, 1)
	if lateOptIn {
		// Added after creation and after the topology controller's first writes, where
		// it survives a topology upgrade: on the control plane's metadata in the topology,
		// which the topology controller applies to the KCP. (A Cluster annotation added
		// just before the upgrade is deleted by Cluster API's topology controller: see
		// singlenode.KCPOptedIn.)
		s.optInTopology(cluster)
		s.logf("EVIDENCE opted in after creation through spec.topology.controlPlane.metadata.annotations (the Cluster was ready without it)")
	}
	agents := s.startAgents(cluster, 1)
	kcpName := s.kcpOf(cluster)
	before := machineIDs(s.machines(cluster))
	watch := s.watchMachines()
	kcps := s.watchKCPs(toVersion)

	if lateOptIn {
		// Also on the Cluster, just before the upgrade: the place where Cluster API
		// v1.14's topology controller once lost it (docs/single-node.md). Recorded, not
		// required: the KCP's opt-in above is the one that must hold.
		s.optIn(cluster)
	}
	roundStart := time.Now()
	s.setTopologyVersionAndAPIServerArg(cluster, toVersion, auditArg, auditValue)
	s.logf("changed spec.topology.version %s -> %s and variable apiServerExtraArgs (%s=%s) in one write on a single control-plane node", fromVersion, toVersion, auditArg, auditValue)
	nodes := s.nodesAt(agents.Kubeconfig(), toVersion)
	s.waitRolledOut(cluster, toVersion, 1, false, rolloutTimeout, func(ms []clusterv1.Machine) error {
		if err := sameMachines(before, ms); err != nil {
			return err
		}
		if err := nodes(); err != nil {
			return err
		}
		kcp := s.kcp(kcpName)
		if _, held := kcp.Annotations[inplacev1.HoldAnnotation]; held {
			return fmt.Errorf("KCP still held")
		}
		if err := conditionTrue(kcp.Status.Conditions, controlplanev1.KubeadmControlPlaneMachinesUpToDateCondition); err != nil {
			return fmt.Errorf("KCP: %w", err)
		}
		c := &clusterv1.Cluster{}
		if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster}, c); err != nil {
			return err
		}
		if err := conditionTrue(c.Status.Conditions, clusterv1.ClusterTopologyReconciledCondition); err != nil {
			return fmt.Errorf("topology upgrade not complete: %w", err)
		}
		if kcp.Status.Version != toVersion { //nolint:staticcheck // KCP v1.14 still reports status.version; the scenario asserts what KCP reports
			return fmt.Errorf("KCP status.version %q", kcp.Status.Version) //nolint:staticcheck // as above
		}
		return conditionTrue(c.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	})
	round := time.Since(roundStart)
	s.assertNoMachineChurn(watch)
	if err := kcps.check(); err != nil {
		t.Fatal(err)
	}
	s.logf("EVIDENCE KubeadmControlPlane %s: %d states watched, never at %s unpaused before the Machine was aligned; released afterwards", kcpName, kcps.count(), toVersion)
	s.assertAPIServerArg(cluster, agents, auditArg+"="+auditValue)
	if lateOptIn {
		kept, owners := s.clusterOptInRecord(cluster)
		s.logf("EVIDENCE Cluster opt-in annotation added just before the topology upgrade still present afterwards: %v (managers owning it: %q)", kept, owners)
	}
	s.logf("EVIDENCE machines kept name and UID: %v", before)
	vs, _ := s.nodeVersions(s.workloadClient(agents.Kubeconfig()))
	s.logf("EVIDENCE node kubelet versions: %v", vs)
	s.logf("EVIDENCE round: single-node ClusterClass in-place round (%s -> %s) took %s", fromVersion, toVersion, round.Round(time.Second))
}

// TestSingleNodeClusterClassInPlace: a ClusterClass cluster with one control-plane
// node (KCP maxSurge 1, KCP's minimum below three replicas) and no workers, opted in
// only after it was created and ready (on the control plane's topology metadata; on the
// Cluster too, just before the upgrade, whose fate is recorded), moves
// spec.topology.version one minor up and sets the apiServerExtraArgs variable in the
// same write. No Machine is created at any moment (watched), the Machine keeps name and
// UID, the Node reports the new kubelet version, KCP was never at the new version
// unpaused before alignment, KCP and the Cluster report the control plane up to date
// and the topology reconciled, and the new kube-apiserver argument is in the workload
// cluster's kubeadm-config and in the node's kube-apiserver manifest.
func TestSingleNodeClusterClassInPlace(t *testing.T) {
	t.Parallel()
	ext := ourExtension(t)
	singleNodeClusterClassRound(t, nil, ext, "sn-cc", true)
}

// TestSingleNodePlainClusterWithWorkers: a plain cluster, KCP 1 replica (KCP refuses
// maxSurge 0 below three replicas, and an even replica count with stacked etcd: two
// replicas are TestSingleNodeTwoReplicas, with external etcd) plus a MachineDeployment of 1 worker (maxSurge 0,
// maxUnavailable 1), opted in after creation; version one minor up, a files change and
// an apiServer.extraArgs change: the control plane goes in place through the
// single-node path one node at a time, the new argument reaches the workload cluster's
// kubeadm-config and every control-plane node's kube-apiserver manifest, the workers go
// through upstream's MachineDeployment in-place path; no Machine is created. Then a
// change the planner refuses (a new API server SAN) is refused, visible on the KCP and
// the Cluster, and KCP does not surge.
func TestSingleNodePlainClusterWithWorkers(t *testing.T) {
	t.Parallel()
	ext := ourExtension(t)
	s := newSingleNodeScenario(t, nil, ext, "sn-plain")
	const cluster = "snp"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Version: fromVersion,
		ControlPlaneReplicas: 1, WorkerReplicas: 1, MDMaxSurge: 0, MDMaxUnavailable: 1,
		Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}},
	}); err != nil {
		t.Fatal(err)
	}
	s.optIn(cluster)
	s.waitClusterReady(cluster, 2)
	agents := s.startAgents(cluster, 2)
	before := machineIDs(s.machines(cluster))
	watch := s.watchMachines()
	file := localstack.File{Path: "/etc/capi-inplace-e2e/round", Content: "1"}

	roundStart := time.Now()
	kcpName := cluster + "-control-plane"
	kcp := s.kcp(kcpName)
	base := kcp.DeepCopy()
	kcp.Spec.Version = toVersion
	apiServer := &kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer
	apiServer.ExtraArgs = append(apiServer.ExtraArgs, bootstrapv1.Arg{Name: auditArg, Value: ptr.To(auditValue)})
	for i := range kcp.Spec.KubeadmConfigSpec.Files {
		if kcp.Spec.KubeadmConfigSpec.Files[i].Path == file.Path {
			kcp.Spec.KubeadmConfigSpec.Files[i].Content = file.Content
		}
	}
	if err := s.stack.Client.Patch(s.ctx, kcp, client.MergeFrom(base)); err != nil {
		t.Fatalf("patch KCP: %v", err)
	}
	if _, held := kcp.Annotations[inplacev1.HoldAnnotation]; !held {
		t.Fatalf("the KCP write that changed the version was not held: %v", kcp.Annotations)
	}
	s.logf("EVIDENCE the KCP write that changed version and files came back held: %s=%s", inplacev1.HoldAnnotation, kcp.Annotations[inplacev1.HoldAnnotation])
	s.waitReleased(kcpName, rolloutTimeout)
	cpDone := time.Since(roundStart)
	s.assertAPIServerArg(cluster, agents, auditArg+"="+auditValue)

	s.setWorkerVersionAndFiles(cluster, toVersion, "v2", file)
	s.waitInPlace(cluster, toVersion, 2, true, before, file, agents)
	round := time.Since(roundStart)
	s.assertNoMachineChurn(watch)
	s.logf("EVIDENCE round: plain single-node control plane + 1 worker (%s -> %s + files + apiServer.extraArgs) took %s (control plane %s)",
		fromVersion, toVersion, round.Round(time.Second), cpDone.Round(time.Second))

	s.refusedChangeStaysHeld(cluster, kcpName, watch)
}

// setTopologyVersionAndAPIServerArg moves a ClusterClass cluster to version and sets
// its apiServerExtraArgs variable to one argument, in one write.
func (s *scenario) setTopologyVersionAndAPIServerArg(cluster, version, name, value string) {
	s.t.Helper()
	c := &clusterv1.Cluster{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster}, c); err != nil {
		s.t.Fatal(err)
	}
	base := c.DeepCopy()
	raw, err := jsonValue([]map[string]string{{"name": name, "value": value}})
	if err != nil {
		s.t.Fatal(err)
	}
	c.Spec.Topology.Version = version
	c.Spec.Topology.Variables = append(c.Spec.Topology.Variables, clusterv1.ClusterVariable{Name: "apiServerExtraArgs", Value: raw})
	if err := s.stack.Client.Patch(s.ctx, c, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("patch cluster topology: %v", err)
	}
}

// The apiServer.extraArgs change of the plain and ClusterClass scenarios.
const auditArg, auditValue = "audit-log-maxage", "30"

// assertAPIServerArg checks that the workload cluster's kubeadm-config carries the
// kube-apiserver flag and that every control-plane node's kube-apiserver manifest (as
// kubeadm upgrade rendered it from that ConfigMap on the simulated host) does.
func (s *scenario) assertAPIServerArg(cluster string, agents *localstack.Agents, flag string) {
	s.t.Helper()
	cm := &corev1.ConfigMap{}
	if err := s.workloadClient(agents.Kubeconfig()).Get(s.ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"}, cm); err != nil {
		s.t.Fatalf("read the workload kubeadm-config: %v", err)
	}
	name, value, _ := strings.Cut(flag, "=")
	if cfg := cm.Data["ClusterConfiguration"]; !strings.Contains(cfg, "name: "+name) || !strings.Contains(cfg, "value: \""+value+"\"") {
		s.t.Fatalf("workload kubeadm-config does not carry apiServer.extraArgs %s:\n%s", flag, cfg)
	}
	s.logf("EVIDENCE workload kubeadm-config carries apiServer.extraArgs %s", flag)
	cps := 0
	for _, n := range agents.Nodes() {
		manifest, err := hostFile(agents, n, "etc/kubernetes/manifests/kube-apiserver.yaml")
		if err != nil {
			continue // a worker
		}
		cps++
		if !strings.Contains(manifest, "- --"+flag+"\n") {
			s.t.Fatalf("node %s: kube-apiserver manifest lacks --%s:\n%s", n, flag, manifest)
		}
	}
	if cps == 0 {
		s.t.Fatal("no control-plane node has a kube-apiserver manifest")
	}
	s.logf("EVIDENCE --%s in the kube-apiserver manifest of %d control-plane nodes", flag, cps)
}

// refusedChangeStaysHeld makes a change the planner refuses (a new API server SAN: the
// serving certificate would keep the old SANs) and checks that it is refused, visible
// on the KCP and the Cluster, and that KCP stays held and creates no Machine.
func (s *scenario) refusedChangeStaysHeld(cluster, kcpName string, watch *machineWatch) {
	s.t.Helper()
	kcp := s.kcp(kcpName)
	base := kcp.DeepCopy()
	kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.CertSANs = append(kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.CertSANs, "refused.example.com")
	if err := s.stack.Client.Patch(s.ctx, kcp, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("patch KCP certSANs: %v", err)
	}
	s.eventually(time.Minute, "the certSANs change refused on the KCP and the Cluster", func() error {
		c := &clusterv1.Cluster{}
		if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster}, c); err != nil {
			return err
		}
		for what, conds := range map[string][]metav1.Condition{"KCP": s.kcp(kcpName).Status.Conditions, "Cluster": c.Status.Conditions} {
			cond := findCondition(conds, inplacev1.InPlaceUpdateCondition)
			if cond == nil || cond.Reason != inplacev1.ReasonRefused || !strings.Contains(cond.Message, "certSANs") {
				return fmt.Errorf("%s: InPlaceUpdate %+v", what, cond)
			}
		}
		return nil
	})
	// KCP would surge within seconds of a release; give it time to.
	time.Sleep(15 * time.Second)
	if _, held := s.kcp(kcpName).Annotations[inplacev1.HoldAnnotation]; !held {
		s.t.Fatal("the KCP was released with a refused change")
	}
	s.assertNoMachineChurn(watch)
	s.logf("EVIDENCE a refused change (apiServer.certSANs): InPlaceUpdate=False %s on KCP and Cluster, KCP held, no Machine created", inplacev1.ReasonRefused)
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// setWorkerVersionAndFiles moves a plain cluster's MachineDeployment to version and to a
// new KubeadmConfigTemplate (<cluster>-worker-<suffix>) holding file in ONE write: two
// successive template changes make upstream's rollout planner replace a Machine that
// is in the middle of moving to the intermediate MachineSet.
func (s *scenario) setWorkerVersionAndFiles(cluster, version, suffix string, file localstack.File) {
	s.t.Helper()
	tmpl := &unstructured.Unstructured{}
	tmpl.SetAPIVersion("bootstrap.cluster.x-k8s.io/v1beta2")
	tmpl.SetKind("KubeadmConfigTemplate")
	tmpl.SetNamespace(s.ns)
	tmpl.SetName(cluster + "-worker-" + suffix)
	tmpl.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{
		"files": []any{map[string]any{"path": file.Path, "content": file.Content}},
	}}}
	if err := s.stack.Client.Create(s.ctx, tmpl); err != nil {
		s.t.Fatal(err)
	}
	md := &clusterv1.MachineDeployment{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster + "-md-0"}, md); err != nil {
		s.t.Fatal(err)
	}
	base := md.DeepCopy()
	md.Spec.Template.Spec.Version = version
	md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = tmpl.GetName()
	if err := s.stack.Client.Patch(s.ctx, md, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("patch MachineDeployment: %v", err)
	}
	s.logf("workers: version %s and KubeadmConfigTemplate %s (%s = %q) in one write", version, tmpl.GetName(), file.Path, file.Content)
}

// TestSingleNodeInPlaceWithGateOff: the same single-node ClusterClass upgrade on a stack
// whose managers run with InPlaceUpdates=false: the single-node path does not depend on
// CAPI calling the in-place hooks.
//
// The in-memory provider binds fixed ports (its workload-cluster mux), so two stacks
// cannot run at once: this test replaces the shared stack with a gate-off one and
// therefore runs only on request, alone:
//
//	E2E_SINGLENODE_GATE_OFF=1 go test -tags e2e -run TestSingleNodeInPlaceWithGateOff ./test/e2e/
func TestSingleNodeInPlaceWithGateOff(t *testing.T) {
	if os.Getenv("E2E_SINGLENODE_GATE_OFF") == "" {
		t.Skip("replaces the shared stack: run alone with E2E_SINGLENODE_GATE_OFF=1 (see the test's doc)")
	}
	requireBinary(t)
	binDir := suite.stack.BinDir()
	suite.stack.Stop()
	dir := filepath.Join(suite.artifacts, "gate-off")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := localstack.Options{
		BinDir: binDir, ArtifactsDir: dir, Out: os.Stdout,
		KeepTemp: os.Getenv("E2E_KEEP_TEMP") != "", DisableInPlaceUpdatesGate: true,
	}
	stack, err := localstack.Start(suite.ctx, opts)
	if err != nil {
		t.Fatalf("start the gate-off stack: %v", err)
	}
	t.Cleanup(stack.Stop)
	suite.stack = stack
	ext, err := stack.StartExtension(suite.ctx, localstack.OurExtension(stack.BinDir(), "capi-inplace", map[string]string{extensionLabel: extOurs}, nil))
	if err != nil {
		t.Fatalf("start our extension on the gate-off stack: %v", err)
	}
	t.Logf("EVIDENCE gate-off stack feature gates: %s", opts.FeatureGates())
	singleNodeClusterClassRound(t, stack, ext, "sn-gate-off", false)
}

// TestSingleNodeHealthGateFailure: a failing health gate on the only control-plane
// node. The node is rolled back, no Machine is created or deleted, the Machine stays at
// the old spec, the cause is visible on the KCP and the Cluster (InPlaceUpdate
// condition) and in Events, and KCP stays paused at the new spec (released, it would
// create a surge Machine). Cluster API refuses to lower spec.topology.version, so the
// operator retries (cause fixed, verdicts cleared): the update succeeds, KCP is released.
func TestSingleNodeHealthGateFailure(t *testing.T) {
	t.Parallel()
	ext := ourExtension(t)
	s := newSingleNodeScenario(t, nil, ext, "sn-fail")
	const cluster, class = "snf", "inplace-snf"
	s.createSingleNodeClass(class)
	s.createControlPlaneOnlyCluster(cluster, class)
	s.waitClusterReady(cluster, 1)
	agents := s.startAgents(cluster, 1)
	kcpName := s.kcpOf(cluster)
	before := machineIDs(s.machines(cluster))
	watch := s.watchMachines()
	node := agents.Nodes()[0]
	if err := writeHostFile(agents, node, ".sim/fail-gate", "etcd-health"); err != nil {
		t.Fatal(err)
	}
	s.logf("armed a failing etcd-health gate on node %s", node)

	s.setTopology(cluster, toVersion, nil)
	var cause string
	s.eventually(rolloutTimeout, "the failure reported on the KCP", func() error {
		kcp := s.kcp(kcpName)
		// The one failure record is the Machine's, for the KCP's current target.
		ms := s.machines(cluster)
		if len(ms) != 1 {
			return fmt.Errorf("%d Machines, want 1", len(ms))
		}
		if rec, ok := singlenode.MachineFailedUpdate(&ms[0]); !ok || rec.Target != singlenode.TargetHash(kcp) {
			return fmt.Errorf("no %s for the KCP's target on Machine %s yet", inplacev1.FailedUpdateAnnotation, ms[0].Name)
		}
		if _, ok := kcp.Annotations[inplacev1.HoldFailedAnnotation]; ok {
			return fmt.Errorf("KCP %s carries %s: a second failure record", kcpName, inplacev1.HoldFailedAnnotation)
		}
		for _, c := range kcp.Status.Conditions {
			if c.Type == inplacev1.InPlaceUpdateCondition && c.Status == metav1.ConditionFalse && c.Reason == inplacev1.ReasonRolledBack {
				cause = c.Message
				return nil
			}
		}
		return fmt.Errorf("no InPlaceUpdate=False/%s condition", inplacev1.ReasonRolledBack)
	})
	kcp := s.kcp(kcpName)
	if _, paused := kcp.Annotations[clusterv1.PausedAnnotation]; !paused {
		t.Fatal("KCP released with an outdated Machine: it would create a surge Machine")
	}
	ms := s.machines(cluster)
	if err := sameMachines(before, ms); err != nil {
		t.Fatal(err)
	}
	if ms[0].Spec.Version != fromVersion {
		t.Fatalf("Machine %s aligned to %s after a rollback", ms[0].Name, ms[0].Spec.Version)
	}
	if err := s.nodesAt(agents.Kubeconfig(), fromVersion)(); err != nil {
		t.Fatalf("node not rolled back: %v", err)
	}
	ev, err := s.machineEvent(ms[0].Name, inplacev1.EventUpdateRolledBack)
	if err != nil {
		t.Fatal(err)
	}
	s.logf("EVIDENCE KCP %s stays paused and held; InPlaceUpdate=False/%s: %s", kcpName, inplacev1.ReasonRolledBack, cause)
	s.logf("EVIDENCE Machine %s Event %s: %s", ms[0].Name, ev.Reason, ev.Message)

	// Cluster API refuses to lower spec.topology.version, so the way on is a retry: the
	// operator fixes the cause and annotates the Machine, the one retry of both paths
	// (docs/operations.md). The controller drops the Machine's failure record, the
	// coordinator withdraws the failed plan and its verdict, the retry succeeds and KCP
	// is released.
	if err := os.Remove(filepath.Join(agents.HostRoot(node), ".sim", "fail-gate")); err != nil {
		t.Fatal(err)
	}
	s.annotateMachine(ms[0].Name, inplacev1.RetryAnnotation, ptrTo("true"))
	s.logf("retry: fail-gate removed, Machine %s annotated %s", ms[0].Name, inplacev1.RetryAnnotation)
	s.waitReleased(kcpName, rolloutTimeout)
	if _, ok := s.machine(ms[0].Name).Annotations[inplacev1.RetryAnnotation]; ok {
		t.Fatalf("Machine %s still carries %s after the retry: the coordinator did not take it", ms[0].Name, inplacev1.RetryAnnotation)
	}
	ms = s.machines(cluster)
	if err := sameMachines(before, ms); err != nil {
		t.Fatal(err)
	}
	if ms[0].Spec.Version != toVersion {
		t.Fatalf("Machine %s at %s after a successful retry", ms[0].Name, ms[0].Spec.Version)
	}
	if err := s.nodesAt(agents.Kubeconfig(), toVersion)(); err != nil {
		t.Fatal(err)
	}
	s.assertNoMachineChurn(watch)
	s.logf("EVIDENCE after the retry the node runs %s, the Machine was aligned and the KCP released; machines kept: %v", toVersion, before)
}
