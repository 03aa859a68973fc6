package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// failingStatus is a management client whose first fail status writes fail as an
// overloaded API server fails them.
type failingStatus struct {
	client.Client
	fail   int32
	writes atomic.Int32
}

func (c *failingStatus) Status() client.SubResourceWriter {
	return failingStatusWriter{SubResourceWriter: c.Client.Status(), c: c}
}

type failingStatusWriter struct {
	client.SubResourceWriter
	c *failingStatus
}

func (w failingStatusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if w.c.writes.Add(1) <= w.c.fail {
		return errors.New("etcdserver: request timed out")
	}
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// machineCondition is the Machine's InPlaceUpdate condition as stored.
func (f *fixture) machineCondition(m *clusterv1.Machine) *metav1.Condition {
	f.t.Helper()
	stored := &clusterv1.Machine{}
	if err := f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored); err != nil {
		f.t.Fatal(err)
	}
	return meta.FindStatusCondition(stored.Status.Conditions, inplacev1.InPlaceUpdateCondition)
}

// TestDoneDoesNotWaitForTheSucceededCondition: a finished update answers done even
// while the management API server fails the Succeeded condition's write; the write
// is retried after the answer until it lands, with its Event recorded once.
func TestDoneDoesNotWaitForTheSucceededCondition(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("ok", "v1.35.0", false)
	m := f.machine("m-ok", "ok", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{})
	callUntil(t, f.coordinator(), req, "pick up plan", 3)
	hash := f.getNode("ok").Annotations[inplacev1.DesiredPlanAnnotation]
	g.Expect(hash).NotTo(BeEmpty())
	f.agentReports("ok", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted}, true)
	f.setKubelet("ok", "v1.36.0")

	mgmt := &failingStatus{Client: f.mgmt, fail: 2}
	c := f.coordinator(func(o *Options) { o.Client = mgmt })
	resp := &runtimehooksv1.UpdateMachineResponse{}
	c.UpdateMachine(f.ctx, req, resp)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.RetryAfterSeconds).To(BeZero(), resp.Message)
	g.Expect(f.getNode("ok").Spec.Unschedulable).To(BeFalse(), "done puts the node back in service before it answers")

	g.Expect(c.WaitForReports(f.ctx)).To(Succeed())
	g.Expect(mgmt.writes.Load()).To(BeNumerically(">=", 3), "the failed writes were retried")
	cond := f.machineCondition(m)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(cond.Reason).To(Equal(inplacev1.ReasonSucceeded))
	succeeded := 0
	for _, r := range f.rec.reasons() {
		if r == inplacev1.EventUpdateSucceeded {
			succeeded++
		}
	}
	g.Expect(succeeded).To(Equal(1))

	// Called again after done: same answer, the condition already holds, no new Event.
	writes, events := mgmt.writes.Load(), len(f.rec.reasons())
	c.UpdateMachine(f.ctx, req, resp)
	g.Expect(resp.RetryAfterSeconds).To(BeZero())
	g.Expect(c.WaitForReports(f.ctx)).To(Succeed())
	g.Expect(mgmt.writes.Load()).To(Equal(writes), "nothing to write")
	g.Expect(f.rec.reasons()).To(HaveLen(events))
}
