package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/internal/singlenode"
	"github.com/capi-inplace/capi-inplace/internal/status"
)

// registerHoldWebhook registers the extension's single-node hold webhook for the demo
// namespace, as a deployment's MutatingWebhookConfiguration would.
func registerHoldWebhook(ctx context.Context, stack *localstack.Stack, ext *localstack.Extension, labels map[string]string) error {
	url := fmt.Sprintf("https://127.0.0.1:%d%s", ext.Port, singlenode.DefaultWebhookPath)
	hook := singlenode.MutatingWebhook(admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ext.Cert.CAPEM})
	hook.NamespaceSelector = &metav1.LabelSelector{MatchLabels: labels}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-single-node"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook},
	}
	if err := stack.Client.Create(ctx, cfg); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register the single-node hold webhook: %w", err)
	}
	return nil
}

// createCluster creates the namespace, our ClusterClass (its KubeadmControlPlaneTemplate
// at KCP's default maxSurge 1: KCP refuses maxSurge 0 below three replicas; the
// single-node path makes sure no Machine is created anyway) and the opted-in Cluster.
func (r *run) createCluster(ctx context.Context) error {
	s := r.stack
	if err := s.CreateNamespace(ctx, Namespace, map[string]string{extensionLabel: "capi-inplace", inplacev1.NamespaceEnabledLabel: "true"}); err != nil {
		return err
	}
	if err := r.o.Nodes.CreateClusterClass(ctx, s, Namespace, className); err != nil {
		return err
	}
	files, err := json.Marshal([]localstack.File{{Path: FilePath, Content: fileBefore}})
	if err != nil {
		return err
	}
	// The opt-in goes on at creation: a later patch can lose the race with the topology
	// controller's own writes of the Cluster's annotations.
	c := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: ClusterName,
			Annotations: map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods:          clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}},
				Services:      clusterv1.NetworkRanges{CIDRBlocks: []string{"10.128.0.0/12"}},
				ServiceDomain: "cluster.local",
			},
			Topology: clusterv1.Topology{
				ClassRef:     clusterv1.ClusterClassRef{Name: className},
				Version:      r.from,
				ControlPlane: clusterv1.ControlPlaneTopology{Replicas: ptr.To[int32](1)},
				Workers: clusterv1.WorkersTopology{MachineDeployments: []clusterv1.MachineDeploymentTopology{{
					Class: WorkerClass, Name: "md-0", Replicas: ptr.To[int32](workers),
					// No surge, one node at a time: the workers go in place, never replaced.
					Rollout: clusterv1.MachineDeploymentTopologyRolloutSpec{Strategy: clusterv1.MachineDeploymentTopologyRolloutStrategy{
						Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
						RollingUpdate: clusterv1.MachineDeploymentTopologyRolloutStrategyRollingUpdate{
							MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1)),
						},
					}},
				}}},
				Variables: []clusterv1.ClusterVariable{{Name: "files", Value: apiextensionsv1.JSON{Raw: files}}},
			},
		},
	}
	if err := s.Client.Create(ctx, c); err != nil {
		return fmt.Errorf("create cluster %s/%s: %w", Namespace, ClusterName, err)
	}
	r.printf("    cluster created with %s: \"true\"\n", inplacev1.SingleNodeControlPlaneAnnotation)
	return nil
}

// poll calls check every second until it returns nil, ctx ends or timeout passes.
func poll(ctx context.Context, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

func (r *run) machines(ctx context.Context) ([]clusterv1.Machine, error) {
	list := &clusterv1.MachineList{}
	if err := r.stack.Client.List(ctx, list, client.InNamespace(Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: ClusterName}); err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

func (r *run) cluster(ctx context.Context) (*clusterv1.Cluster, error) {
	c := &clusterv1.Cluster{}
	if err := r.stack.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: ClusterName}, c); err != nil {
		return nil, fmt.Errorf("get cluster: %w", err)
	}
	return c, nil
}

func conditionTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// waitClusterReady waits until every Machine has a Node and is Ready and the Cluster is
// Available, printing the count whenever it moves.
func (r *run) waitClusterReady(ctx context.Context) error {
	last := ""
	return poll(ctx, r.o.Timeout, func() error {
		ms, err := r.machines(ctx)
		if err != nil {
			return err
		}
		withNode, ready := 0, 0
		for _, m := range ms {
			if m.Status.NodeRef.Name != "" {
				withNode++
			}
			if conditionTrue(m.Status.Conditions, clusterv1.ReadyCondition) {
				ready++
			}
		}
		c, err := r.cluster(ctx)
		if err != nil {
			return err
		}
		available := conditionTrue(c.Status.Conditions, clusterv1.AvailableCondition)
		line := fmt.Sprintf("machines: %d/%d created, %d with a node, %d ready; cluster available: %v", len(ms), machinesAll, withNode, ready, available)
		if line != last {
			r.printf("    %s %s\n", time.Now().Format(time.TimeOnly), line)
			last = line
		}
		if len(ms) == machinesAll && ready == machinesAll && withNode == machinesAll && available {
			return nil
		}
		return errors.New(line)
	})
}

func (r *run) machineIDs(ctx context.Context) ([]MachineID, error) {
	ms, err := r.machines(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]MachineID, 0, len(ms))
	for _, m := range ms {
		role := status.RoleWorker
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
			role = status.RoleControlPlane
		}
		out = append(out, MachineID{Name: m.Name, UID: string(m.UID), Role: role, Node: m.Status.NodeRef.Name})
	}
	// Control plane first, as the rollout goes.
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].Role == status.RoleControlPlane && out[j].Role != status.RoleControlPlane
	})
	return out, nil
}

// changeTopology moves spec.topology.version one minor up and changes the files
// variable in a single patch: one rollout.
func (r *run) changeTopology(ctx context.Context) error {
	c, err := r.cluster(ctx)
	if err != nil {
		return err
	}
	base := c.DeepCopy()
	c.Spec.Topology.Version = r.to
	raw, err := json.Marshal([]localstack.File{{Path: FilePath, Content: fileAfter}})
	if err != nil {
		return err
	}
	found := false
	for i := range c.Spec.Topology.Variables {
		if c.Spec.Topology.Variables[i].Name == "files" {
			c.Spec.Topology.Variables[i].Value = apiextensionsv1.JSON{Raw: raw}
			found = true
		}
	}
	if !found {
		return errors.New("cluster has no files variable")
	}
	if err := r.stack.Client.Patch(ctx, c, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("patch cluster topology: %w", err)
	}
	r.printf("    %s patched Cluster %s/%s: version %s -> %s, %s %q -> %q\n", time.Now().Format(time.TimeOnly),
		Namespace, ClusterName, r.from, r.to, FilePath, strings.TrimSpace(fileBefore), strings.TrimSpace(fileAfter))
	return nil
}
