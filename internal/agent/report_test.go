package agent

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestReporterRetriesUntilTheAPIServerAnswers: reports made during an outage are
// not lost; the newest one wins; Committed also sets current-plan.
func TestReporterRetriesUntilTheAPIServerAnswers(t *testing.T) {
	g := NewWithT(t)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	var failures atomic.Int32
	failures.Store(3)
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Load() > 0 {
			failures.Add(-1)
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	r := &Reporter{Client: client, NodeName: "n1", Log: logr.Discard(), MaxBackoff: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	r.Report(protocol.NodeStatus{PlanHash: "h1", Phase: protocol.PhaseApplying, Step: 1, Steps: 3})
	r.Report(protocol.NodeStatus{PlanHash: "h1", Phase: protocol.PhaseCommitted, Step: 3, Steps: 3})
	g.Eventually(func() map[string]string {
		n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		return n.Annotations
	}, 5*time.Second).Should(And(
		HaveKeyWithValue(inplacev1.StateAnnotation, "Committed"),
		HaveKeyWithValue(inplacev1.CurrentPlanAnnotation, "h1"),
	))
	g.Expect(failures.Load()).To(BeZero())
	n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	st, err := protocol.DecodeStatus(n.Annotations[inplacev1.StatusAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
}

// TestReporterSkipsRepeats: a status that differs only in UpdatedAt is not sent
// again, so the agent's own Node events cannot make it patch in a loop.
func TestReporterSkipsRepeats(t *testing.T) {
	g := NewWithT(t)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	var patches atomic.Int32
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches.Add(1)
		return false, nil, nil
	})
	r := &Reporter{Client: client, NodeName: "n1", Log: logr.Discard()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	s := protocol.NodeStatus{PlanHash: "h1", Phase: protocol.PhasePending, Message: "waiting"}
	for i := 0; i < 5; i++ {
		s.UpdatedAt = time.Unix(int64(1000+i), 0)
		r.Report(s)
		time.Sleep(20 * time.Millisecond)
	}
	g.Eventually(patches.Load).Should(Equal(int32(1)))
	g.Consistently(patches.Load, 200*time.Millisecond).Should(Equal(int32(1)))
	s.Phase = protocol.PhaseStaging
	r.Report(s)
	g.Eventually(patches.Load).Should(Equal(int32(2)))
}
