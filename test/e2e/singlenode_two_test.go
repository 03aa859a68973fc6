//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestSingleNodeTwoReplicas: a plain cluster whose KubeadmControlPlane has two
// replicas (external etcd: KCP refuses an even replica count with stacked etcd, and
// maxSurge 0 below three replicas), opted in on the Cluster only after it was ready.
// One write changes the version and a file: the KCP write comes back held, both
// Machines are updated in place one node at a time (a watch on the workload cluster's
// Nodes never sees both with an unfinished plan, so one API server always serves),
// no Machine is created or deleted, both keep name and UID, both hosts carry the file,
// both Nodes report the new kubelet, and KCP is released with every Machine up to date.
func TestSingleNodeTwoReplicas(t *testing.T) {
	t.Parallel()
	ext := ourExtension(t)
	s := newSingleNodeScenario(t, nil, ext, "sn-two")
	const cluster = "sn2"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Version: fromVersion, ControlPlaneReplicas: 2, ExternalEtcd: true,
		Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}},
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 2)
	// Late opt-in: the cluster was created and became ready without it.
	s.optIn(cluster)
	s.logf("EVIDENCE opted in on the Cluster after it was ready (plain cluster, 2 control-plane replicas, external etcd)")
	agents := s.startAgents(cluster, 2)
	before := machineIDs(s.machines(cluster))
	machines := s.watchMachines()
	updating := s.watchUpdatingNodes(agents.Kubeconfig())
	file := localstack.File{Path: "/etc/capi-inplace-e2e/round", Content: "1"}

	roundStart := time.Now()
	kcpName := cluster + "-control-plane"
	kcp := s.kcp(kcpName)
	base := kcp.DeepCopy()
	kcp.Spec.Version = toVersion
	for i := range kcp.Spec.KubeadmConfigSpec.Files {
		if kcp.Spec.KubeadmConfigSpec.Files[i].Path == file.Path {
			kcp.Spec.KubeadmConfigSpec.Files[i].Content = file.Content
		}
	}
	if err := s.stack.Client.Patch(s.ctx, kcp, client.MergeFrom(base)); err != nil {
		t.Fatalf("patch KCP: %v", err)
	}
	if _, held := kcp.Annotations[inplacev1.HoldAnnotation]; !held {
		t.Fatalf("the KCP write that changed version and files was not held: %v", kcp.Annotations)
	}
	s.logf("EVIDENCE the KCP write that changed version and files came back held: %s=%s", inplacev1.HoldAnnotation, kcp.Annotations[inplacev1.HoldAnnotation])
	s.waitReleased(kcpName, rolloutTimeout)
	s.waitInPlace(cluster, toVersion, 2, false, before, file, agents)
	round := time.Since(roundStart)
	s.assertNoMachineChurn(machines)
	if err := conditionTrue(s.kcp(kcpName).Status.Conditions, controlplanev1.KubeadmControlPlaneMachinesUpToDateCondition); err != nil {
		t.Fatalf("KCP: %v", err)
	}
	order, err := updating.check(2)
	if err != nil {
		t.Fatal(err)
	}
	s.logf("EVIDENCE one node at a time: %s", order)
	s.logf("EVIDENCE round: two-replica control plane (%s -> %s + files) took %s", fromVersion, toVersion, round.Round(time.Second))
}

// updatingNodes watches the workload cluster's Nodes and records every moment a
// node has a plan it has not finished (the desired-plan annotation set and its status
// not terminal for that plan): the evidence, from the API, of how many nodes were
// being updated at once. One watch stream orders its events, so the record is exact
// up to what the API server coalesces.
type updatingNodes struct {
	mu      sync.Mutex
	now     map[string]bool
	max     int
	both    []string // the nodes when more than one was updating
	started []string // nodes in the order they started updating
	err     error
}

func (s *scenario) watchUpdatingNodes(kubeconfig string) *updatingNodes {
	s.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		s.t.Fatal(err)
	}
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: s.stack.Client.Scheme()})
	if err != nil {
		s.t.Fatal(err)
	}
	w, err := wc.Watch(s.ctx, &corev1.NodeList{})
	if err != nil {
		s.t.Fatalf("watch the workload cluster's Nodes: %v", err)
	}
	s.t.Cleanup(w.Stop)
	u := &updatingNodes{now: map[string]bool{}}
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				if st, isStatus := ev.Object.(*metav1.Status); isStatus && ev.Type == watch.Error {
					u.mu.Lock()
					u.err = fmt.Errorf("node watch ended: %s", st.Message)
					u.mu.Unlock()
				}
				continue
			}
			u.observe(n, ev.Type == watch.Deleted)
		}
	}()
	return u
}

func (u *updatingNodes) observe(n *corev1.Node, deleted bool) {
	busy := false
	if plan := n.Annotations[inplacev1.DesiredPlanAnnotation]; plan != "" && !deleted {
		busy = true
		var st protocol.NodeStatus
		if raw := n.Annotations[inplacev1.StatusAnnotation]; raw != "" && json.Unmarshal([]byte(raw), &st) == nil &&
			st.PlanHash == plan && st.Phase.Terminal() {
			busy = false
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if busy && !u.now[n.Name] {
		u.started = append(u.started, n.Name)
	}
	u.now[n.Name] = busy
	count := 0
	var names []string
	for name, b := range u.now {
		if b {
			count++
			names = append(names, name)
		}
	}
	if count > u.max {
		u.max = count
	}
	if count > 1 && u.both == nil {
		sort.Strings(names)
		u.both = names
	}
}

// check fails when more than one node was updating at a moment, or when fewer than
// want nodes were seen updating at all (the watch saw nothing: it proves nothing).
func (u *updatingNodes) check(want int) (string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.both != nil {
		return "", fmt.Errorf("nodes %v were updating at the same moment", u.both)
	}
	if len(u.started) < want {
		return "", fmt.Errorf("only %v seen updating (want %d; watch error: %w)", u.started, want, u.err)
	}
	return fmt.Sprintf("nodes started updating in the order %s, at most %d at a time", strings.Join(u.started, ", "), u.max), nil
}

// clusterOptInRecord reads whether the Cluster still carries the opt-in annotation and
// which field managers own metadata.annotations (evidence for the annotation loss
// seen with CAPI v1.14's topology controller, docs/single-node.md).
func (s *scenario) clusterOptInRecord(cluster string) (bool, string) {
	s.t.Helper()
	c := &clusterv1.Cluster{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster}, c); err != nil {
		s.t.Fatal(err)
	}
	var owners []string
	for _, mf := range c.ManagedFields {
		if mf.FieldsV1 != nil && strings.Contains(mf.FieldsV1.GetRawString(), `"f:`+inplacev1.SingleNodeControlPlaneAnnotation+`"`) {
			owners = append(owners, fmt.Sprintf("%s(%s %s)", mf.Manager, mf.Operation, mf.Time.Format(time.RFC3339)))
		}
	}
	_, ok := c.Annotations[inplacev1.SingleNodeControlPlaneAnnotation]
	return ok, strings.Join(owners, ", ")
}
