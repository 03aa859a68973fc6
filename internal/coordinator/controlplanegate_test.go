package coordinator

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

func TestControlPlaneGate(t *testing.T) {
	done := func(name string) ControlPlaneMachine {
		return ControlPlaneMachine{Name: name, Version: "v1.36.3", Node: name, NodeKubelet: "v1.36.3"}
	}
	worker := func(machines ...ControlPlaneMachine) ControlPlaneGateInput {
		return ControlPlaneGateInput{Node: "w1", Worker: true, Target: "v1.36.3", Kubelet: "v1.35.4", Machines: machines}
	}
	tests := []struct {
		name        string
		in          ControlPlaneGateInput
		wantWait    ControlPlaneWait
		wantBlocker string
	}{
		{
			name: "the control plane is done: the worker goes on",
			in:   worker(done("cp1"), done("cp2"), done("cp3")),
		},
		{
			// The real-node defect: KCP set the last Machine's spec.version when it
			// started updating it; its API server still runs the old version.
			name:     "a control-plane Machine mid-update holds, though it asks for the target",
			in:       worker(done("cp1"), done("cp2"), ControlPlaneMachine{Name: "cp3", Version: "v1.36.3", Updating: true, Node: "cp3", NodeKubelet: "v1.35.4"}),
			wantWait: WaitMachineUpdating, wantBlocker: "cp3",
		},
		{
			name:     "a control-plane Machine that asks for an older version holds (the operator moved the workers first)",
			in:       worker(done("cp1"), ControlPlaneMachine{Name: "cp2", Version: "v1.35.4", Node: "cp2", NodeKubelet: "v1.35.4"}),
			wantWait: WaitMachineBehind, wantBlocker: "cp2",
		},
		{
			name:     "a control-plane node whose kubelet is behind holds, the Machine's update no longer marked",
			in:       worker(ControlPlaneMachine{Name: "cp1", Version: "v1.36.3", Node: "cp1", NodeKubelet: "v1.35.4"}, done("cp2")),
			wantWait: WaitNodeBehind, wantBlocker: "cp1",
		},
		{
			name:     "a control-plane node that reports no kubelet version holds",
			in:       worker(ControlPlaneMachine{Name: "cp1", Version: "v1.36.3", Node: "cp1"}),
			wantWait: WaitNodeBehind, wantBlocker: "cp1",
		},
		{
			name: "a control-plane Machine whose node has not joined (or is gone) is judged on its spec",
			in:   worker(ControlPlaneMachine{Name: "cp1", Version: "v1.36.3"}, done("cp2")),
		},
		{
			name: "a control plane at a newer version than the worker's target lets it go",
			in:   worker(ControlPlaneMachine{Name: "cp1", Version: "v1.37.0", Node: "cp1", NodeKubelet: "v1.37.0+k3s1"}),
		},
		{
			name: "a worker already started is never held",
			in: func() ControlPlaneGateInput {
				in := worker(ControlPlaneMachine{Name: "cp1", Version: "v1.35.4", Updating: true})
				in.Started = true
				return in
			}(),
		},
		{
			name: "a control-plane Machine's own update is never held",
			in: func() ControlPlaneGateInput {
				in := worker(ControlPlaneMachine{Name: "cp1", Version: "v1.36.3", Updating: true})
				in.Worker = false
				return in
			}(),
		},
		{
			name: "no control-plane Machines known: nothing to wait for",
			in:   worker(),
		},
		{
			name: "an update that keeps the kubelet's version (a file, an OS image) is not held",
			in: func() ControlPlaneGateInput {
				in := worker(ControlPlaneMachine{Name: "cp1", Version: "v1.35.4", Updating: true})
				in.Target = "v1.35.4"
				return in
			}(),
		},
		{
			name: "a patch-only raise is held as any raise",
			in: func() ControlPlaneGateInput {
				in := worker(ControlPlaneMachine{Name: "cp1", Version: "v1.35.5", Updating: true, Node: "cp1", NodeKubelet: "v1.35.4"})
				in.Target = "v1.35.5"
				return in
			}(),
			wantWait: WaitMachineUpdating, wantBlocker: "cp1",
		},
		{
			name: "a worker whose kubelet reports nothing counts as raised",
			in: func() ControlPlaneGateInput {
				in := worker(ControlPlaneMachine{Name: "cp1", Version: "v1.35.4"})
				in.Kubelet = ""
				return in
			}(),
			wantWait: WaitMachineBehind, wantBlocker: "cp1",
		},
		{
			name:     "a control-plane Machine without a version holds",
			in:       worker(ControlPlaneMachine{Name: "cp1"}),
			wantWait: WaitMachineBehind, wantBlocker: "cp1",
		},
		{
			name: "a target that does not parse orders nothing (the plan refuses it)",
			in: func() ControlPlaneGateInput {
				in := worker(ControlPlaneMachine{Name: "cp1", Updating: true})
				in.Target = "1.36"
				return in
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			v := ControlPlaneGate(tt.in)
			g.Expect(v.Wait).To(Equal(tt.wantWait))
			g.Expect(v.Blocker).To(Equal(tt.wantBlocker))
			if tt.wantWait == ControlPlaneReady {
				g.Expect(v).To(Equal(ControlPlaneVerdict{}))
				return
			}
			g.Expect(v.RetryAfter).To(Equal(retryControlPlane))
			g.Expect(v.Message).NotTo(BeEmpty())
		})
	}
}

// TestWorkerWaitsForTheControlPlane: a worker's update to a new kubelet version is
// answered in progress, untouched (no cordon, no plan), with the reason on its
// Machine, while a control-plane Machine carries Cluster API's update-in-progress
// annotation and then while that Machine's node reports the old kubelet; it starts
// once the control plane is there. With and without caches (held calls read the
// caches; the release is decided live).
func TestWorkerWaitsForTheControlPlane(t *testing.T) {
	for _, cached := range []bool{false, true} {
		name := "live"
		if cached {
			name = "cached"
		}
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, nil)
			p := "cpw-" + name + "-"
			f.node(p+"cp1", "v1.36.0", true)
			f.node(p+"cp2", "v1.35.0", true)
			f.node(p+"w1", "v1.35.0", false)
			cp1 := f.machine("m-"+p+"cp1", p+"cp1", "v1.36.0", true)
			f.annotate(cp1, clusterv1.UpdateInProgressAnnotation, "-") // done
			cp2 := f.machine("m-"+p+"cp2", p+"cp2", "v1.36.0", true)   // KCP is updating it
			w1 := f.machine("m-"+p+"w1", p+"w1", "v1.36.0", false)
			req := f.request(w1, nil)
			c := f.coordinator()
			if cached {
				c = f.cachedCoordinator(&requests{})
			}

			held := func(want string) {
				t.Helper()
				resp := callUntil(t, c, req, want, 20)
				g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
				g.Expect(resp.RetryAfterSeconds).To(Equal(int32(10)))
				g.Expect(resp.Message).To(HavePrefix("step 1/6: node " + p + "w1 waits for the control plane to be at v1.36.0"))
				n := f.getNode(p + "w1")
				g.Expect(n.Spec.Unschedulable).To(BeFalse(), "held before cordon")
				g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
				g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
				cond := f.machineCondition(w1)
				g.Expect(cond).NotTo(BeNil())
				g.Expect(cond.Reason).To(Equal(inplacev1.ReasonWaitingForControlPlane))
				g.Expect(cond.Message).To(ContainSubstring(want))
			}
			held("control-plane Machine m-" + p + "cp2 is being updated")
			held("control-plane Machine m-" + p + "cp2 is being updated") // a second call writes nothing new

			// Cluster API is done with the Machine, its node not yet at the version.
			f.annotate(cp2, clusterv1.UpdateInProgressAnnotation, "-")
			held("control-plane node " + p + "cp2 runs kubelet \"v1.35.0\"")
			g.Expect(strings.Count(strings.Join(f.rec.reasons(), " "), inplacev1.EventWaitingForControlPlane)).To(Equal(1), "one Event when the condition takes the reason")

			f.setKubelet(p+"cp2", "v1.36.0")
			callUntil(t, c, req, "pick up plan", 20)
			g.Expect(f.getNode(p + "w1").Spec.Unschedulable).To(BeTrue())
			cond := f.machineCondition(w1)
			g.Expect(cond.Reason).To(Equal(inplacev1.ReasonInProgress), "no longer shown waiting")

			// Started: the control plane moving again does not hold it back.
			f.annotate(cp2, clusterv1.UpdateInProgressAnnotation, "")
			g.Expect(call(c, req).Message).To(ContainSubstring("pick up plan"))
		})
	}
}
