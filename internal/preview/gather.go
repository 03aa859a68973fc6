package preview

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrClusterNotFound is returned by Gather when the named Cluster does not exist.
var ErrClusterNotFound = errors.New("cluster not found")

// Gatherer reads Snapshots from the management cluster. It holds a client.Reader, so
// it cannot write; its scheme must know Cluster API's core and KubeadmControlPlane
// v1beta2 types (bootstrap and infrastructure objects are read unstructured).
type Gatherer struct {
	Reader client.Reader
}

// Gather reads the live Snapshot of a Cluster: its KubeadmControlPlane,
// MachineDeployments, MachineSets and Machines (by the cluster-name label), and every
// bootstrap config, infrastructure machine and template they reference. It also
// returns notes about what it cannot preview. A referenced object that does not
// exist is left out; Build reports it on the Machines that need it.
func (g Gatherer) Gather(ctx context.Context, namespace, name string) (Snapshot, []string, error) {
	var notes []string
	s := Snapshot{Objects: map[ObjectKey]*unstructured.Unstructured{}}
	cluster := &clusterv1.Cluster{}
	if err := g.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return Snapshot{}, nil, fmt.Errorf("%w: %s/%s", ErrClusterNotFound, namespace, name)
		}
		return Snapshot{}, nil, fmt.Errorf("get cluster %s/%s: %w", namespace, name, err)
	}
	s.Cluster = cluster

	if ref := cluster.Spec.ControlPlaneRef; ref.IsDefined() {
		if ref.APIGroup == controlplanev1.GroupVersion.Group && ref.Kind == "KubeadmControlPlane" {
			kcp := &controlplanev1.KubeadmControlPlane{}
			err := g.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, kcp)
			switch {
			case apierrors.IsNotFound(err):
				notes = append(notes, fmt.Sprintf("the Cluster's KubeadmControlPlane %s does not exist", ref.Name))
			case err != nil:
				return Snapshot{}, nil, fmt.Errorf("get KubeadmControlPlane %s/%s: %w", namespace, ref.Name, err)
			default:
				s.ControlPlane = kcp
			}
		} else {
			notes = append(notes, fmt.Sprintf("the control plane is a %s, not a KubeadmControlPlane: its Machines are not previewed", ref.Kind))
		}
	}

	byCluster := []client.ListOption{client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: name}}
	mds := &clusterv1.MachineDeploymentList{}
	if err := g.Reader.List(ctx, mds, byCluster...); err != nil {
		return Snapshot{}, nil, fmt.Errorf("list MachineDeployments of cluster %s/%s: %w", namespace, name, err)
	}
	s.MachineDeployments = mds.Items
	mss := &clusterv1.MachineSetList{}
	if err := g.Reader.List(ctx, mss, byCluster...); err != nil {
		return Snapshot{}, nil, fmt.Errorf("list MachineSets of cluster %s/%s: %w", namespace, name, err)
	}
	s.MachineSets = mss.Items
	machines := &clusterv1.MachineList{}
	if err := g.Reader.List(ctx, machines, byCluster...); err != nil {
		return Snapshot{}, nil, fmt.Errorf("list Machines of cluster %s/%s: %w", namespace, name, err)
	}
	s.Machines = machines.Items

	if err := g.Fetch(ctx, &s, s.Refs()); err != nil {
		return Snapshot{}, nil, err
	}
	return s, notes, nil
}

// Fetch reads the objects with the given keys that s does not hold yet into
// s.Objects; one that does not exist is left out.
func (g Gatherer) Fetch(ctx context.Context, s *Snapshot, keys []ObjectKey) error {
	// The served version of a kind comes from its CRD's contract labels, as Cluster API
	// finds it; read it once per kind, then Get the other objects directly.
	versions := map[schema.GroupKind]string{}
	for _, k := range keys {
		if _, ok := s.Objects[k]; ok {
			continue
		}
		var (
			u   *unstructured.Unstructured
			err error
		)
		gk := schema.GroupKind{Group: k.Group, Kind: k.Kind}
		if v, known := versions[gk]; known {
			u = &unstructured.Unstructured{}
			u.SetGroupVersionKind(gk.WithVersion(v))
			err = g.Reader.Get(ctx, client.ObjectKey{Namespace: s.Cluster.Namespace, Name: k.Name}, u)
		} else {
			ref := clusterv1.ContractVersionedObjectReference{APIGroup: k.Group, Kind: k.Kind, Name: k.Name}
			u, err = external.GetObjectFromContractVersionedRef(ctx, g.Reader, ref, s.Cluster.Namespace)
			if err == nil {
				versions[gk] = u.GroupVersionKind().Version
			}
		}
		switch {
		case apierrors.IsNotFound(err):
			// The object, or its kind's CRD, does not exist.
			continue
		case err != nil:
			return fmt.Errorf("read %s: %w", k, err)
		}
		s.Objects[k] = u
	}
	return nil
}

// Propose applies a change to a live Snapshot, first reading (into live) the objects
// the changed owners reference that neither the live Snapshot nor the change holds,
// e.g. an existing template a MachineDeployment now points at.
func (g Gatherer) Propose(ctx context.Context, live *Snapshot, change []*unstructured.Unstructured) (Snapshot, []string, error) {
	proposed, notes, err := Apply(*live, change)
	if err != nil {
		return Snapshot{}, nil, err
	}
	var missing []ObjectKey
	for _, k := range proposed.Refs() {
		if _, ok := proposed.Objects[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		// Nothing to read: the first merge is the answer (the guard proposes on every
		// admission request; a second merge is a second copy of the whole Snapshot).
		return proposed, notes, nil
	}
	if err := g.Fetch(ctx, live, missing); err != nil {
		return Snapshot{}, nil, err
	}
	return Apply(*live, change)
}
