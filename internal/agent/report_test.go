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

// countingNodePatches is a clientset holding Node n1 that counts the patches of Nodes.
func countingNodePatches() (*fake.Clientset, *atomic.Int32) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	patches := &atomic.Int32{}
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches.Add(1)
		return false, nil, nil
	})
	return client, patches
}

// TestReporterSkipsRepeats: a status that differs only in UpdatedAt is not sent
// again, so the agent's own Node events cannot make it patch in a loop.
func TestReporterSkipsRepeats(t *testing.T) {
	g := NewWithT(t)
	client, patches := countingNodePatches()
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

// TestReporterCoalescesProgressWithinAPhase: a step further in the phase last sent
// waits out Coalesce (a newer status replaces it), a new phase is sent at once, and
// a burst of statuses (a files-only plan's ten) costs a patch per phase at most.
func TestReporterCoalescesProgressWithinAPhase(t *testing.T) {
	g := NewWithT(t)
	client, patches := countingNodePatches()
	r := &Reporter{Client: client, NodeName: "n1", Log: logr.Discard(), Coalesce: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	status := func() protocol.NodeStatus {
		n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		st, err := protocol.DecodeStatus(n.Annotations[inplacev1.StatusAnnotation])
		g.Expect(err).NotTo(HaveOccurred())
		return st
	}
	applying := func(step int) protocol.NodeStatus {
		return protocol.NodeStatus{PlanHash: "h1", Phase: protocol.PhaseApplying, Step: step, Steps: 5}
	}

	r.Report(applying(1))
	g.Eventually(patches.Load).Should(Equal(int32(1)))
	start := time.Now()
	r.Report(applying(2))
	r.Report(applying(3))
	g.Consistently(patches.Load, 500*time.Millisecond).Should(Equal(int32(1)), "progress within the phase waits")
	g.Eventually(func() int { return status().Step }, 2*time.Second, 20*time.Millisecond).Should(Equal(3), "the newest step, once")
	g.Expect(time.Since(start)).To(BeNumerically(">=", 900*time.Millisecond))
	g.Expect(patches.Load()).To(Equal(int32(2)))

	r.Report(applying(4))
	r.Report(protocol.NodeStatus{PlanHash: "h1", Phase: protocol.PhaseVerifying, Step: 4, Steps: 5})
	g.Eventually(func() protocol.Phase { return status().Phase }, 300*time.Millisecond, 10*time.Millisecond).
		Should(Equal(protocol.PhaseVerifying), "a new phase is sent at once")

	before := patches.Load()
	phases := []protocol.Phase{protocol.PhaseVerifying, protocol.PhaseVerifying, protocol.PhaseVerifying, protocol.PhaseCommitted}
	for i, ph := range phases {
		r.Report(protocol.NodeStatus{PlanHash: "h1", Phase: ph, Step: 4 + i/3, Steps: 5, Message: string(rune('a' + i))})
	}
	g.Eventually(func() protocol.Phase { return status().Phase }, 300*time.Millisecond, 10*time.Millisecond).Should(Equal(protocol.PhaseCommitted))
	g.Consistently(patches.Load, 1500*time.Millisecond).Should(BeNumerically("<=", before+2), "the held gate statuses are replaced by Committed")
	g.Expect(status().Phase).To(Equal(protocol.PhaseCommitted), "nothing older is sent after Committed")
}

// TestReporterSettlesTheFirstStatusOfAPlan: the first status of a plan waits
// Settle for a newer one, so a plan over within it costs one Node patch (its end);
// a status of a plan still running after Settle is sent then, and a reboot never
// waits.
func TestReporterSettlesTheFirstStatusOfAPlan(t *testing.T) {
	g := NewWithT(t)
	client, patches := countingNodePatches()
	r := &Reporter{Client: client, NodeName: "n1", Log: logr.Discard(), Settle: 400 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	state := func() string {
		n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return n.Annotations[inplacev1.StateAnnotation]
	}

	// A fast plan: applying, verifying, committed within the window.
	r.Report(protocol.NodeStatus{PlanHash: "h1", Phase: protocol.PhaseApplying, Step: 0, Steps: 3})
	r.Report(protocol.NodeStatus{PlanHash: "h1", Phase: protocol.PhaseVerifying, Step: 2, Steps: 3})
	r.Report(protocol.NodeStatus{PlanHash: "h1", Phase: protocol.PhaseCommitted, Step: 3, Steps: 3})
	g.Eventually(state, time.Second, 10*time.Millisecond).Should(Equal(string(protocol.PhaseCommitted)), "the end of a plan is sent at once")
	g.Consistently(patches.Load, 600*time.Millisecond).Should(Equal(int32(1)), "one patch for the whole plan")

	// A slow plan: its first status is sent once Settle is over.
	start := time.Now()
	r.Report(protocol.NodeStatus{PlanHash: "h2", Phase: protocol.PhaseApplying, Step: 0, Steps: 5})
	g.Consistently(patches.Load, 250*time.Millisecond).Should(Equal(int32(1)))
	g.Eventually(state, time.Second, 10*time.Millisecond).Should(Equal(string(protocol.PhaseApplying)))
	g.Expect(time.Since(start)).To(BeNumerically(">=", 400*time.Millisecond))
	g.Expect(patches.Load()).To(Equal(int32(2)))

	// A reboot as the first status of a plan (an agent that restarted) is not held.
	r.Report(protocol.NodeStatus{PlanHash: "h3", Phase: protocol.PhaseRebooting, Step: 2, Steps: 5})
	g.Eventually(state, 200*time.Millisecond, 10*time.Millisecond).Should(Equal(string(protocol.PhaseRebooting)))
}
