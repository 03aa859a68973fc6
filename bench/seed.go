package bench

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// ClusterObjects seeds one cluster's objects in the management cluster, as CAPI
// would have them mid-rollout: Namespace, Cluster, the <cluster>-kubeconfig Secret
// (pointing at the same API server, which plays the workload cluster), the Secret a
// file's contentFrom names, and per machine a Machine with status.nodeRef, its
// KubeadmConfig and DevMachine, and the workload Node (Ready, old kubelet version).
type ClusterObjects struct {
	Namespace, Cluster string
	Machines           int
	Kubeconfig         []byte
	// NoInfraObjects skips the DevMachines (for API servers without the Dev
	// provider's CRDs). UpdateMachine then refuses the Machines: the coordinator
	// reads each Machine's stored infrastructure machine.
	NoInfraObjects bool
}

// NodeName is the workload Node of machine i of the cluster.
func (o ClusterObjects) NodeName(i int) string {
	return fmt.Sprintf("%s-%s-n%03d", o.Namespace, o.Cluster, i)
}

// MachineName is machine i's name.
func (o ClusterObjects) MachineName(i int) string { return fmt.Sprintf("%s-md-0-%03d", o.Cluster, i) }

// Create creates the objects (idempotent) and returns the Machines.
func (o ClusterObjects) Create(ctx context.Context, c client.Client) ([]*clusterv1.Machine, error) {
	create := func(obj client.Object) error {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
		return nil
	}
	for _, ns := range []string{o.Namespace, inplacev1.AgentNamespace} {
		// Opted in, as the coordinator requires of a Machine's namespace.
		labels := map[string]string{inplacev1.NamespaceEnabledLabel: "true"}
		if err := create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}); err != nil {
			return nil, err
		}
	}
	for _, obj := range []client.Object{
		&clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Cluster},
			Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Cluster + "-kubeconfig",
				Labels: map[string]string{clusterv1.ClusterNameLabel: o.Cluster}},
			Data: map[string][]byte{"value": o.Kubeconfig},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: "audit-policy"},
			Data:       map[string][]byte{"policy.yaml": []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")},
		},
	} {
		if err := create(obj); err != nil {
			return nil, err
		}
	}
	machines := make([]*clusterv1.Machine, o.Machines)
	errs := make([]error, o.Machines)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range o.Machines {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			machines[i], errs[i] = o.createMachine(ctx, c, create, i)
		}()
	}
	wg.Wait()
	return machines, errors.Join(errs...)
}

func (o ClusterObjects) createMachine(ctx context.Context, c client.Client, create func(client.Object) error, i int) (*clusterv1.Machine, error) {
	name, node := o.MachineName(i), o.NodeName(i)
	// The objects as Cluster API leaves them when it calls UpdateMachine: the owner
	// controller wrote the desired KubeadmConfig and marked all three objects.
	inPlace := map[string]string{clusterv1.UpdateInProgressAnnotation: ""}
	cfg := pt.KubeadmConfig(name, desiredSpec())
	cfg.Namespace = o.Namespace
	cfg.Annotations = inPlace
	infra := pt.DevMachine(name, pt.DevMachineSpec(""))
	infra.SetNamespace(o.Namespace)
	infra.SetLabels(map[string]string{clusterv1.ClusterNameLabel: o.Cluster})
	infra.SetAnnotations(inPlace)
	// The key an agent would publish: the coordinator seals each plan to it. The
	// bench plays the agent's statuses and never opens the plan.
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("agent key: %w", err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"kubernetes.io/hostname": node},
		Annotations: map[string]string{inplacev1.AgentKeyAnnotation: protocol.FormatAgentKey(key.PublicKey())}}}
	objs := []client.Object{cfg, n}
	if !o.NoInfraObjects {
		objs = append(objs, infra)
	}
	for _, obj := range objs {
		if err := create(obj); err != nil {
			return nil, err
		}
	}
	n.Status = corev1.NodeStatus{
		NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: FromVersion},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
	}
	if err := c.Status().Update(ctx, n); err != nil {
		return nil, fmt.Errorf("node %s status: %w", node, err)
	}
	m := WorkerMachine(o.Namespace, o.Cluster, name, ToVersion)
	m.TypeMeta = metav1.TypeMeta{}
	m.Annotations = map[string]string{clusterv1.UpdateInProgressAnnotation: "", runtimev1.PendingHooksAnnotation: "UpdateMachine"}
	if err := create(m); err != nil {
		return nil, err
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
		return nil, fmt.Errorf("read machine %s: %w", name, err)
	}
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
	if err := c.Status().Update(ctx, m); err != nil {
		return nil, fmt.Errorf("machine %s nodeRef: %w", name, err)
	}
	return m, nil
}

// DriveToWaiting calls UpdateMachine for each machine until the coordinator has
// cordoned, drained and published its plan, then plays the agent's first report
// (Applying) so that every later call is the steady-state "waiting for the agent"
// path: all its reads, no writes.
func DriveToWaiting(ctx context.Context, hc *HookClient, c client.Client, machines []*clusterv1.Machine, calls []Call) error {
	for i, m := range machines {
		var a Answer
		for attempt := 0; ; attempt++ {
			if err := hc.Do(ctx, calls[i], &a); err != nil {
				return fmt.Errorf("UpdateMachine %s: %w", m.Name, err)
			}
			if strings.HasPrefix(a.Message, "step 5/6") {
				break
			}
			if attempt > 10 || a.Status != "Success" {
				return fmt.Errorf("UpdateMachine %s did not reach step 5/6: %s %q", m.Name, a.Status, a.Message)
			}
			time.Sleep(50 * time.Millisecond)
		}
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, n); err != nil {
			return fmt.Errorf("read node of %s: %w", m.Name, err)
		}
		hash := n.Annotations[inplacev1.DesiredPlanAnnotation]
		if hash == "" {
			return fmt.Errorf("node %s has no desired plan after %q", n.Name, a.Message)
		}
		if err := reportStatus(ctx, c, n.Name, protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseApplying, Step: 2, Steps: 4, Action: "files"}); err != nil {
			return err
		}
		// A call in an update's first 30 s lingers up to 1.5 s for the agent (the
		// rollout section measures what that buys); the hook sections measure the
		// cost of one call, so the updates are dated as long-running ones.
		if err := backdateUpdate(ctx, c, n.Name, 5*time.Minute); err != nil {
			return err
		}
		if err := hc.Do(ctx, calls[i], &a); err != nil {
			return fmt.Errorf("UpdateMachine %s: %w", m.Name, err)
		}
		if !strings.Contains(a.Message, "Applying") {
			return fmt.Errorf("UpdateMachine %s after the agent's report: %s %q", m.Name, a.Status, a.Message)
		}
	}
	return nil
}

// backdateUpdate moves the coordinator's update-started marker of a node into the past.
func backdateUpdate(ctx context.Context, c client.Client, node string, age time.Duration) error {
	started := time.Now().Add(-age).UTC().Format(time.RFC3339)
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{inplacev1.UpdateStartedAnnotation: started}}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, data)); err != nil {
		return fmt.Errorf("backdate update of node %s: %w", node, err)
	}
	return nil
}

// reportStatus writes the agent's annotations on its node, as the agent does.
func reportStatus(ctx context.Context, c client.Client, node string, st protocol.NodeStatus) error {
	v, err := protocol.EncodeStatus(st)
	if err != nil {
		return err
	}
	patch := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		inplacev1.StatusAnnotation: v, inplacev1.StateAnnotation: string(st.Phase),
	}}}}
	data, err := patch.MarshalJSON()
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, data)); err != nil {
		return fmt.Errorf("report status on node %s: %w", node, err)
	}
	return nil
}
