package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/status"
)

// machineWatch counts Machines created and deleted after it started.
type machineWatch struct {
	mu      sync.Mutex
	created []string
	deleted []string
	stop    func()
}

func (w *machineWatch) createdMachines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.created...)
}

func (r *run) watchMachines(ctx context.Context) (*machineWatch, error) {
	wc, err := client.NewWithWatch(r.stack.Config, client.Options{Scheme: r.stack.Client.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("watch client: %w", err)
	}
	list := &clusterv1.MachineList{}
	if err := r.stack.Client.List(ctx, list, client.InNamespace(Namespace)); err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	existing := map[string]bool{}
	for _, m := range list.Items {
		existing[string(m.UID)] = true
	}
	w, err := wc.Watch(ctx, &clusterv1.MachineList{}, client.InNamespace(Namespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return nil, fmt.Errorf("watch machines: %w", err)
	}
	mw := &machineWatch{stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			m, ok := ev.Object.(*clusterv1.Machine)
			if !ok {
				continue
			}
			mw.mu.Lock()
			switch ev.Type {
			case watch.Added:
				if !existing[string(m.UID)] {
					mw.created = append(mw.created, m.Name)
				}
			case watch.Deleted:
				mw.deleted = append(mw.deleted, m.Name)
			}
			mw.mu.Unlock()
		}
	}()
	return mw, nil
}

// live re-renders the status table every Interval until the rollout is done, a node
// fails or ctx ends, feeding tl. It returns each node's plan time as its agent reported it
// (plan start to commit).
func (r *run) live(ctx context.Context, since time.Time, w *machineWatch, tl *Timeline) (map[string]time.Duration, error) {
	g := status.Gatherer{Management: r.stack.Client, Workload: status.KubeconfigWorkload{Management: r.stack.Client}}
	view := &Live{TTY: r.o.TTY, Width: r.o.Width}
	durations := map[string]time.Duration{}
	tick := time.NewTicker(r.o.Interval)
	defer tick.Stop()
	var lastTable string
	for {
		snap, err := g.Gather(ctx, Namespace, ClusterName)
		if err == nil {
			now := time.Now()
			rep := status.Build(snap, now)
			tl.Observe(rep, now)
			var buf bytes.Buffer
			_ = status.RenderTable(&buf, rep)
			lastTable = buf.String()
			if frame := view.Frame(rep, lastTable, time.Since(since)); frame != "" {
				r.printf("%s", frame)
			}
			for _, c := range rep.Clusters {
				for _, m := range c.Machines {
					if m.StartedAt != nil && !m.StartedAt.Before(since.Add(-5*time.Second)) && m.Phase.Terminal() {
						durations[m.Name] = time.Duration(m.ElapsedSeconds) * time.Second
					}
				}
			}
			if failed := rep.FailedMachines(); len(failed) > 0 {
				return durations, fmt.Errorf("in-place update failed on %s", strings.Join(failed, ", "))
			}
			if created := w.createdMachines(); len(created) > 0 {
				// A new Machine means a replacement: the demo's point is already lost.
				return durations, fmt.Errorf("Machine(s) created during the rollout: %s", strings.Join(created, ", "))
			}
			if err := r.rolledOut(ctx, rep); err == nil {
				if !r.o.TTY {
					r.printf("\n%s", lastTable)
				}
				return durations, nil
			}
		} else if ctx.Err() == nil && !r.o.TTY {
			r.printf("    %s status: %v\n", time.Now().Format(time.TimeOnly), err)
		}
		select {
		case <-ctx.Done():
			if !r.o.TTY && lastTable != "" {
				r.printf("\n%s", lastTable)
			}
			return durations, ctx.Err()
		case <-tick.C:
		}
	}
}

// rolledOut returns nil once every Machine and Node is at the new version, up to date,
// no longer updating, the control plane released by the single-node path, the Cluster's
// machines up to date and the new file on every node.
func (r *run) rolledOut(ctx context.Context, rep status.Report) error {
	if len(rep.Clusters) != 1 || len(rep.Clusters[0].Machines) != machinesAll {
		return errors.New("machines missing from the view")
	}
	for _, m := range rep.Clusters[0].Machines {
		if m.Version != r.to || m.KubeletVersion != r.to || m.InProgress() {
			return fmt.Errorf("machine %s not done", m.Name)
		}
		if m.Conditions.UpToDate == nil || m.Conditions.UpToDate.Status != "True" {
			return fmt.Errorf("machine %s not up to date", m.Name)
		}
	}
	ms, err := r.machines(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
			return fmt.Errorf("machine %s still updating", m.Name)
		}
	}
	c, err := r.cluster(ctx)
	if err != nil {
		return err
	}
	for _, t := range []string{clusterv1.ClusterControlPlaneMachinesUpToDateCondition, clusterv1.ClusterWorkerMachinesUpToDateCondition} {
		if !conditionTrue(c.Status.Conditions, t) {
			return fmt.Errorf("cluster %s not True", t)
		}
	}
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := r.stack.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: c.Spec.ControlPlaneRef.Name}, kcp); err != nil {
		return err
	}
	if _, held := kcp.Annotations[inplacev1.HoldAnnotation]; held {
		return errors.New("control plane still held")
	}
	if _, paused := kcp.Annotations[clusterv1.PausedAnnotation]; paused {
		return errors.New("control plane still paused")
	}
	for _, n := range r.nodes {
		if b, err := r.o.Nodes.ReadFile(ctx, n, FilePath); err != nil || b != fileAfter {
			return fmt.Errorf("host %s lacks the new file", n)
		}
	}
	return nil
}

// outcome collects what the summary checks.
func (r *run) outcome(ctx context.Context, before []MachineID, w *machineWatch, durations, agentDur map[string]time.Duration) Outcome {
	o := Outcome{
		FromVersion: r.from, ToVersion: r.to, FilePath: FilePath, FileContent: fileAfter,
		Before: before, Durations: durations, AgentDurations: agentDur, Kubelets: map[string]string{},
		HostFiles: map[string]string{}, HostErrs: map[string]string{},
	}
	if after, err := r.machineIDs(ctx); err == nil {
		o.After = after
	}
	// Give the watch a moment to deliver the last events.
	time.Sleep(500 * time.Millisecond)
	w.mu.Lock()
	o.Created = append([]string(nil), w.created...)
	o.Deleted = append([]string(nil), w.deleted...)
	w.mu.Unlock()
	if kubelets, err := r.kubelets(ctx); err == nil {
		o.Kubelets = kubelets
	}
	for _, n := range r.nodes {
		b, err := r.o.Nodes.ReadFile(ctx, n, FilePath)
		if err != nil {
			o.HostErrs[n] = err.Error()
			continue
		}
		o.HostFiles[n] = b
	}
	return o
}

func (r *run) kubelets(ctx context.Context) (map[string]string, error) {
	kc, err := r.stack.WorkloadKubeconfig(ctx, Namespace, ClusterName)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, fmt.Errorf("workload kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: r.stack.Client.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("workload client: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	return out, nil
}
