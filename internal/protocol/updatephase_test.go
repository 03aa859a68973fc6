package protocol

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestPhaseRecordRoundTrip(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	rec := PhaseRecord{Plan: "h1", Phase: UpdatePhaseRebooting, Start: t0, Since: t0.Add(time.Minute), Unreachable: t0.Add(2 * time.Minute), Seen: "x"}
	g.Expect(DecodePhaseRecord(rec.Encode())).To(Equal(rec))
	g.Expect(DecodePhaseRecord("not json")).To(Equal(PhaseRecord{}))
	g.Expect(DecodePhaseRecord(`{"plan":"h1"}`)).To(Equal(PhaseRecord{}), "a record without a time dates nothing")
}
