package protocol

import "testing"

// TestStagingProgress: the phrase the hook's message and `status` show. The
// control-plane images are pulled by the container runtime, which reports no
// bytes: "control-plane-images 0.0 MiB" (the real-node lane) said nothing true.
func TestStagingProgress(t *testing.T) {
	tests := []struct {
		name string
		st   StagingStatus
		want string
	}{
		{"download with a size", StagingStatus{Phase: StagePhaseStaging, Item: StageKubelet, Bytes: 12 << 20, Size: 58 << 20, Done: 1, Items: 3}, "kubelet 12.0 of 58.0 MiB, 1 of 3 artifacts staged"},
		{"download without a size", StagingStatus{Phase: StagePhaseStaging, Item: StageOSImage, Bytes: 1 << 20, Items: 1}, "os-image 1.0 MiB, 0 of 1 artifacts staged"},
		{"images", StagingStatus{Phase: StagePhaseStaging, Item: StageImages, Done: 2, Items: 3}, "pulling control-plane images, 2 of 3 artifacts staged"},
		{"staged", StagingStatus{Phase: StagePhaseStaged, Done: 3, Items: 3}, "3 of 3 artifacts staged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.st.Progress(); got != tt.want {
				t.Errorf("Progress() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestStagingPermanent: the one classification of staging failures; a permanent
// cause ends the update, any other is staged again until the staging deadline.
func TestStagingPermanent(t *testing.T) {
	for _, tt := range []struct {
		phase  StagePhase
		reason string
		want   bool
	}{
		{StagePhaseFailed, StageReasonDigestMismatch, true},
		{StagePhaseFailed, StageReasonSizeMismatch, true},
		{StagePhaseFailed, StageReasonWrongArchitecture, true},
		{StagePhaseFailed, StageReasonTooLarge, true},
		{StagePhaseFailed, StageReasonUnreachable, false},
		{StagePhaseFailed, StageReasonDiskFull, false},
		{StagePhaseFailed, StageReasonDeadline, false},
		{StagePhaseFailed, StageReasonImagePull, false},
		{StagePhaseFailed, StageReasonInvalidPlan, false},
		{StagePhaseFailed, StageReasonOSStage, false},
		{StagePhaseFailed, "", false},
		{StagePhaseStaging, StageReasonDigestMismatch, false},
	} {
		if got := (StagingStatus{Phase: tt.phase, Reason: tt.reason}).Permanent(); got != tt.want {
			t.Errorf("%s %q: Permanent() = %v, want %v", tt.phase, tt.reason, got, tt.want)
		}
	}
}
