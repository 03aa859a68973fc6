package drain

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AttachedVolumes lists, sorted, the volumes still attached to the node that an
// update must wait for before the node goes down, the way Cluster API's machine
// controller waits before it deletes a drained node: the node's
// status.volumesAttached and the VolumeAttachments of the node that report
// attached, less the volumes of the pods that stay on the node (DaemonSet and
// mirror pods, pods the drain skips): those are not going anywhere. Entries are
// "PersistentVolume <name>" or, for an attachment no PersistentVolume explains,
// "volume <unique name>". A rebooted node whose volume is still attached to it
// can lose writes the storage backend has not flushed; some backends also refuse
// to attach it elsewhere until it is detached.
func AttachedVolumes(ctx context.Context, c client.Client, node *corev1.Node) ([]string, error) {
	attachments := &storagev1.VolumeAttachmentList{}
	if err := c.List(ctx, attachments); err != nil {
		return nil, fmt.Errorf("list VolumeAttachments: %w", err)
	}
	pvNames := map[string]bool{}
	for _, va := range attachments.Items {
		if va.Spec.NodeName == node.Name && va.Status.Attached && va.Spec.Source.PersistentVolumeName != nil {
			pvNames[*va.Spec.Source.PersistentVolumeName] = true
		}
	}
	unique := map[string]bool{}
	for _, v := range node.Status.VolumesAttached {
		unique[string(v.Name)] = true
	}
	if len(pvNames) == 0 && len(unique) == 0 {
		return nil, nil
	}
	staying, err := stayingClaims(ctx, c, node.Name)
	if err != nil {
		return nil, err
	}
	pvs := &corev1.PersistentVolumeList{}
	if err := c.List(ctx, pvs); err != nil {
		return nil, fmt.Errorf("list PersistentVolumes: %w", err)
	}
	var out []string
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		name := uniqueName(pv)
		attached := pvNames[pv.Name] || (name != "" && unique[name])
		delete(pvNames, pv.Name)
		delete(unique, name)
		if !attached {
			continue
		}
		if ref := pv.Spec.ClaimRef; ref != nil && staying[ref.Namespace+"/"+ref.Name] {
			continue
		}
		out = append(out, "PersistentVolume "+pv.Name)
	}
	for name := range pvNames {
		out = append(out, "PersistentVolume "+name)
	}
	for name := range unique {
		out = append(out, "volume "+name)
	}
	sort.Strings(out)
	return out, nil
}

// stayingClaims returns the PersistentVolumeClaims ("namespace/name") of the pods
// still on the node once it is drained.
func stayingClaims(ctx context.Context, c client.Client, nodeName string) (map[string]bool, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.MatchingFields{"spec.nodeName": nodeName}); err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", nodeName, err)
	}
	out := map[string]bool{}
	for _, p := range pods.Items {
		if finished(&p) {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				out[p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName] = true
			}
		}
	}
	return out, nil
}

// uniqueName is the name the attach/detach controller gives a CSI volume in
// node.status.volumesAttached; "" for other volume sources.
func uniqueName(pv *corev1.PersistentVolume) string {
	if csi := pv.Spec.CSI; csi != nil {
		return "kubernetes.io/csi/" + csi.Driver + "^" + csi.VolumeHandle
	}
	return ""
}
