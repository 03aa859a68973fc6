package previewtest

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/preview"
)

// SnapshotOf sorts objects into a preview.Snapshot, as preview.Gatherer would read
// them from an API server.
func SnapshotOf(objs []client.Object) (preview.Snapshot, error) {
	s := preview.Snapshot{Objects: map[preview.ObjectKey]*unstructured.Unstructured{}}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *clusterv1.Cluster:
			s.Cluster = o.DeepCopy()
		case *controlplanev1.KubeadmControlPlane:
			s.ControlPlane = o.DeepCopy()
		case *clusterv1.MachineDeployment:
			s.MachineDeployments = append(s.MachineDeployments, *o.DeepCopy())
		case *clusterv1.MachineSet:
			s.MachineSets = append(s.MachineSets, *o.DeepCopy())
		case *clusterv1.Machine:
			s.Machines = append(s.Machines, *o.DeepCopy())
		case *unstructured.Unstructured:
			s.Objects[preview.KeyOf(o)] = o.DeepCopy()
		default:
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				return preview.Snapshot{}, fmt.Errorf("convert %T: %w", obj, err)
			}
			u := &unstructured.Unstructured{Object: m}
			s.Objects[preview.KeyOf(u)] = u
		}
	}
	return s, nil
}

// MustSnapshot returns the Snapshot of a fixture or fails the test.
func MustSnapshot(t testing.TB, o Options) preview.Snapshot {
	t.Helper()
	objs, err := o.Objects()
	if err != nil {
		t.Fatal(err)
	}
	s, err := SnapshotOf(objs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
