package bench

import (
	"context"
	"encoding/json"
	"fmt"
	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// ExtensionLabel selects, per namespace, which extension serves it in the rollout.
const ExtensionLabel = "bench.capi-inplace.dev/extension"

// RolloutVersion is the clusters' Kubernetes version (the round changes files only:
// the in-memory provider's Nodes never change kubelet version by themselves, so a
// version round could not complete with the null extension).
const RolloutVersion = "v1.35.0"

// roundFile is the files variable's entry the rounds change.
const roundFile = "/etc/capi-inplace-bench/round"

// NullExtension is bench/cmd/capi-inplace-nullext, registered for namespaces
// labelled ExtensionLabel=null.
func NullExtension(path string) localstack.ExtensionSpec {
	return localstack.ExtensionSpec{
		Name: "null",
		Path: path,
		Args: func(port int, certDir, _ string) []string {
			return []string{"--webhook-port=" + strconv.Itoa(port), "--webhook-host=127.0.0.1", "--webhook-cert-dir=" + certDir}
		},
		NamespaceLabels: map[string]string{ExtensionLabel: "null"},
	}
}

// OurStackExtension is capi-inplace as the local stack runs it, for namespaces
// labelled ExtensionLabel=capi-inplace, with extraArgs after the stack's (a later
// flag wins: e.g. --v=2 for the per-step call timing).
func OurStackExtension(binDir string, extraArgs ...string) localstack.ExtensionSpec {
	spec := localstack.OurExtension(binDir, "capi-inplace", map[string]string{ExtensionLabel: "capi-inplace"}, nil)
	args := spec.Args
	spec.Args = func(port int, certDir, kubeconfig string) []string {
		return append(args(port, certDir, kubeconfig), extraArgs...)
	}
	return spec
}

// RolloutCluster is one ClusterClass cluster of the rollout benchmark, in its own
// namespace served by one extension.
type RolloutCluster struct {
	Stack        *localstack.Stack
	Namespace    string
	Extension    string // ExtensionLabel value
	Name         string
	ControlPlane int
	Workers      int
	// MaxUnavailable of the MachineDeployment (maxSurge 0: in place, never new machines).
	MaxUnavailable int
	Agents         *localstack.Agents
	round          int
}

// Machines is the cluster's machine count.
func (c *RolloutCluster) Machines() int { return c.ControlPlane + c.Workers }

// Create creates the namespace, the ClusterClass and the Cluster.
func (c *RolloutCluster) Create(ctx context.Context) error {
	if err := c.Stack.CreateNamespace(ctx, c.Namespace, map[string]string{ExtensionLabel: c.Extension, inplacev1.NamespaceEnabledLabel: "true"}); err != nil {
		return err
	}
	if err := c.Stack.CreateClusterClass(ctx, c.Namespace, "inplace"); err != nil {
		return err
	}
	return c.Stack.CreateCluster(ctx, localstack.ClusterSpec{
		Namespace: c.Namespace, Name: c.Name, Class: "inplace", Version: RolloutVersion,
		ControlPlaneReplicas: c.ControlPlane, WorkerReplicas: c.Workers, MDMaxSurge: 0, MDMaxUnavailable: c.MaxUnavailable,
		Files: []localstack.File{{Path: roundFile, Content: "0"}},
	})
}

// WaitReady waits until every Machine has a Node and is Ready and the Cluster is
// Available; withAgents then starts a simulated agent per Node and waits for them.
func (c *RolloutCluster) WaitReady(ctx context.Context, timeout time.Duration, withAgents bool) error {
	err := poll(ctx, timeout, time.Second, func() error {
		ms, err := c.machines(ctx)
		if err != nil {
			return err
		}
		if len(ms) != c.Machines() {
			return fmt.Errorf("%d machines, want %d", len(ms), c.Machines())
		}
		for _, m := range ms {
			if m.Status.NodeRef.Name == "" {
				return fmt.Errorf("machine %s has no node", m.Name)
			}
			if err := conditionTrue(m.Status.Conditions, clusterv1.ReadyCondition); err != nil {
				return fmt.Errorf("machine %s: %w", m.Name, err)
			}
		}
		cl := &clusterv1.Cluster{}
		if err := c.Stack.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Name}, cl); err != nil {
			return err
		}
		return conditionTrue(cl.Status.Conditions, clusterv1.AvailableCondition)
	})
	if err != nil {
		return fmt.Errorf("cluster %s/%s ready: %w", c.Namespace, c.Name, err)
	}
	if !withAgents {
		return nil
	}
	if c.Agents, err = c.Stack.StartAgents(ctx, c.Namespace, c.Name, localstack.AgentOptions{}); err != nil {
		return err
	}
	return poll(ctx, 2*time.Minute, 500*time.Millisecond, func() error {
		if errs := c.Agents.Errors(); len(errs) > 0 {
			return fmt.Errorf("agents: %v", errs)
		}
		if n := len(c.Agents.Nodes()); n != c.Machines() {
			return fmt.Errorf("%d agents, want %d", n, c.Machines())
		}
		return nil
	})
}

// Round changes the files variable and times until the rollout is complete: every
// Machine (same names and UIDs: in place) up to date, none updating, every
// KubeadmConfig with the new file, and the Cluster's machines-up-to-date
// conditions True.
func (c *RolloutCluster) Round(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	before, err := c.machines(ctx)
	if err != nil {
		return 0, err
	}
	uids := map[string]types.UID{}
	for _, m := range before {
		uids[m.Name] = m.UID
	}
	c.round++
	file := localstack.File{Path: roundFile, Content: strconv.Itoa(c.round)}
	cl := &clusterv1.Cluster{}
	if err := c.Stack.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Name}, cl); err != nil {
		return 0, err
	}
	base := cl.DeepCopy()
	raw, err := json.Marshal([]localstack.File{file})
	if err != nil {
		return 0, err
	}
	for i := range cl.Spec.Topology.Variables {
		if cl.Spec.Topology.Variables[i].Name == "files" {
			cl.Spec.Topology.Variables[i].Value = apiextensionsv1.JSON{Raw: raw}
		}
	}
	start := time.Now()
	if err := c.Stack.Client.Patch(ctx, cl, client.MergeFrom(base)); err != nil {
		return 0, fmt.Errorf("patch topology files: %w", err)
	}
	err = poll(ctx, timeout, 250*time.Millisecond, func() error { return c.rolledOut(ctx, uids, file) })
	if err != nil {
		return 0, fmt.Errorf("round %d of %s/%s: %w", c.round, c.Namespace, c.Name, err)
	}
	return time.Since(start), nil
}

func (c *RolloutCluster) rolledOut(ctx context.Context, uids map[string]types.UID, file localstack.File) error {
	ms, err := c.machines(ctx)
	if err != nil {
		return err
	}
	if len(ms) != len(uids) {
		return fmt.Errorf("%d machines, want the same %d", len(ms), len(uids))
	}
	for _, m := range ms {
		if uids[m.Name] != m.UID {
			return fmt.Errorf("machine %s is new: not in place", m.Name)
		}
		if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
			return fmt.Errorf("machine %s still updating in place", m.Name)
		}
		if err := conditionTrue(m.Status.Conditions, clusterv1.MachineUpToDateCondition); err != nil {
			return fmt.Errorf("machine %s: %w", m.Name, err)
		}
	}
	cfgs := &bootstrapv1.KubeadmConfigList{}
	if err := c.Stack.Client.List(ctx, cfgs, client.InNamespace(c.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: c.Name}); err != nil {
		return err
	}
	for _, cfg := range cfgs.Items {
		found := false
		for _, f := range cfg.Spec.Files {
			found = found || (f.Path == file.Path && f.Content == file.Content)
		}
		if !found {
			return fmt.Errorf("KubeadmConfig %s lacks %s=%q", cfg.Name, file.Path, file.Content)
		}
	}
	cl := &clusterv1.Cluster{}
	if err := c.Stack.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Name}, cl); err != nil {
		return err
	}
	if err := conditionTrue(cl.Status.Conditions, clusterv1.ClusterControlPlaneMachinesUpToDateCondition); err != nil {
		return err
	}
	if c.Workers > 0 {
		return conditionTrue(cl.Status.Conditions, clusterv1.ClusterWorkerMachinesUpToDateCondition)
	}
	return nil
}

func (c *RolloutCluster) machines(ctx context.Context) ([]clusterv1.Machine, error) {
	list := &clusterv1.MachineList{}
	if err := c.Stack.Client.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: c.Name}); err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

func conditionTrue(conds []metav1.Condition, t string) error {
	for _, c := range conds {
		if c.Type == t {
			if c.Status == metav1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("%s=%s (%s: %s)", t, c.Status, c.Reason, c.Message)
		}
	}
	return fmt.Errorf("%s not set", t)
}

// poll calls check every interval until it returns nil; on timeout it returns the
// last error.
func poll(ctx context.Context, timeout, interval time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		last := check()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", timeout, last)
		case <-time.After(interval):
		}
	}
}

// StartRolloutStack starts the local upstream stack with both extensions.
func StartRolloutStack(ctx context.Context, binDir, nullPath, artifacts string, extraArgs ...string) (*localstack.Stack, error) {
	s, err := localstack.Start(ctx, localstack.Options{BinDir: binDir, ArtifactsDir: filepath.Join(artifacts, "rollout")})
	if err != nil {
		return nil, fmt.Errorf("start the local stack: %w", err)
	}
	for _, spec := range []localstack.ExtensionSpec{OurStackExtension(binDir, extraArgs...), NullExtension(nullPath)} {
		if _, err := s.StartExtension(ctx, spec); err != nil {
			s.Stop()
			return nil, fmt.Errorf("extension %s: %w", spec.Name, err)
		}
	}
	return s, nil
}
