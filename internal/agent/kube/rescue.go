package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// RescueManifest is the static pod that finishes an etcd restore after a reboot.
//
// A restore stops the node's API server and etcd by moving their manifests out
// of the kubelet's manifest directory. The agent runs from a DaemonSet, and a
// kubelet that starts without an API server starts no DaemonSet pod: a node that
// loses power in that window would come back with neither its control plane nor
// the agent that can put it back. While the manifests are out, the agent keeps
// this static pod beside them: the kubelet starts it with no API server, it takes
// the journal's lock (so it waits while an agent is alive) and repeats the restore
// that was in flight, which puts etcd's and the API server's manifests back, and
// removes itself. The agent, started again by the API server that came back,
// repeats the restore once more (a no-op) and carries on from its journal.
const RescueManifest = ManifestsDir + "/capi-inplace-rescue.yaml"

// RescuePod is what the rescue static pod runs: the agent's own image, already
// on the node, with the `rescue` command.
type RescuePod struct {
	Image string
	// Args are the container's arguments, e.g. ["rescue", "--host-root=/host"].
	Args []string
	// HostRoot is where the container mounts the host's root ("/host").
	HostRoot string
}

// Manifest renders the static pod.
func (p RescuePod) Manifest() ([]byte, error) {
	if p.Image == "" || p.HostRoot == "" {
		return nil, fmt.Errorf("rescue pod: image and host root are required")
	}
	dir := corev1.HostPathDirectory
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-rescue", Namespace: metav1.NamespaceSystem, Labels: map[string]string{
			"app.kubernetes.io/name":       "capi-inplace-rescue",
			"app.kubernetes.io/part-of":    "capi-inplace",
			"app.kubernetes.io/managed-by": "capi-inplace",
		}},
		Spec: corev1.PodSpec{
			// As the agent: the host's network (etcd on loopback) and PID namespace.
			HostNetwork:       true,
			HostPID:           true,
			PriorityClassName: "system-node-critical",
			// Done is done: the pod removes its own manifest on success.
			RestartPolicy: corev1.RestartPolicyOnFailure,
			Containers: []corev1.Container{{
				Name:  "rescue",
				Image: p.Image,
				// The image the agent runs from is on the node; no registry is asked.
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            p.Args,
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "host", MountPath: p.HostRoot}},
			}},
			Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: &dir}}}},
		},
	}
	return yaml.Marshal(pod)
}

// armRescue puts the rescue static pod in place; nothing without h.Rescue (the
// simulated host, an agent that does not know its image).
func (h *Host) armRescue() error {
	if h.Rescue == nil {
		return nil
	}
	manifest, err := h.Rescue.Manifest()
	if err != nil {
		return err
	}
	if cur, err := h.readHostFile(RescueManifest); err == nil && string(cur.Data) == string(manifest) {
		return nil
	}
	if err := h.writeHostFile(RescueManifest, manifest, 0o600, -1, -1); err != nil {
		return fmt.Errorf("put the rescue pod in place: %w", err)
	}
	return nil
}

// DisarmRescue removes the rescue static pod; the kubelet then stops it.
func (h *Host) DisarmRescue() error {
	if err := h.removeHostFile(RescueManifest); err != nil {
		return fmt.Errorf("remove the rescue pod: %w", err)
	}
	return nil
}
