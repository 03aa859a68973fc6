package simhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// RunKubelet is the simulated kubelet's status loop: like a real kubelet it
// reports periodically (every interval) and right after a restart. It returns
// when ctx ends.
func (h *Host) RunKubelet(ctx context.Context, interval time.Duration) {
	var reported string
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		v, err := h.SyncKubelet(ctx, reported)
		if err != nil {
			h.Log.V(1).Info("Simulated kubelet could not report", "node", h.NodeName, "error", err.Error())
		}
		reported = v
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.trigger:
		}
	}
}

// SyncKubelet reports the running kubelet's version on the Node status (when it
// differs from reported) and, on a control plane, the mirror pods. It returns the
// version now reported.
func (h *Host) SyncKubelet(ctx context.Context, reported string) (string, error) {
	if h.APIDown() {
		return reported, ErrAPIDown
	}
	version := h.RunningKubelet()
	if version == "" {
		return reported, nil
	}
	// The version report does not wait for the mirror pods: each is retried on
	// its own at the next sync.
	var podErr error
	if h.ControlPlane() {
		podErr = h.syncMirrorPods(ctx)
	}
	if version == reported {
		return reported, podErr
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"kubeletVersion": version}}})
	nodes := h.Client.CoreV1().Nodes()
	n, err := nodes.PatchStatus(ctx, h.NodeName, patch)
	if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
		// API servers without the status subresource (Cluster API's in-memory
		// one) take status in a patch of the object itself.
		n, err = nodes.Patch(ctx, h.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		return reported, errors.Join(fmt.Errorf("patch node status: %w", err), podErr)
	}
	if n.Status.NodeInfo.KubeletVersion != version {
		return reported, errors.Join(fmt.Errorf("patch node status: the API server kept kubeletVersion %s", n.Status.NodeInfo.KubeletVersion), podErr)
	}
	h.Log.Info("Simulated kubelet reported its version", "node", h.NodeName, "kubeletVersion", version)
	return version, podErr
}

// syncMirrorPods keeps kube-system/<component>-<node> in line with the manifests.
func (h *Host) syncMirrorPods(ctx context.Context) error {
	pods := h.Client.CoreV1().Pods("kube-system")
	for _, c := range staticPods() {
		image, err := h.manifestImage(c)
		if err != nil {
			return err
		}
		name := c + "-" + h.NodeName
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		// The in-memory API server reports a missing object as an internal error.
		if apierrors.IsNotFound(err) || (err != nil && strings.Contains(err.Error(), "not found")) {
			pod = &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system",
					Labels:      map[string]string{"component": c, "tier": "control-plane"},
					Annotations: map[string]string{"kubernetes.io/config.mirror": "simulated"}},
				Spec: corev1.PodSpec{NodeName: h.NodeName, Containers: []corev1.Container{{Name: c, Image: image}}},
			}
			if pod, err = pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create mirror pod %s: %w", name, err)
			}
		} else if err != nil {
			return fmt.Errorf("get mirror pod %s: %w", name, err)
		}
		if containerImage(pod, c) != image {
			// Strategic merge keys containers by name: only the image changes.
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"containers": []map[string]any{{"name": c, "image": image}}}})
			if pod, err = pods.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("update mirror pod %s: %w", name, err)
			}
		}
		if pod.Status.Phase != corev1.PodRunning {
			patch, _ := json.Marshal(map[string]any{"status": map[string]any{"phase": corev1.PodRunning}})
			_, err := pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				_, err = pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
			}
			if err != nil {
				return fmt.Errorf("update mirror pod status %s: %w", name, err)
			}
		}
	}
	return nil
}

func containerImage(pod *corev1.Pod, name string) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return c.Image
		}
	}
	return ""
}
