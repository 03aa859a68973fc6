package preview

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/secretbudget"
)

// ErrClusterNotFound is returned by Gather when the named Cluster does not exist.
var ErrClusterNotFound = errors.New("cluster not found")

// Gatherer reads Snapshots from the management cluster. It holds a client.Reader, so
// it cannot write; its scheme must know Cluster API's core and KubeadmControlPlane
// v1beta2 types (bootstrap and infrastructure objects are read unstructured).
type Gatherer struct {
	Reader client.Reader
	// Upgrades answers a ClusterClass's GenerateUpgradePlan extension when it is
	// capi-inplace's own (a chained upgrade); nil: a class that names one is planned
	// by the topology version alone.
	Upgrades *ChainedUpgrades
	// Secrets, when set, reads the Secrets the desired KubeadmConfigs reference, so
	// that Build counts them against the budget the CanUpdate hooks refuse by
	// (secretbudget; one Secret body at a time, none kept). nil: not counted.
	Secrets client.Reader
	// SecretsOptional makes a Secret the reader may not read (Forbidden) a note,
	// with the Secrets left uncounted, instead of an error: plan run by a user who
	// may not read Secrets. The guard leaves it false: it fails closed.
	SecretsOptional bool
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
	note, err := g.readSecretSizes(ctx, &s)
	if err != nil {
		return Snapshot{}, nil, err
	}
	return s, append(notes, note...), nil
}

// readSecretSizes records in s.SecretSizes the sizes of the Secrets its desired
// KubeadmConfigs reference (budgetSpecs), under the budget, reading only those it
// does not hold yet; nothing without g.Secrets.
func (g Gatherer) readSecretSizes(ctx context.Context, s *Snapshot) ([]string, error) {
	if g.Secrets == nil || s.Cluster == nil {
		return nil, nil
	}
	specs, err := budgetSpecs(*s)
	if err != nil {
		return nil, err
	}
	if s.SecretSizes == nil {
		s.SecretSizes = secretbudget.Sizes{}
	}
	for _, spec := range specs {
		err := s.SecretSizes.Read(ctx, g.Secrets, s.Cluster.Namespace, spec)
		switch {
		case g.SecretsOptional && apierrors.IsForbidden(err):
			s.SecretSizes = nil
			return []string{fmt.Sprintf("the Secrets the KubeadmConfigs reference could not be read (%v): they are not counted against the %d-byte budget the CanUpdate hooks refuse by", err, secretbudget.MaxBytes)}, nil
		case err != nil:
			return nil, fmt.Errorf("count the Secrets the KubeadmConfigs reference: %w", err)
		}
	}
	return nil, nil
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

// Proposal is a change applied to a live Snapshot.
type Proposal struct {
	Snapshot Snapshot
	// Notes are for the operator.
	Notes []string
	// TopologyFallback, when set, says why a Cluster.spec.topology change could not be
	// turned into the topology controller's writes: the change is planned by its
	// topology version alone (set on the KubeadmControlPlane and MachineDeployments).
	TopologyFallback *TopologyFallbackError
}

// Propose applies a change to a live Snapshot (ProposeChange without the fallback).
func (g Gatherer) Propose(ctx context.Context, live *Snapshot, change []*unstructured.Unstructured) (Snapshot, []string, error) {
	p, err := g.ProposeChange(ctx, live, change)
	return p.Snapshot, p.Notes, err
}

// ProposeChange applies a change to a live Snapshot, first reading (into live) the
// objects the changed owners reference that neither the live Snapshot nor the change
// holds, e.g. an existing template a MachineDeployment now points at. A change of a
// ClusterClass Cluster's spec.topology brings the writes the topology controller
// derives from it (topologyChanges: Cluster API's desired-state generator, read-only);
// when they cannot be computed, the topology version alone moves the
// KubeadmControlPlane's and MachineDeployments' versions, and TopologyFallback says why.
func (g Gatherer) ProposeChange(ctx context.Context, live *Snapshot, change []*unstructured.Unstructured) (Proposal, error) {
	proposed, notes, err := Apply(*live, change)
	if err != nil {
		return Proposal{}, err
	}
	var (
		fallback *TopologyFallbackError
		derived  bool
	)
	if changesTopology(live, proposed, change) {
		changes, ok, err := g.topologyChanges(ctx, *live, live.Cluster, proposed.Cluster)
		switch {
		case err != nil:
			fallback = &TopologyFallbackError{Err: err}
			notes = append(notes, fallback.Error())
		case ok:
			derived = true
			change = withDerived(change, changes)
			if proposed, notes, err = apply(*live, change, true); err != nil {
				return Proposal{}, err
			}
		}
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
		note, err := g.proposedSecretSizes(ctx, live, &proposed)
		if err != nil {
			return Proposal{}, err
		}
		return Proposal{Snapshot: proposed, Notes: append(notes, note...), TopologyFallback: fallback}, nil
	}
	if err := g.Fetch(ctx, live, missing); err != nil {
		return Proposal{}, err
	}
	proposed, notes2, err := apply(*live, change, derived)
	if err != nil {
		return Proposal{}, err
	}
	if fallback != nil {
		notes2 = append(notes2, fallback.Error())
	}
	note, err := g.proposedSecretSizes(ctx, live, &proposed)
	if err != nil {
		return Proposal{}, err
	}
	return Proposal{Snapshot: proposed, Notes: append(notes2, note...), TopologyFallback: fallback}, nil
}

// proposedSecretSizes adds to proposed the sizes of the Secrets the change makes
// its desired KubeadmConfigs reference, when Gather counted live's (a Secret the
// reader may not read left them uncounted, with Gather's note).
func (g Gatherer) proposedSecretSizes(ctx context.Context, live *Snapshot, proposed *Snapshot) ([]string, error) {
	if live.SecretSizes == nil {
		return nil, nil
	}
	return g.readSecretSizes(ctx, proposed)
}

// changesTopology reports whether change holds the Cluster and changes its
// spec.topology.
func changesTopology(live *Snapshot, proposed Snapshot, change []*unstructured.Unstructured) bool {
	if live.Cluster == nil || proposed.Cluster == nil || !slices.ContainsFunc(change, func(u *unstructured.Unstructured) bool {
		return isKind(u, clusterv1.GroupVersion.Group, "Cluster")
	}) {
		return false
	}
	return !reflect.DeepEqual(live.Cluster.Spec.Topology, proposed.Cluster.Spec.Topology)
}

// withDerived places the topology controller's writes after the Cluster and before
// the change's other objects, so that an object named in the change wins.
func withDerived(change, derived []*unstructured.Unstructured) []*unstructured.Unstructured {
	var clusters, rest []*unstructured.Unstructured
	for _, u := range change {
		if isKind(u, clusterv1.GroupVersion.Group, "Cluster") {
			clusters = append(clusters, u)
		} else {
			rest = append(rest, u)
		}
	}
	return slices.Concat(clusters, derived, rest)
}
