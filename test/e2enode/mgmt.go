//go:build e2enode

package e2enode

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/bench"
	"github.com/capi-inplace/capi-inplace/internal/extension"
)

// Management objects of the lane's cluster, as Cluster API keeps them for a plain
// cluster (KubeadmControlPlane and a MachineDeployment own the Machines; their
// objects are not needed here: the machine controller's side is what is played).
const (
	namespace   = "realnode"
	clusterName = "realnode"
)

var devMachineGVK = schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta2", Kind: "DevMachine"}

// Mgmt is the management cluster: envtest with Cluster API's CRDs.
type Mgmt struct {
	Env    *bench.Env
	Client client.Client
}

// SeedCluster creates the namespace (opted in), the Cluster, its kubeconfig Secret
// and, per node, a Machine with its KubeadmConfig and DevMachine, as CAPI has them
// once the nodes joined.
func (m *Mgmt) SeedCluster(ctx context.Context, c *Cluster, version string) error {
	create := func(o client.Object) error {
		if err := m.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
		return nil
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}},
		&clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: clusterName},
			Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: c.ControlPlane.IP, Port: 6443}},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: clusterName + "-kubeconfig",
				Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
			Type: clusterv1.ClusterSecretType,
			Data: map[string][]byte{"value": c.Kubeconfig},
		},
	}
	for _, o := range objs {
		if err := create(o); err != nil {
			return err
		}
	}
	if err := m.seedMachine(ctx, c.ControlPlane, true, version); err != nil {
		return err
	}
	for _, w := range c.Workers {
		if err := m.seedMachine(ctx, w, false, version); err != nil {
			return err
		}
	}
	return nil
}

// kubeletArgs are the per-node kubelet flags the lane's kubeadm configurations set
// (hack/realnode/node.sh kubelet_args): the KubeadmConfig mirrors what the node runs.
func kubeletArgs(n Node) []bootstrapv1.Arg {
	return []bootstrapv1.Arg{
		{Name: "node-ip", Value: ptr.To(n.IP)},
		{Name: "cgroup-root", Value: ptr.To("/realnode-" + n.Name)},
	}
}

func (m *Mgmt) seedMachine(ctx context.Context, n Node, controlPlane bool, version string) error {
	labels := map[string]string{clusterv1.ClusterNameLabel: clusterName}
	spec := bootstrapv1.KubeadmConfigSpec{}
	if controlPlane {
		labels[clusterv1.MachineControlPlaneLabel] = ""
		spec.InitConfiguration.NodeRegistration.KubeletExtraArgs = kubeletArgs(n)
	} else {
		labels[clusterv1.MachineDeploymentNameLabel] = "md-0"
		spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = kubeletArgs(n)
	}
	cfg := &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: n.Name, Labels: labels}, Spec: spec}
	infra := &unstructured.Unstructured{}
	infra.SetGroupVersionKind(devMachineGVK)
	infra.SetNamespace(namespace)
	infra.SetName(n.Name)
	infra.SetLabels(labels)
	// The lane's nodes were made by hand: the Dev provider's object stands for
	// whatever infrastructure provider a real fleet uses (the coordinator reads it).
	infra.Object["spec"] = map[string]any{"providerID": "realnode://" + n.Name, "backend": map[string]any{"inMemory": map[string]any{}}}
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: n.Name, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: clusterName,
			Version:     version,
			Bootstrap: clusterv1.Bootstrap{
				ConfigRef:      clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: n.Name},
				DataSecretName: ptr.To(n.Name),
			},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: devMachineGVK.Group, Kind: devMachineGVK.Kind, Name: n.Name},
			ProviderID:        "realnode://" + n.Name,
		},
	}
	for _, o := range []client.Object{cfg, infra, machine} {
		if err := m.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, n.Name, err)
		}
	}
	machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: n.Name}
	machine.Status.Initialization = clusterv1.MachineInitializationStatus{
		InfrastructureProvisioned: ptr.To(true), BootstrapDataSecretCreated: ptr.To(true),
	}
	if err := m.Client.Status().Update(ctx, machine); err != nil {
		return fmt.Errorf("machine %s status: %w", n.Name, err)
	}
	return nil
}

// Change is what KubeadmControlPlane or a MachineSet writes into a Machine and its
// bootstrap config before it marks them for an in-place update.
type Change struct {
	Version string
	Config  func(*bootstrapv1.KubeadmConfigSpec)
}

// MachineController plays Cluster API's machine controller for in-place updates
// (core/reconcilers/machine/machine_controller_inplace_update.go): it marks the
// Machine, its KubeadmConfig and its infrastructure machine for the update, calls
// UpdateMachine with the stored objects (status dropped, as cleanupMachine does),
// repeats on retryAfterSeconds, and completes by removing the marks.
type MachineController struct {
	Mgmt   *Mgmt
	Hooks  *bench.HookClient
	Logf   func(format string, args ...any)
	Called []HookCall
}

// HookCall is one UpdateMachine exchange.
type HookCall struct {
	At       time.Time
	Status   runtimehooksv1.ResponseStatus
	Retry    int32
	Message  string
	Duration time.Duration
}

// Result is how an update ended.
type Result struct {
	Done     bool // the hook answered Success without retry
	Calls    []HookCall
	Duration time.Duration
}

// Update writes the change, marks the objects and drives the hook until it answers
// done, until stop says so (e.g. a failure that must be seen), or until timeout.
func (mc *MachineController) Update(ctx context.Context, name string, ch Change, timeout time.Duration, stop func(HookCall) bool) (Result, error) {
	start := time.Now()
	if err := mc.mark(ctx, name, ch); err != nil {
		return Result{}, err
	}
	res := Result{}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		call, err := mc.call(ctx, name)
		if err != nil {
			// CAPI retries transport errors with its rate limiter's backoff.
			mc.Logf("UpdateMachine %s: %v", name, err)
			time.Sleep(2 * time.Second)
			continue
		}
		res.Calls = append(res.Calls, call)
		if len(res.Calls) == 1 || res.Calls[len(res.Calls)-2].Message != call.Message {
			mc.Logf("%s UpdateMachine %s: %s retry=%ds %s", time.Since(start).Round(time.Second), name, call.Status, call.Retry, call.Message)
		}
		if stop != nil && stop(call) {
			res.Duration = time.Since(start)
			return res, nil
		}
		if final := mc.finalVerdict(ctx, name, call); final != "" {
			// The coordinator recorded this answer as where the update ends until an
			// operator acts: calling on only waits out the timeout.
			res.Duration = time.Since(start)
			return res, fmt.Errorf("UpdateMachine %s ended without being done: %s", name, final)
		}
		switch {
		case call.Status == runtimehooksv1.ResponseStatusFailure:
			// A Failure is an error to the machine controller: it retries with backoff.
			time.Sleep(2 * time.Second)
		case call.Retry > 0:
			time.Sleep(time.Duration(call.Retry) * time.Second)
		default:
			res.Done = true
			res.Duration = time.Since(start)
			return res, mc.complete(ctx, name)
		}
	}
	res.Duration = time.Since(start)
	return res, fmt.Errorf("UpdateMachine %s not done after %s", name, timeout)
}

// finalVerdict names the verdict that ends an update until an operator acts, when
// the coordinator recorded the call's answer as one: a Failure the Machine's
// InPlaceUpdate condition holds as rolled back, degraded or not picked up, or a
// Cluster whose in-place updates are halted, holding this call. It reads the API, not the message text.
func (mc *MachineController) finalVerdict(ctx context.Context, name string, call HookCall) string {
	c := mc.Mgmt.Client
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: clusterName}, cluster); err == nil {
		if cond := meta.FindStatusCondition(cluster.Status.Conditions, inplacev1.InPlaceUpdateCondition); cond != nil &&
			cond.Reason == inplacev1.ReasonHalted && strings.Contains(call.Message, cond.Message) {
			return "the Cluster's in-place updates are halted: " + cond.Message
		}
	}
	if call.Status != runtimehooksv1.ResponseStatusFailure {
		return ""
	}
	m := &clusterv1.Machine{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, m); err != nil {
		return ""
	}
	cond := meta.FindStatusCondition(m.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	if cond == nil || cond.Message != call.Message {
		return ""
	}
	switch cond.Reason {
	case inplacev1.ReasonRolledBack, inplacev1.ReasonDegraded, inplacev1.ReasonPlanNotPickedUp:
		return cond.Reason + ": " + cond.Message
	}
	return ""
}

func (mc *MachineController) objects(ctx context.Context, name string) (*clusterv1.Machine, *bootstrapv1.KubeadmConfig, *unstructured.Unstructured, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	m := &clusterv1.Machine{}
	cfg := &bootstrapv1.KubeadmConfig{}
	infra := &unstructured.Unstructured{}
	infra.SetGroupVersionKind(devMachineGVK)
	for _, o := range []client.Object{m, cfg, infra} {
		if err := mc.Mgmt.Client.Get(ctx, key, o); err != nil {
			return nil, nil, nil, fmt.Errorf("get %T %s: %w", o, name, err)
		}
	}
	return m, cfg, infra, nil
}

func (mc *MachineController) mark(ctx context.Context, name string, ch Change) error {
	m, cfg, infra, err := mc.objects(ctx, name)
	if err != nil {
		return err
	}
	c := mc.Mgmt.Client
	if ch.Config != nil {
		base := cfg.DeepCopy()
		ch.Config(&cfg.Spec)
		if err := c.Patch(ctx, cfg, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("change kubeadmconfig %s: %w", name, err)
		}
	}
	for _, o := range []client.Object{cfg, infra} {
		base := o.DeepCopyObject().(client.Object)
		setAnnotation(o, clusterv1.UpdateInProgressAnnotation, "")
		if err := c.Patch(ctx, o, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("mark %T %s: %w", o, name, err)
		}
	}
	base := m.DeepCopy()
	if ch.Version != "" {
		m.Spec.Version = ch.Version
	}
	setAnnotation(m, clusterv1.UpdateInProgressAnnotation, "")
	setAnnotation(m, runtimev1.PendingHooksAnnotation, "UpdateMachine")
	if err := c.Patch(ctx, m, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("mark machine %s: %w", name, err)
	}
	return nil
}

func (mc *MachineController) complete(ctx context.Context, name string) error {
	m, cfg, infra, err := mc.objects(ctx, name)
	if err != nil {
		return err
	}
	for _, o := range []client.Object{infra, cfg, m} {
		base := o.DeepCopyObject().(client.Object)
		a := o.GetAnnotations()
		delete(a, clusterv1.UpdateInProgressAnnotation)
		delete(a, runtimev1.PendingHooksAnnotation)
		o.SetAnnotations(a)
		if err := mc.Mgmt.Client.Patch(ctx, o, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("complete %T %s: %w", o, name, err)
		}
	}
	return nil
}

func setAnnotation(o client.Object, k, v string) {
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	o.SetAnnotations(a)
}

// call sends one UpdateMachine request built as the machine controller builds it.
func (mc *MachineController) call(ctx context.Context, name string) (HookCall, error) {
	m, cfg, infra, err := mc.objects(ctx, name)
	if err != nil {
		return HookCall{}, err
	}
	desired := &clusterv1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations},
		Spec:       *m.Spec.DeepCopy(),
	}
	cfgU, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cfg)
	if err != nil {
		return HookCall{}, err
	}
	req := &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{
		Machine:               *desired,
		BootstrapConfig:       rawOf(cleanup(&unstructured.Unstructured{Object: cfgU}, bootstrapv1.GroupVersion.String(), "KubeadmConfig")),
		InfrastructureMachine: rawOf(cleanup(infra, infra.GetAPIVersion(), infra.GetKind())),
	}}
	encoded, err := bench.Encode(runtimehooksv1.UpdateMachine, extension.HandlerUpdateMachine, req)
	if err != nil {
		return HookCall{}, err
	}
	resp := &runtimehooksv1.UpdateMachineResponse{}
	start := time.Now()
	if err := mc.Hooks.Do(ctx, encoded, resp); err != nil {
		return HookCall{}, err
	}
	call := HookCall{At: start, Status: resp.Status, Retry: resp.RetryAfterSeconds, Message: resp.Message, Duration: time.Since(start)}
	mc.Called = append(mc.Called, call)
	return call, nil
}

// cleanup keeps what cleanupUnstructured keeps: identity, labels, annotations, spec.
func cleanup(u *unstructured.Unstructured, apiVersion, kind string) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "spec": u.Object["spec"]}}
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetLabels(u.GetLabels())
	out.SetAnnotations(u.GetAnnotations())
	return out
}

func rawOf(u *unstructured.Unstructured) runtime.RawExtension {
	b, _ := json.Marshal(u.Object) // a map of JSON values always encodes
	return runtime.RawExtension{Raw: b}
}
