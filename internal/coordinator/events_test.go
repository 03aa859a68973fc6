package coordinator

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// TestEventsLandOnTheMachine records through client-go's real event broadcaster (as
// a controller-runtime manager provides it) and reads the Events back from the API.
func TestEventsLandOnTheMachine(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	cs, err := kubernetes.NewForConfig(testEnv.Require(t))
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	g.Expect(b.StartRecordingToSinkWithContext(ctx)).To(Succeed())
	defer b.Shutdown()

	f.node("w6", "v1.36.0", false)
	f.node("w6-peer", "v1.36.0", false)
	m := f.machine("m-w6", "w6", "v1.36.0", false)
	c := f.coordinator(func(o *Options) { o.Recorder = b.NewRecorder(f.scheme, "capi-inplace") })
	callUntil(t, c, f.request(m, nil), "pick up plan", 3)

	g.Eventually(func(g Gomega) []string {
		list := &eventsv1.EventList{}
		g.Expect(f.mgmt.List(ctx, list, client.InNamespace(f.ns))).To(Succeed())
		var reasons []string
		for _, e := range list.Items {
			if e.Regarding.Kind == "Machine" && e.Regarding.Name == "m-w6" && e.Regarding.UID == m.UID {
				reasons = append(reasons, e.Reason)
			}
		}
		return reasons
	}, 10*time.Second, 200*time.Millisecond).Should(ContainElements(inplacev1.EventDrainStarted, inplacev1.EventPlanPublished))
}

// TestBarePodBlocksUnlessForce: a pod no controller recreates is lost if evicted, so
// it blocks the drain (and is named) unless the drain is forced.
func TestBarePodBlocksUnlessForce(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("w7", "v1.36.0", false)
	f.node("w7-peer", "v1.36.0", false)
	f.barePod("lonely", "w7")
	m := f.machine("m-w7", "w7", "v1.36.0", false)
	req := f.request(m, nil)

	start := time.Now()
	resp := call(f.coordinator(), req)
	g.Expect(time.Since(start)).To(BeNumerically("<", 4*time.Second), "one call stays well inside CAPI's 10 s hook timeout")
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(Equal("step 3/6: draining node w7: pod " + f.ns + "/lonely: no controller recreates it: evicting it loses it for good (the policy's drain.force evicts it)"))
	g.Expect(f.podExists("lonely")).To(BeTrue())

	forced := f.coordinator(func(o *Options) { o.Drain.Force = true })
	callUntil(t, forced, req, "pick up plan", 5)
	g.Expect(f.podExists("lonely")).To(BeFalse())
}
