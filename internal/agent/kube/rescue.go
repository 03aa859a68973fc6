package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// RescueManifest is the static pod that rolls a control plane back when its
// API server does not come back after a reboot, and finishes an etcd restore a
// reboot interrupted.
//
// The agent runs from a DaemonSet, and a kubelet that starts without an API
// server starts no DaemonSet pod: a control plane whose update left an API
// server that cannot start (or whose etcd restore had it stopped) would come
// back with neither its control plane nor the agent that can put it back. So,
// while state.RescueWanted says so, the agent keeps this static pod in place:
// the kubelet starts it with no API server, it takes the journal's lock (so it
// waits while an agent is alive) and acts on the journal (agentcmd's rescue
// command): a rollback in flight is finished, an update in flight is left to
// the agent if the node's API server answers ready, else rolled back. The agent
// removes it when the update ends.
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

// rescueAttemptAnnotation names the update attempt the rescue pod was armed
// for. It makes each attempt's pod another pod to the kubelet (a static pod's
// UID is a hash of its manifest): a pod of an earlier attempt whose container
// exited 0 is never taken for this one, which the kubelet would not start again
// (restartPolicy OnFailure skips a container that succeeded).
const rescueAttemptAnnotation = "inplace.capi-inplace.dev/rescue-attempt"

// Manifest renders the static pod armed for an update attempt.
func (p RescuePod) Manifest(attempt string) ([]byte, error) {
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
		}, Annotations: map[string]string{rescueAttemptAnnotation: attempt}},
		Spec: corev1.PodSpec{
			// As the agent: the host's network (etcd on loopback) and PID namespace.
			HostNetwork:       true,
			HostPID:           true,
			PriorityClassName: "system-node-critical",
			// Done is done: the pod exits 0 only once it removed its own
			// manifest. A pod that leaves the journal to the agent keeps
			// running instead (see agentcmd's rescue): the kubelet does not
			// start again, after a reboot, a container that exited 0.
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

// ArmRescue puts the rescue static pod of an update attempt in place (a no-op
// when it is there); nothing without h.Rescue (the simulated host, an agent
// that does not know its image).
func (h *Host) ArmRescue(attempt string) error {
	if h.Rescue == nil {
		return nil
	}
	manifest, err := h.Rescue.Manifest(attempt)
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

// DisarmRescue removes the rescue static pod (a no-op when there is none); the
// kubelet then stops it.
func (h *Host) DisarmRescue() error {
	if err := h.removeHostFile(RescueManifest); err != nil {
		return fmt.Errorf("remove the rescue pod: %w", err)
	}
	return nil
}
