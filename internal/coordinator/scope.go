package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// loadScope reads everything one call needs besides the desired objects. ok is
// false when the call must answer right away with out; the scope is then nil, or
// as far as it was read when the workload cluster did not answer (out.offline).
func (c *Coordinator) loadScope(ctx context.Context, desired desiredObjects) (*scope, Outcome, bool) {
	mkey := client.ObjectKeyFromObject(desired.stored)
	s := &scope{machine: desired.machine, stored: desired.stored}

	nodeName := desired.stored.Status.NodeRef.Name
	if nodeName == "" {
		return nil, inProgress(retryNoNodeRef, stepMsg(stepAgent, "waiting for Machine %s to report its node (status.nodeRef)", mkey)), false
	}
	// The cluster comes from the stored Machine, never from a request.
	clusterName := clusterNameOf(desired.stored)
	if clusterName == "" {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("Machine %s names no Cluster", mkey)), false
	}
	s.clusterKey = client.ObjectKey{Namespace: mkey.Namespace, Name: clusterName}
	read := desired.cluster
	if read == nil || read.cluster == nil {
		read = &clusterRead{cluster: &clusterv1.Cluster{}}
		read.err = c.opts.Client.Get(ctx, s.clusterKey, read.cluster)
	}
	if err := read.err; err != nil {
		return nil, retryable(CauseManagementAPI, fmt.Sprintf("read Cluster %s: %v", s.clusterKey, err)), false
	}
	s.cluster = read.cluster
	if out, paused := capiPaused(s.cluster, desired.stored); paused {
		return nil, out, false
	}

	wc, err := c.opts.Clusters.Get(ctx, s.clusterKey)
	if err != nil {
		c.opts.Clusters.Invalidate(s.clusterKey)
		out := inProgress(retryUnreachable, stepMsg(stepUnknown, "waiting for a connection to cluster %s: %v", s.clusterKey.Name, err))
		out.offline = true
		return s, out, false
	}
	s.wc = wc
	s.node = &corev1.Node{}
	if err := wc.Client.Get(ctx, client.ObjectKey{Name: nodeName}, s.node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, retryable(CauseNodeMissing, fmt.Sprintf("node %s of Machine %s does not exist in cluster %s", nodeName, mkey, s.clusterKey.Name)), false
		}
		return s, c.workloadFailure(s, stepUnknown, fmt.Errorf("read node %s: %w", nodeName, err)), false
	}

	published, err := c.loadPublished(ctx, s)
	if err != nil {
		return s, c.workloadFailure(s, stepUnknown, err), false
	}
	mark(ctx, "node")
	in, err := c.planInput(ctx, s, desired)
	if err != nil {
		if errors.Is(err, nodeplan.ErrInput) {
			return nil, retryable(CauseInvalidInput, fmt.Sprintf("build plan for node %s: %v", nodeName, err)), false
		}
		return s, c.workloadFailure(s, stepUnknown, err), false
	}
	built, err := nodeplan.Build(in)
	if err != nil {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("build plan for node %s: %v", nodeName, err)), false
	}
	if err := c.addRegistryCredentials(ctx, built, s.machine.Namespace); err != nil {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("build plan for node %s: %v", nodeName, err)), false
	}
	// A retry builds the plan again (RetriedPlanAnnotation) instead of keeping the
	// one it withdrew.
	if published != nil {
		s.published = published.PlanHash
	}
	s.retried = s.published != "" && desired.stored.Annotations[inplacev1.RetriedPlanAnnotation] == s.published
	if s.retried {
		s.plan = nodeplan.PinRetried(built, published)
	} else {
		s.plan = nodeplan.PinPublished(built, published)
	}
	if s.planJSON, err = protocol.EncodePlan(s.plan); err != nil {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("encode plan for node %s: %v", nodeName, err)), false
	}
	if s.planHash, err = s.plan.Hash(); err != nil {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("hash plan for node %s: %v", nodeName, err)), false
	}
	if s.desiredState, err = s.plan.DesiredState(); err != nil {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("hash plan for node %s: %v", nodeName, err)), false
	}
	if key, err := nodeplan.AgentKey(s.node.Annotations); err == nil && !s.retried && nodeplan.KeepPublished(published, nodeName, s.desiredState, key) {
		s.planHash = published.PlanHash
	}
	return s, Outcome{}, true
}

// loadPublished reads the node's plan Secret and the header of the sealed plan in it
// (the coordinator cannot open it); an undecodable plan counts as none (it is
// replaced by the next publish).
func (c *Coordinator) loadPublished(ctx context.Context, s *scope) (*protocol.SealedPlan, error) {
	sec := &corev1.Secret{}
	err := s.wc.Client.Get(ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName(s.node.Name)}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read plan secret of node %s: %w", s.node.Name, err)
	}
	s.planSecret = sec
	return nodeplan.Published(sec.Data[inplacev1.PlanSecretDataKey]), nil
}

// planInput gathers the inputs of nodeplan.Build. Errors wrapping nodeplan.ErrInput
// are about the desired objects; others are I/O.
func (c *Coordinator) planInput(ctx context.Context, s *scope, desired desiredObjects) (nodeplan.Input, error) {
	in := nodeplan.Input{
		Machine:  s.machine,
		NodeName: s.node.Name,
		Secrets:  map[string]map[string][]byte{},
		Node:     nodeplan.NodeFacts{KubeletVersion: s.node.Status.NodeInfo.KubeletVersion},
	}
	if c.opts.Preflight != nil {
		in.IgnorePreflightErrors = c.opts.Preflight.IgnorePreflightErrors(s.machine.Namespace, s.machine.Labels)
		in.EtcdRestore = c.opts.Preflight.EtcdRestore()
	}
	cfg, err := decodeKubeadmConfig(desired.bootstrap)
	if err != nil {
		return in, err
	}
	in.KubeadmConfig = cfg
	if in.Secrets, err = referencedSecrets(ctx, c.opts.Client, s.machine.Namespace, cfg); err != nil {
		return in, err
	}
	if nodeplan.NeedsControlPlaneVersion(cfg) {
		if in.ControlPlaneVersion, err = c.controlPlaneVersion(ctx, s.cluster); err != nil {
			return in, err
		}
	}
	if c.opts.OSImages != nil {
		if infra := desired.infra; infra != nil {
			if in.OS, err = c.opts.OSImages.ResolveOSImage(infra); err != nil {
				return in, fmt.Errorf("%w: resolve OS image of %s %s: %w", nodeplan.ErrInput, infra.GetKind(), infra.GetName(), err)
			}
		}
	}
	if in.Binaries, err = kubernetesBinaries(c.opts.Binaries, s.machine, s.node); err != nil {
		return in, err
	}
	if in.Gates, err = userGates(c.opts.Gates, s.machine); err != nil {
		return in, err
	}
	in.OSBackends = poolOSBackends(c.opts.NodeConfig, s.machine)
	// An image declared in the KubeadmConfig wins over the infrastructure's: it is
	// the one that can change in place on every provider.
	if declared, err := declaredOSImage(c.opts.DeclaredOSImages, cfg, s.machine); err != nil {
		return in, err
	} else if declared != nil {
		in.OS = declared
	}
	target := s.machine.Spec.Version
	if nodeplan.RoleOf(s.machine) == protocol.RoleControlPlane && target != "" && !nodeplan.SameVersion(target, in.Node.KubeletVersion) {
		nodes := &corev1.NodeList{}
		if err := s.wc.Client.List(ctx, nodes, client.HasLabels{controlPlaneNodeLabel}); err != nil {
			return in, fmt.Errorf("list control-plane nodes: %w", err)
		}
		for _, n := range nodes.Items {
			if n.Name != s.node.Name && nodeplan.SameVersion(target, n.Status.NodeInfo.KubeletVersion) {
				in.Node.ControlPlaneAtTarget = true
			}
		}
	} else {
		// Workers follow the control plane; their action is upgrade-node either way.
		in.Node.ControlPlaneAtTarget = true
	}
	return in, nil
}

func (c *Coordinator) controlPlaneVersion(ctx context.Context, cluster *clusterv1.Cluster) (string, error) {
	ref := cluster.Spec.ControlPlaneRef
	if !ref.IsDefined() {
		return "", nil
	}
	mapping, err := c.opts.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		return "", fmt.Errorf("%w: map control plane kind %s: %w", nodeplan.ErrInput, ref.Kind, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := c.opts.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ref.Name}, u); err != nil {
		return "", fmt.Errorf("%w: read control plane %s %s: %w", nodeplan.ErrInput, ref.Kind, ref.Name, err)
	}
	v, _, _ := unstructured.NestedString(u.Object, "spec", "version")
	return v, nil
}

func toUnstructured(raw runtime.RawExtension) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	switch {
	case len(raw.Raw) > 0:
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			return nil, err
		}
	case raw.Object != nil:
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(raw.Object)
		if err != nil {
			return nil, err
		}
		u.Object = m
	default:
		return nil, nil
	}
	return u, nil
}

// decodeKubeadmConfig returns the desired KubeadmConfig, or nil when the Machine is
// bootstrapped by something else (only version and OS are planned then).
func decodeKubeadmConfig(u *unstructured.Unstructured) (*bootstrapv1.KubeadmConfig, error) {
	if u == nil || u.GetKind() != "KubeadmConfig" {
		return nil, nil
	}
	if gv := u.GroupVersionKind().GroupVersion(); gv != bootstrapv1.GroupVersion {
		return nil, fmt.Errorf("%w: bootstrap config %s is %s, want %s", nodeplan.ErrInput, u.GetName(), gv, bootstrapv1.GroupVersion)
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("%w: bootstrap config: %w", nodeplan.ErrInput, err)
	}
	cfg := &bootstrapv1.KubeadmConfig{}
	if err := json.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("%w: bootstrap config %s: %w", nodeplan.ErrInput, u.GetName(), err)
	}
	return cfg, nil
}

// observe turns the scope into the pure Observation; now dates the update's start marker.
func observe(s *scope, now time.Time) Observation {
	ann := s.node.GetAnnotations()
	o := Observation{
		Node:           s.node.Name,
		PlanHash:       s.planHash,
		DesiredState:   s.desiredState,
		TargetVersion:  s.machine.Spec.Version,
		Published:      ann[inplacev1.DesiredPlanAnnotation],
		CurrentPlan:    ann[inplacev1.CurrentPlanAnnotation],
		KubeletVersion: s.node.Status.NodeInfo.KubeletVersion,
		Paused:         s.cluster.Annotations[inplacev1.PausedAnnotation] == "true",
		Started:        ann[inplacev1.UpdateStartedAnnotation] != "",
		NotPickedUp:    ann[inplacev1.PlanNotPickedUpAnnotation],
	}
	if started, err := time.Parse(time.RFC3339, ann[inplacev1.UpdateStartedAnnotation]); err == nil && now.After(started) {
		o.Elapsed = now.Sub(started)
	}
	if s.plan != nil && s.plan.NeedsStaging() && o.Published != s.planHash {
		o.NeedsStaging = true
		if st, err := protocol.DecodeStagingStatus(ann[inplacev1.StagingStatusAnnotation]); err == nil &&
			st.PlanHash == s.planHash && ann[inplacev1.StagePlanAnnotation] == s.planHash {
			o.Staging = &st
		}
	}
	if v, ok := ann[inplacev1.StatusAnnotation]; ok && v != "" {
		st, err := protocol.DecodeStatus(v)
		if err != nil {
			o.StatusErr = err
		} else {
			o.Status = &st
		}
	}
	for _, cond := range s.node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			o.Ready = cond.Status == corev1.ConditionTrue
		}
	}
	return o
}
