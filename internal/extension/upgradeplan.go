package extension

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/planner"
)

const hookGenerateUpgradePlan = "GenerateUpgradePlan"

// MessageNoClusterReader is GenerateUpgradePlan's Failure message when the
// handlers have no management-cluster reader.
const MessageNoClusterReader = "GenerateUpgradePlan needs to read the Cluster, its ClusterClass and its namespace; no management-cluster reader is configured"

// ErrUnknownCluster is returned by an UpgradePlanReader for a Cluster that does
// not exist (or is not a ClusterClass cluster).
var ErrUnknownCluster = errors.New("unknown cluster")

// UpgradeContext is what a GenerateUpgradePlan answer depends on besides the
// request, read from the management cluster as stored (hooks are triggers:
// nothing in the request body decides).
type UpgradeContext struct {
	// OptedIn: the Cluster's namespace carries inplacev1.NamespaceEnabledLabel=true.
	OptedIn bool
	// ClassVersions is the ClusterClass's spec.kubernetesVersions.
	ClassVersions []string
}

// UpgradePlanReader reads a Cluster's UpgradeContext.
type UpgradePlanReader interface {
	ReadUpgradeContext(ctx context.Context, namespace, name string) (UpgradeContext, error)
}

// NewUpgradePlanReader reads through a management-cluster client (the Cluster,
// its ClusterClass and its namespace: get only).
func NewUpgradePlanReader(c client.Reader) UpgradePlanReader { return clientUpgradeReader{c: c} }

type clientUpgradeReader struct{ c client.Reader }

func (r clientUpgradeReader) ReadUpgradeContext(ctx context.Context, namespace, name string) (UpgradeContext, error) {
	cluster := &clusterv1.Cluster{}
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return UpgradeContext{}, fmt.Errorf("%w: Cluster %s/%s does not exist", ErrUnknownCluster, namespace, name)
		}
		return UpgradeContext{}, fmt.Errorf("read Cluster %s/%s: %w", namespace, name, err)
	}
	if !cluster.Spec.Topology.IsDefined() || cluster.Spec.Topology.ClassRef.Name == "" {
		return UpgradeContext{}, fmt.Errorf("%w: Cluster %s/%s has no ClusterClass topology", ErrUnknownCluster, namespace, name)
	}
	ref := cluster.Spec.Topology.ClassRef
	classNS := ref.Namespace
	if classNS == "" {
		classNS = namespace
	}
	class := &clusterv1.ClusterClass{}
	if err := r.c.Get(ctx, client.ObjectKey{Namespace: classNS, Name: ref.Name}, class); err != nil {
		return UpgradeContext{}, fmt.Errorf("read ClusterClass %s/%s of Cluster %s/%s: %w", classNS, ref.Name, namespace, name, err)
	}
	ns := &corev1.Namespace{}
	if err := r.c.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return UpgradeContext{}, fmt.Errorf("read namespace %s: %w", namespace, err)
	}
	return UpgradeContext{
		OptedIn:       ns.Labels[inplacev1.NamespaceEnabledLabel] == "true",
		ClassVersions: class.Spec.KubernetesVersions,
	}, nil
}

// DoGenerateUpgradePlan answers GenerateUpgradePlan (Cluster API's chained
// upgrades, ClusterClass spec.upgrade.external.generateUpgradePlanExtension). For
// a cluster that opted in, control plane and workers step at every minor, so each
// worker step is one minor that kubeadm and the agent apply in place (Cluster API's
// own plan would move workers up to three minors at once, which the planner
// refuses, and every worker would be replaced). A cluster that did not opt in (its
// namespace has no opt-in label, or the ExtensionConfig disables in-place updates)
// gets the plan Cluster API computes without the hook.
func (h *Handlers) DoGenerateUpgradePlan(ctx context.Context, req *runtimehooksv1.GenerateUpgradePlanRequest, resp *runtimehooksv1.GenerateUpgradePlanResponse) {
	start := time.Now()
	log := ctrl.LoggerFrom(ctx).WithValues("hook", hookGenerateUpgradePlan, "Cluster", klog.KRef(req.Cluster.Namespace, req.Cluster.Name))
	defer h.finish(ctx, hookGenerateUpgradePlan, start, resp, func() { *resp = runtimehooksv1.GenerateUpgradePlanResponse{} })

	plan, stepped, err := h.computeGenerateUpgradePlan(ctx, req)
	if err != nil {
		fail(resp, fmt.Errorf("%s: %w", hookGenerateUpgradePlan, err))
		return
	}
	resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
	resp.ControlPlaneUpgrades = upgradeSteps(plan.ControlPlane)
	resp.WorkersUpgrades = upgradeSteps(plan.Workers)
	if stepped {
		resp.SetMessage("control plane and workers step at every minor (in place)")
	} else {
		resp.SetMessage("the cluster did not opt in to in-place updates: the workers' plan is left to Cluster API")
	}
	log.Info("Answered upgrade plan", "steppedWorkers", stepped, "controlPlane", plan.ControlPlane, "workers", plan.Workers)
}

func (h *Handlers) computeGenerateUpgradePlan(ctx context.Context, req *runtimehooksv1.GenerateUpgradePlanRequest) (planner.UpgradePlan, bool, error) {
	if err := checkRequestKind(req.Kind, req.APIVersion, "GenerateUpgradePlanRequest"); err != nil {
		return planner.UpgradePlan{}, false, err
	}
	if req.Cluster.Name == "" || req.Cluster.Namespace == "" {
		return planner.UpgradePlan{}, false, fmt.Errorf("%w: the request's cluster has no name or namespace", planner.ErrMalformed)
	}
	if h.upgrades == nil {
		return planner.UpgradePlan{}, false, errors.New(MessageNoClusterReader)
	}
	uc, err := h.upgrades.ReadUpgradeContext(ctx, req.Cluster.Namespace, req.Cluster.Name)
	if err != nil {
		return planner.UpgradePlan{}, false, err
	}
	in := planner.ChainedUpgradeInput(req.FromControlPlaneKubernetesVersion, req.FromWorkersKubernetesVersion, req.ToKubernetesVersion,
		uc.ClassVersions, uc.OptedIn, req.GetSettings())
	plan, err := h.planner.UpgradePlan(in)
	return plan, in.StepWorkers, err
}

func upgradeSteps(versions []string) []runtimehooksv1.UpgradeStep {
	if len(versions) == 0 {
		return nil
	}
	out := make([]runtimehooksv1.UpgradeStep, len(versions))
	for i, v := range versions {
		out[i] = runtimehooksv1.UpgradeStep{Version: v}
	}
	return out
}
