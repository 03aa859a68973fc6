package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
	"github.com/capi-inplace/capi-inplace/internal/fleet/ownerread"
	"github.com/capi-inplace/capi-inplace/internal/workload"
)

// Workload reads the Nodes of a workload cluster.
type Workload interface {
	Nodes(ctx context.Context, cluster client.ObjectKey) ([]corev1.Node, error)
}

// Gatherer reads a Snapshot: Clusters and Machines from the management cluster
// (Management, with Cluster API's core v1beta2 types in its scheme) and Nodes from each
// workload cluster (Workload); and, read-only as the coordinator does, the
// MachineDeployments and control planes that the Clusters' fleet records name.
type Gatherer struct {
	Management client.Reader
	Workload   Workload
	// Mapper maps an owner's kind to the version to read it at (the coordinator
	// uses its client's); nil: Management's own when it has one (a client.Client).
	Mapper meta.RESTMapper
}

// ErrClusterNotFound is returned by Gather when the named Cluster does not exist.
var ErrClusterNotFound = errors.New("cluster not found")

// Gather reads the Cluster named cluster in namespace, or every Cluster of namespace
// when cluster is empty (of every namespace when namespace is empty too). Failing to
// read the management cluster is an error; failing to read a workload cluster is not
// (see ClusterSnapshot.WorkloadErr).
func (g Gatherer) Gather(ctx context.Context, namespace, cluster string) (Snapshot, error) {
	s := Snapshot{Namespace: namespace}
	var clusters []clusterv1.Cluster
	if cluster != "" {
		var c clusterv1.Cluster
		if err := g.Management.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cluster}, &c); err != nil {
			if apierrors.IsNotFound(err) {
				return Snapshot{}, fmt.Errorf("%w: %s/%s", ErrClusterNotFound, namespace, cluster)
			}
			return Snapshot{}, fmt.Errorf("get cluster %s/%s: %w", namespace, cluster, err)
		}
		clusters = []clusterv1.Cluster{c}
	} else {
		var list clusterv1.ClusterList
		if err := g.Management.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return Snapshot{}, fmt.Errorf("list clusters in namespace %q: %w", namespace, err)
		}
		clusters = list.Items
	}

	for _, c := range clusters {
		var machines clusterv1.MachineList
		if err := g.Management.List(ctx, &machines, client.InNamespace(c.Namespace),
			client.MatchingLabels{clusterv1.ClusterNameLabel: c.Name}); err != nil {
			return Snapshot{}, fmt.Errorf("list machines of cluster %s/%s: %w", c.Namespace, c.Name, err)
		}
		owners, err := g.ownerSpecs(ctx, &c)
		if err != nil {
			return Snapshot{}, err
		}
		cs := ClusterSnapshot{Cluster: c, Machines: machines.Items, OwnerSpecs: owners}
		if anyNodeRef(machines.Items) {
			nodes, err := g.Workload.Nodes(ctx, client.ObjectKeyFromObject(&c))
			if err != nil {
				cs.WorkloadErr = err
			} else {
				cs.Nodes = make(map[string]*corev1.Node, len(nodes))
				for i := range nodes {
					cs.Nodes[nodes[i].Name] = &nodes[i]
				}
			}
		} else {
			// Nothing to look up: do not dial a control plane that may not exist yet.
			cs.Nodes = map[string]*corev1.Node{}
		}
		s.Clusters = append(s.Clusters, cs)
	}
	return s, nil
}

// ownerSpecs reads the owners the Cluster's fleet record names and keys their
// specs with ownerread.SpecKey, as the coordinator does. An owner
// that is gone is left out. A corrupt record names none (FleetView says why).
func (g Gatherer) ownerSpecs(ctx context.Context, c *clusterv1.Cluster) (map[string]string, error) {
	st, _ := fleet.Decode(c.Annotations[inplacev1.FleetStateAnnotation])
	names := fleet.Owners(st.Failures)
	specs := make(map[string]string, len(names))
	if len(names) == 0 {
		return specs, nil
	}
	mapper := g.Mapper
	if mapper == nil {
		if m, ok := g.Management.(interface{ RESTMapper() meta.RESTMapper }); ok {
			mapper = m.RESTMapper()
		}
	}
	if mapper == nil {
		return nil, errors.New("read the owners of failed Machines: no RESTMapper (set Gatherer.Mapper)")
	}
	for _, name := range names {
		key, found, err := ownerread.SpecKey(ctx, g.Management, mapper, c, name)
		if err != nil {
			return nil, fmt.Errorf("cluster %s/%s: %w", c.Namespace, c.Name, err)
		}
		if !found {
			continue
		}
		specs[name] = key
	}
	return specs, nil
}

func anyNodeRef(machines []clusterv1.Machine) bool {
	for i := range machines {
		if machines[i].Status.NodeRef.IsDefined() {
			return true
		}
	}
	return false
}

// workloadTimeout bounds every request to a workload cluster, so that one unreachable
// cluster cannot stall the whole view.
const workloadTimeout = 10 * time.Second

// KubeconfigWorkload reaches workload clusters the way Cluster API does: with the
// admin kubeconfig in the Secret "<cluster>-kubeconfig" (key "value") next to the Cluster.
type KubeconfigWorkload struct {
	Management client.Reader
	// Timeout bounds each request; zero means 10s.
	Timeout time.Duration
}

// Nodes lists the Nodes of the workload cluster.
func (k KubeconfigWorkload) Nodes(ctx context.Context, cluster client.ObjectKey) ([]corev1.Node, error) {
	data, err := workload.Kubeconfig(ctx, k.Management, cluster)
	if err != nil {
		return nil, err
	}
	timeout := k.Timeout
	if timeout == 0 {
		timeout = workloadTimeout
	}
	cfg, err := workload.RESTConfig(data, cluster, workload.Options{UserAgent: "capi-inplace-status", Timeout: timeout})
	if err != nil {
		return nil, err
	}
	// A typed clientset needs no discovery: one request per look, even in --watch.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for cluster %s: %w", cluster, err)
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes of cluster %s: %w", cluster, err)
	}
	return list.Items, nil
}
