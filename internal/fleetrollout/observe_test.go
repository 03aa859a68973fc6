package fleetrollout

import (
	"errors"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet/rollout"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func plainCluster(kcpVersion string, machines ...clusterv1.Machine) clusterObjects {
	return clusterObjects{
		Cluster:      &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: "stores"}},
		Namespace:    &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "stores", Labels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}},
		ControlPlane: &controlplanev1.KubeadmControlPlane{Spec: controlplanev1.KubeadmControlPlaneSpec{Version: kcpVersion}},
		Machines:     machines,
	}
}

// machine asks for version and its node reported that version's kubelet.
func machine(version string, conds ...metav1.Condition) clusterv1.Machine {
	return clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Labels: map[string]string{clusterv1.MachineControlPlaneLabel: ""}},
		Spec: clusterv1.MachineSpec{Version: version}, Status: clusterv1.MachineStatus{Conditions: conds,
			NodeInfo: &corev1.NodeSystemInfo{KubeletVersion: version}}}
}

// staged marks the Machine's update staged ahead of a closed maintenance window
// (the coordinator's phase record) while Cluster API updates it.
func staged(m clusterv1.Machine) clusterv1.Machine {
	m.Annotations = map[string]string{clusterv1.UpdateInProgressAnnotation: "",
		inplacev1.UpdatePhaseAnnotation: protocol.PhaseRecord{Plan: "h1", Phase: protocol.UpdatePhaseStaged, Start: time.Unix(1, 0), Since: time.Unix(1, 0)}.Encode()}
	m.Status.NodeInfo.KubeletVersion = from
	return m
}

func failedCond() metav1.Condition {
	return metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse, Reason: inplacev1.ReasonRolledBack, Message: "gate failed"}
}

func TestObserve(t *testing.T) {
	tests := []struct {
		name         string
		objs         func() clusterObjects
		wantProgress rollout.Progress
		wantReason   string
		wantBlocked  string
		wantStaged   bool
	}{
		{name: "not written yet", objs: func() clusterObjects { return plainCluster(from, machine(from)) }, wantProgress: rollout.NotStarted},
		{name: "written, the Machine not yet", objs: func() clusterObjects { return plainCluster(target, machine(from)) }, wantProgress: rollout.InProgress},
		{name: "every Machine at the target", objs: func() clusterObjects { return plainCluster(target, machine(target)) }, wantProgress: rollout.Reached},
		{name: "the kubelet not yet at the target", objs: func() clusterObjects {
			m := machine(target)
			m.Status.NodeInfo = &corev1.NodeSystemInfo{KubeletVersion: from}
			return plainCluster(target, m)
		}, wantProgress: rollout.InProgress},
		{name: "the node has not reported: not proven", objs: func() clusterObjects {
			m := machine(target)
			m.Status.NodeInfo = nil
			return plainCluster(target, m)
		}, wantProgress: rollout.InProgress},
		{name: "Cluster API's in-place update in progress, the kubelet already at the target", objs: func() clusterObjects {
			m := machine(target)
			m.Annotations = map[string]string{clusterv1.UpdateInProgressAnnotation: ""}
			return plainCluster(target, m)
		}, wantProgress: rollout.InProgress},
		{name: "our drain blocked", objs: func() clusterObjects {
			return plainCluster(target, machine(target, metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse, Reason: inplacev1.ReasonDrainBlocked}))
		}, wantProgress: rollout.InProgress},
		{name: "a Machine going away neither blocks nor proves", objs: func() clusterObjects {
			gone := machine(from)
			now := metav1.Now()
			gone.DeletionTimestamp = &now
			return plainCluster(target, machine(target), gone)
		}, wantProgress: rollout.Reached},
		{name: "only a Machine going away proves nothing", objs: func() clusterObjects {
			gone := machine(target)
			now := metav1.Now()
			gone.DeletionTimestamp = &now
			return plainCluster(target, gone)
		}, wantProgress: rollout.InProgress},
		{name: "Cluster API still updating the Machine", objs: func() clusterObjects {
			return plainCluster(target, machine(target, metav1.Condition{Type: clusterv1.MachineUpdatingCondition, Status: metav1.ConditionTrue, Reason: "InPlaceUpdating"}))
		}, wantProgress: rollout.InProgress},
		{name: "staged ahead of a closed window, waiting", objs: func() clusterObjects {
			return plainCluster(target, staged(machine(target)), machine(from))
		}, wantProgress: rollout.InProgress, wantStaged: true},
		{name: "staged, another Machine still staging: not waiting", objs: func() clusterObjects {
			return plainCluster(target, staged(machine(target)), machine(target, metav1.Condition{Type: clusterv1.MachineUpdatingCondition, Status: metav1.ConditionTrue, Reason: "InPlaceUpdating"}))
		}, wantProgress: rollout.InProgress},
		{name: "a failed update of the target", objs: func() clusterObjects { return plainCluster(target, machine(target, failedCond())) },
			wantProgress: rollout.Failed, wantReason: inplacev1.FleetReasonMachineFailed},
		{name: "a failure of an earlier update does not count", objs: func() clusterObjects { return plainCluster(target, machine(from, failedCond())) },
			wantProgress: rollout.InProgress},
		{name: "no Machine proves nothing", objs: func() clusterObjects { return plainCluster(target) }, wantProgress: rollout.InProgress},
		{name: "workers not at the target yet", objs: func() clusterObjects {
			o := plainCluster(target, machine(target))
			o.MachineDeployments = []clusterv1.MachineDeployment{{Spec: clusterv1.MachineDeploymentSpec{Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{Version: from}}}}}
			return o
		}, wantProgress: rollout.InProgress},
		{name: "the Cluster's own fleet controls halted", objs: func() clusterObjects {
			o := plainCluster(target, machine(from))
			o.Cluster.Status.Conditions = []metav1.Condition{{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse, Reason: inplacev1.ReasonHalted}}
			return o
		}, wantProgress: rollout.Failed, wantReason: inplacev1.FleetReasonClusterHalted},
		{name: "a namespace that did not opt in", objs: func() clusterObjects {
			o := plainCluster(from, machine(from))
			o.Namespace.Labels = nil
			return o
		}, wantProgress: rollout.NotStarted, wantBlocked: inplacev1.FleetReasonNotGuarded},
		{name: "the guard disabled on the Cluster", objs: func() clusterObjects {
			o := plainCluster(from, machine(from))
			o.Cluster.Annotations = map[string]string{inplacev1.GuardAnnotation: inplacev1.GuardDisabled}
			return o
		}, wantProgress: rollout.NotStarted, wantBlocked: inplacev1.FleetReasonNotGuarded},
		{name: "neither topology nor KubeadmControlPlane", objs: func() clusterObjects {
			o := plainCluster(from)
			o.ControlPlane = nil
			return o
		}, wantProgress: rollout.NotStarted, wantBlocked: inplacev1.FleetReasonUnsupported},
		{name: "a ClusterClass Cluster at the target", objs: func() clusterObjects {
			o := plainCluster("")
			o.ControlPlane = nil
			o.Cluster.Spec.Topology = clusterv1.Topology{ClassRef: clusterv1.ClusterClassRef{Name: "edge"}, Version: target}
			o.Machines = []clusterv1.Machine{machine(target)}
			return o
		}, wantProgress: rollout.Reached},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			o := observe(target, tt.objs())
			g.Expect(o.Progress).To(Equal(tt.wantProgress))
			g.Expect(o.Reason).To(Equal(tt.wantReason))
			g.Expect(o.Blocked).To(Equal(tt.wantBlocked))
			g.Expect(o.Staged).To(Equal(tt.wantStaged))
		})
	}
}

func TestClassify(t *testing.T) {
	// As the API server reports an admission webhook's admission.Denied
	// (apiserver's webhookerrors.ToStatusErr): 403, no details.
	denied := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: `admission webhook "guard.inplace.capi-inplace.dev" denied the request: would replace Machine m1`}}
	gr := schema.GroupResource{Group: "controlplane.cluster.x-k8s.io", Resource: "kubeadmcontrolplanes"}
	tests := []struct {
		name       string
		err        error
		want       rollout.Outcome
		wantReason string
	}{
		{"written", nil, rollout.Written, ""},
		{"refused by the guard", denied, rollout.Refused, inplacev1.FleetReasonWouldReplace},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "KubeadmControlPlane"}, "s1", field.ErrorList{field.Invalid(field.NewPath("spec", "version"), "v1.38.0", "skips a minor")}),
			rollout.Refused, inplacev1.FleetReasonWriteInvalid},
		{"RBAC: our own misconfiguration, tried again", apierrors.NewForbidden(gr, "s1", errors.New("no")), rollout.NotWritten, ""},
		{"conflict: tried again", apierrors.NewConflict(gr, "s1", errors.New("changed")), rollout.NotWritten, ""},
		{"webhook unreachable: tried again", apierrors.NewInternalError(errors.New("failed calling webhook")), rollout.NotWritten, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, reason, msg := classify(tt.err)
			g.Expect(got).To(Equal(tt.want))
			g.Expect(reason).To(Equal(tt.wantReason))
			if tt.want == rollout.Refused {
				g.Expect(msg).NotTo(BeEmpty())
			}
		})
	}
}
