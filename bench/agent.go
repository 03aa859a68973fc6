package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// AgentResult is the agent's footprint and plan pick-up.
type AgentResult struct {
	Idle       ProcStat      // at the end of the idle window
	IdleCPU    time.Duration // utime+stime spent in the idle window
	IdleWindow time.Duration
	// PickUp holds, per publication, the time from the desired-plan annotation
	// write (the Secret was written before it) to the agent's first status for
	// that plan, seen through a watch on the Node.
	PickUp []time.Duration
	// Apply holds the time from publication to Committed (files-only plans).
	Apply []time.Duration
	After ProcStat // after the publications (HWM: peak)
}

// MeasureAgent runs the simulated agent (`capi-inplace-dev agent --simulate`) for one Node of env (the
// workload cluster here), measures it idle, then publishes plans one after the
// other as the coordinator does and times the agent's pick-up.
// Publications are pause apart: a rollout publishes one plan per node, minutes
// apart, and back-to-back plans would measure the agent's client-side rate limit
// (client-go's default 5 QPS, burst 10, shared by its status reports and the
// simulated kubelet) instead of its pick-up.
func MeasureAgent(ctx context.Context, env *Env, binDir, dir, logDir string, idle time.Duration, publications int, pause time.Duration) (AgentResult, error) {
	var res AgentResult
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return res, err
	}
	const node = "bench-agent-0"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: inplacev1.AgentNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, err
	}
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		return res, fmt.Errorf("create node: %w", err)
	}
	n.Status.NodeInfo.KubeletVersion = FromVersion
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return res, fmt.Errorf("node status: %w", err)
	}
	p, err := localstack.StartProcess(localstack.ProcessSpec{
		Name: "agent-" + node, Path: filepath.Join(binDir, localstack.AgentBinary), LogDir: logDir,
		Args: []string{"agent", "--simulate", "--host-root", filepath.Join(dir, "agent-host"), "--node-name", node,
			"--kubeconfig", env.Kubeconfig, "--health-addr=0", "--v=1"},
	})
	if err != nil {
		return res, err
	}
	defer p.Stop(10 * time.Second)

	// Settle: start-up work (host initialisation, informers' first lists) is not idle.
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(5 * time.Second):
	}
	s0, err := ReadProc(p.Pid())
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(idle):
	}
	s1, err := ReadProc(p.Pid())
	if err != nil {
		return res, err
	}
	res.Idle, res.IdleCPU, res.IdleWindow = s1, s1.CPU-s0.CPU, time.Since(t0)

	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	if err != nil {
		return res, fmt.Errorf("watch node: %w", err)
	}
	defer w.Stop()
	for i := range publications {
		plan := protocol.NewPlan(node)
		plan.Machine = protocol.MachineRef{Namespace: "bench", Name: node, Cluster: "bench"}
		plan.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: FromVersion, Action: protocol.KubeadmNone}
		plan.Files = []protocol.File{{Path: "/etc/capi-inplace-bench/round", Content: fmt.Appendf(nil, "%d\n", i), Permissions: "0644"}}
		pick, apply, err := publishAndWait(ctx, cs, w, node, plan)
		if err != nil {
			return res, fmt.Errorf("publication %d: %w (agent log %s)", i+1, err, p.LogPath)
		}
		res.PickUp = append(res.PickUp, pick)
		res.Apply = append(res.Apply, apply)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(pause):
		}
	}
	if res.After, err = ReadProc(p.Pid()); err != nil {
		return res, err
	}
	return res, nil
}

// publishAndWait does the coordinator's publication (the plan sealed to the node's
// key in its Secret, then the desired-plan annotation) and waits on the Node watch for the agent's first status of the
// plan (pick-up) and for Committed.
func publishAndWait(ctx context.Context, cs kubernetes.Interface, w watch.Interface, node string, plan *protocol.NodePlan) (time.Duration, time.Duration, error) {
	// Sealed to the key the agent published on its Node, as the coordinator does.
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("read node: %w", err)
	}
	key, err := nodeplan.AgentKey(n.Annotations)
	if err != nil {
		return 0, 0, fmt.Errorf("node %s: %w", node, err)
	}
	raw, err := nodeplan.Seal(plan, key)
	if err != nil {
		return 0, 0, err
	}
	hash, err := plan.Hash()
	if err != nil {
		return 0, 0, err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName(node),
		Labels: map[string]string{inplacev1.PlanNodeLabel: node}}, Data: map[string][]byte{inplacev1.PlanSecretDataKey: raw}}
	secrets := cs.CoreV1().Secrets(inplacev1.AgentNamespace)
	if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			return 0, 0, fmt.Errorf("update plan secret: %w", err)
		}
	} else if err != nil {
		return 0, 0, fmt.Errorf("create plan secret: %w", err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{inplacev1.DesiredPlanAnnotation: hash}}})
	if err != nil {
		return 0, 0, err
	}
	published := time.Now()
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return 0, 0, fmt.Errorf("annotate node: %w", err)
	}
	var pick time.Duration
	timeout := time.After(60 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-timeout:
			return 0, 0, fmt.Errorf("plan %s: no Committed status within 60 s (picked up after %s)", hash[:12], pick)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, 0, fmt.Errorf("node watch ended")
			}
			n, isNode := ev.Object.(*corev1.Node)
			if !isNode {
				continue
			}
			st, err := protocol.DecodeStatus(n.Annotations[inplacev1.StatusAnnotation])
			if err != nil || st.PlanHash != hash {
				continue
			}
			if pick == 0 {
				pick = time.Since(published)
			}
			switch st.Phase {
			case protocol.PhaseCommitted:
				return pick, time.Since(published), nil
			case protocol.PhaseFailed, protocol.PhaseRolledBack:
				return 0, 0, fmt.Errorf("plan %s ended %s: %s", hash[:12], st.Phase, st.Message)
			}
		}
	}
}
