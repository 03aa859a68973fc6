package localstack

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/workload"
)

// mirrorAnnotation is what a real kubelet puts on the API copy (mirror pod) of a
// static pod; drains skip such pods.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// staticPodMarker makes the in-memory provider's control-plane pods look like a real
// kubelet's mirror pods. Upstream's in-memory backend creates
// kube-system/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler}-<node>
// without owner and without kubernetes.io/config.mirror, so any drain (kubectl's
// helper, ours) refuses them as "Pods that declare no controller" and a control-plane
// node can never be drained there. On a real node these are static pods, which a drain
// skips. The backend only merge-patches these pods later, so the mark stays.
type staticPodMarker struct {
	client client.Client
	done   map[string]bool
}

func newStaticPodMarker(kubeconfig []byte, cluster client.ObjectKey) (*staticPodMarker, error) {
	cfg, err := workload.RESTConfig(kubeconfig, cluster, workload.Options{UserAgent: "capi-inplace-localstack-marker"})
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("workload client: %w", err)
	}
	return &staticPodMarker{client: c, done: map[string]bool{}}, nil
}

// mark annotates the unowned kube-system pods of node; it is done for a node once
// its four control-plane pods carry the annotation (worker nodes have none).
func (m *staticPodMarker) mark(ctx context.Context, node string, controlPlane bool) error {
	if m.done[node] {
		return nil
	}
	if !controlPlane {
		m.done[node] = true
		return nil
	}
	pods := &corev1.PodList{}
	if err := m.client.List(ctx, pods, client.InNamespace("kube-system"), client.MatchingFields{"spec.nodeName": node}); err != nil {
		return fmt.Errorf("list pods of node %s: %w", node, err)
	}
	marked := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != node || len(p.OwnerReferences) > 0 {
			continue
		}
		if _, ok := p.Annotations[mirrorAnnotation]; !ok {
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[mirrorAnnotation] = "capi-in-memory-static-pod"
			// An update, not a patch: the fake server stores a patched object as
			// unstructured, after which its own etcd emulation can no longer list
			// Pods ("can't assign or convert unstructured.Unstructured into v1.Pod")
			// and KCP's etcd checks fail. An update is decoded into the typed object.
			if err := m.client.Update(ctx, p); err != nil {
				return fmt.Errorf("mark pod %s as mirror pod: %w", p.Name, err)
			}
		}
		marked++
	}
	if marked >= 4 {
		m.done[node] = true
	}
	return nil
}
