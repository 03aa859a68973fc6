package executor

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestBootedImageIsNotRebooted: a plan whose OS image is the one the node already
// runs (an OS-mapped change whose image the node booted earlier, e.g. a files change
// of a pool that also names its image) applies the Kubernetes part without staging,
// activating or rebooting: the host boots once, not twice. Today's code rebooted
// every OS-mapped plan.
func TestBootedImageIsNotRebooted(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	p := workerPlan(true)
	p.OS = &protocol.OSImage{Backend: "simulated", Ref: simulated.InitialRef, Digest: simulated.DigestOf([]byte(simulated.InitialRef))}
	before, err := f.reboots.sim.Status(context.Background())
	g.Expect(err).NotTo(HaveOccurred())

	st, err := f.x.Start(context.Background(), p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	g.Expect(f.reboots.boot).To(BeZero(), "no reboot")
	after, _ := f.reboots.sim.Status(context.Background())
	g.Expect(after).To(Equal(before), "the image store is untouched")
	runs, _ := f.x.Runs()
	for _, a := range []string{"backend-stage", "backend-activate", "reboot", "backend-verify", "backend-commit"} {
		g.Expect(runs).NotTo(HaveKey(a))
	}
	g.Expect(runs).To(HaveKeyWithValue("write-files", 1), "the Kubernetes part still runs")

	// The contrast: another image is staged and booted.
	f2 := newFixture(t, nil)
	st, err = f2.x.Start(context.Background(), workerPlan(true))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	g.Expect(f2.reboots.boot).To(Equal(1))
}
