package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
)

// FleetClustersPerNamespace is how SeedFleet spreads its Clusters: one namespace
// per hundred, as a fleet grouped by region would be.
const FleetClustersPerNamespace = 100

// Fleet OS images the seeded nodes report: most moved to the new one.
const (
	fleetOldImage = "Edge OS 2026.06 (bookworm)"
	fleetNewImage = "Edge OS 2026.12 (trixie)"
)

// FleetNamespace is the namespace of seeded Cluster i.
func FleetNamespace(i int) string { return fmt.Sprintf("fleet-%02d", i/FleetClustersPerNamespace) }

// SeedFleet creates n single-node Clusters, each with its one control-plane
// Machine, as a fleet looks in the middle of a rollout from FromVersion to
// ToVersion: 90 % done, 5 % updating (Cluster API's in-place update in progress),
// 3 % asking for ToVersion with nothing updating them yet, 2 % failed. The Machines carry what Cluster API writes (labels,
// annotations, conditions, nodeRef, nodeInfo with the kubelet version and OS
// image) so that the list `fleet status` reads is the size it would be. It is
// idempotent, and leaves no workload cluster behind: fleet status dials none.
func SeedFleet(ctx context.Context, c client.Client, n int) error {
	for ns := range (n + FleetClustersPerNamespace - 1) / FleetClustersPerNamespace {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: FleetNamespace(ns * FleetClustersPerNamespace),
			Labels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace: %w", err)
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = seedFleetCluster(ctx, c, i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func seedFleetCluster(ctx context.Context, c client.Client, i int) error {
	ns, name := FleetNamespace(i), fmt.Sprintf("store-%04d", i)
	create := func(obj client.Object) error {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s/%s: %w", obj, ns, obj.GetName(), err)
		}
		return nil
	}
	if err := create(&clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			"site": fmt.Sprintf("site-%03d", i/10), "tier": "store", clusterv1.ClusterTopologyOwnedLabel: "",
		}, Annotations: map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}},
		Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: fmt.Sprintf("10.%d.%d.1", i/250, i%250), Port: 6443}},
	}); err != nil {
		return err
	}

	version, kubelet, image := ToVersion, ToVersion, fleetNewImage
	var annotations map[string]string
	var conds []metav1.Condition
	now := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	switch pct := i % 100; {
	case pct < 2: // failed: rolled back to the old kubelet and image
		kubelet, image = FromVersion, fleetOldImage
		conds = append(conds, metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse,
			Reason: inplacev1.ReasonRolledBack, Message: "gate store-pos-health failed: HTTP 503 from http://127.0.0.1:8080/healthz", LastTransitionTime: now})
	case pct < 5: // asks for ToVersion, Cluster API has not called yet
		kubelet, image = FromVersion, fleetOldImage
	case pct < 10: // Cluster API's in-place update in progress
		kubelet, image = FromVersion, fleetOldImage
		annotations = map[string]string{clusterv1.UpdateInProgressAnnotation: ""}
		conds = append(conds, metav1.Condition{Type: clusterv1.MachineUpdatingCondition, Status: metav1.ConditionTrue,
			Reason: clusterv1.MachineInPlaceUpdatingReason, LastTransitionTime: now})
	}
	m := pt.Machine(name+"-cp-"+fmt.Sprintf("%05d", i), version)
	m.TypeMeta = metav1.TypeMeta{}
	m.Namespace = ns
	m.Labels = map[string]string{clusterv1.ClusterNameLabel: name, clusterv1.MachineControlPlaneLabel: "",
		clusterv1.MachineControlPlaneNameLabel: name + "-cp"}
	m.Annotations = annotations
	m.Spec.ClusterName = name
	m.Spec.ReadinessGates = nil
	if err := create(m); err != nil {
		return err
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
		return fmt.Errorf("read Machine %s/%s: %w", ns, m.Name, err)
	}
	for _, t := range []string{clusterv1.AvailableCondition, clusterv1.ReadyCondition, clusterv1.MachineUpToDateCondition,
		clusterv1.MachineBootstrapConfigReadyCondition, clusterv1.MachineInfrastructureReadyCondition, clusterv1.MachineNodeReadyCondition,
		clusterv1.MachineNodeHealthyCondition, clusterv1.MachineHealthCheckSucceededCondition} {
		conds = append(conds, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: now})
	}
	node := fmt.Sprintf("%s-cp-%05d", name, i)
	m.Status = clusterv1.MachineStatus{
		NodeRef:    clusterv1.MachineNodeReference{Name: node},
		Phase:      string(clusterv1.MachinePhaseRunning),
		Conditions: conds,
		Addresses: clusterv1.MachineAddresses{{Type: clusterv1.MachineInternalIP, Address: fmt.Sprintf("10.%d.%d.10", i/250, i%250)},
			{Type: clusterv1.MachineHostName, Address: node}},
		NodeInfo: &corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("%032x", i+1), BootID: fmt.Sprintf("%032x", i+2),
			KernelVersion: "6.12.48-amd64", OSImage: image, ContainerRuntimeVersion: "containerd://2.1.4",
			KubeletVersion: kubelet, OperatingSystem: "linux", Architecture: "amd64"},
	}
	if err := c.Status().Update(ctx, m); err != nil {
		return fmt.Errorf("status of Machine %s/%s: %w", ns, m.Name, err)
	}
	return nil
}

// FleetStatusRun is one timed run of `capi-inplace fleet status`.
type FleetStatusRun struct {
	Wall time.Duration
	// Summary is the table's first line ("1000 clusters: ...").
	Summary string
}

// RunFleetStatus runs `<binary> fleet status -A --kubeconfig <kubeconfig>` and times
// it from process start to exit, as an operator waits for it. Exit code 3 (a
// Cluster is Failed) is an answer, not an error. Like every process of the suite it
// runs in its own process group with a parent-death signal, and a cancelled ctx
// kills that group.
func RunFleetStatus(ctx context.Context, binary, kubeconfig string) (FleetStatusRun, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, "fleet", "status", "-A", "--kubeconfig", kubeconfig)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 3) {
		return FleetStatusRun{}, fmt.Errorf("%s fleet status: %w: %s", binary, err, bytes.TrimSpace(errOut.Bytes()))
	}
	summary, _, _ := bytes.Cut(out.Bytes(), []byte("\n"))
	return FleetStatusRun{Wall: wall, Summary: string(summary)}, nil
}
