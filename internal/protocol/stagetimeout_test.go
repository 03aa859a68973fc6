package protocol

import (
	"testing"
	"time"
)

// TestStageTimeout: the stage bound travels as a duration; anything else (an
// instant, a garbled or non-positive value) is no bound, and the agent's own limit
// applies.
func TestStageTimeout(t *testing.T) {
	if d, ok := DecodeStageTimeout(EncodeStageTimeout(30 * time.Minute)); !ok || d != 30*time.Minute {
		t.Fatalf("round trip: %v %v", d, ok)
	}
	for _, v := range []string{"", "soon", "0s", "-5m", "2026-12-04T10:30:00Z"} {
		if d, ok := DecodeStageTimeout(v); ok {
			t.Errorf("DecodeStageTimeout(%q) = %v, want no bound", v, d)
		}
	}
}
