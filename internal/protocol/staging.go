package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// Staging: before the coordinator disturbs a node (cordon, drain), it asks the
// node's agent to fetch and verify everything the plan needs (StageItems, and the
// OS backend's own Stage where it can stage beside the running image) while the
// node still serves. The coordinator cordons only after the agent reports
// StagePhaseStaged for the plan's hash; a StagePhaseFailed report fails the update
// with nothing changed on the node.

// ArtifactDir is the host directory where the agent keeps staged artifacts, one
// file per digest (ArtifactPath).
const ArtifactDir = "/var/lib/capi-inplace/artifacts"

// ArtifactPath is the host path of the staged artifact with the digest
// ("sha256:<hex>" becomes ArtifactDir/sha256/<hex>). It is only a path: the
// digest is not validated here.
func ArtifactPath(digest string) string {
	algo, hex, _ := strings.Cut(digest, ":")
	return path.Join(ArtifactDir, algo, hex)
}

// StageItemName names an artifact of a plan in staging reports.
type StageItemName string

const (
	StageKubeadm StageItemName = "kubeadm"
	StageKubelet StageItemName = "kubelet"
	StageOSImage StageItemName = "os-image"
	// StageImages: the control-plane images the new kubeadm pulls (a control-plane
	// node whose version changes, when the plan carries kubeadm).
	StageImages StageItemName = "control-plane-images"
)

// StageItem is one file a plan needs on the node before it is applied.
type StageItem struct {
	Name     StageItemName
	Artifact BinaryArtifact
	// Executable: the file runs on the node, so its architecture must be the node's.
	Executable bool
	// Credentials are the plan's registry logins (RegistryCredential), for OCI sources.
	Credentials []RegistryCredential
}

// StageItems lists the files the agent downloads for the plan, in order.
func (p *NodePlan) StageItems() []StageItem {
	out := p.stageItems()
	for i := range out {
		out[i].Credentials = p.RegistryCredentials
	}
	return out
}

func (p *NodePlan) stageItems() []StageItem {
	var out []StageItem
	if b := p.Kubernetes.Binaries; b != nil {
		out = append(out, StageItem{Name: StageKubeadm, Artifact: b.Kubeadm, Executable: true},
			StageItem{Name: StageKubelet, Artifact: b.Kubelet, Executable: true})
	}
	if p.OS != nil && p.OS.Download != nil {
		out = append(out, StageItem{Name: StageOSImage, Artifact: *p.OS.Download})
	}
	return out
}

// NeedsStaging reports whether the plan has anything to stage before cordon:
// files to download or an OS image (its backend may stage it beside the running
// one).
func (p *NodePlan) NeedsStaging() bool { return p.OS != nil || len(p.StageItems()) > 0 }

// StagePhase is the phase of a node's staging of one plan.
type StagePhase string

const (
	StagePhaseStaging StagePhase = "Staging"
	StagePhaseStaged  StagePhase = "Staged"
	StagePhaseFailed  StagePhase = "Failed"
)

// Reasons of a StagePhaseFailed report.
const (
	// StageReasonDigestMismatch: a source served content with another digest.
	StageReasonDigestMismatch = "DigestMismatch"
	// StageReasonSizeMismatch: a source announced or sent another length than
	// the artifact's declared size.
	StageReasonSizeMismatch = "SizeMismatch"
	// StageReasonUnreachable: no source of an artifact answered with it.
	StageReasonUnreachable = "SourceUnreachable"
	// StageReasonWrongArchitecture: the binaries are for another platform than the node's.
	StageReasonWrongArchitecture = "WrongArchitecture"
	// StageReasonDiskFull: the node has no room for the artifact (ReasonDiskFull).
	StageReasonDiskFull = ReasonDiskFull
	// StageReasonTooLarge: an artifact is larger than the agent accepts.
	StageReasonTooLarge = "TooLarge"
	// StageReasonInvalidPlan: the plan cannot be opened or is not valid.
	StageReasonInvalidPlan = "InvalidPlan"
	// StageReasonOSStage: the OS backend refused or failed to stage the image.
	StageReasonOSStage = "OSStageFailed"
	// StageReasonNodeConfig: the pool's OS backend configuration cannot be written.
	StageReasonNodeConfig = "NodeConfigFailed"
	// StageReasonDeadline: the plan was not staged within the stage timeout
	// (inplacev1.StageTimeoutAnnotation).
	StageReasonDeadline = "DeadlineExceeded"
	// StageReasonImagePull: the container runtime could not pull a control-plane
	// image the new kubeadm names.
	StageReasonImagePull = "ImagePullFailed"
)

// Permanent reports whether a StagePhaseFailed report's cause stays when the node
// stages again: a source serving other bytes than the plan's digest or size, binaries for
// another architecture, an artifact over the agent's limit. Such a failure ends the
// update (and counts against the failure budget) instead of downloading again; any
// other (a source down, a full disk, an agent-side deadline, a failed pull, a plan
// the agent cannot open yet) is asked again until the staging deadline. The one
// place that classifies staging failures.
func (s StagingStatus) Permanent() bool {
	if s.Phase != StagePhaseFailed {
		return false
	}
	switch s.Reason {
	case StageReasonDigestMismatch, StageReasonSizeMismatch, StageReasonWrongArchitecture, StageReasonTooLarge:
		return true
	}
	return false
}

// StagingStatusVersion is the version of the StagingStatus envelope.
const StagingStatusVersion = 1

// StagingStatus is what the agent reports about staging a plan (on its Node,
// inplacev1.StagingStatusAnnotation).
type StagingStatus struct {
	V        int        `json:"v"`
	PlanHash string     `json:"planHash"`
	Phase    StagePhase `json:"phase"`
	// Item is the artifact in progress (or the one that failed).
	Item StageItemName `json:"item,omitempty"`
	// Done of Items artifacts are staged.
	Done  int `json:"done"`
	Items int `json:"items"`
	// Bytes of Size are fetched for Item; Size is 0 when the source did not say.
	Bytes int64 `json:"bytes,omitempty"`
	Size  int64 `json:"size,omitempty"`
	// Reason is the machine-readable cause of a StagePhaseFailed report.
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	Updated time.Time `json:"updated,omitzero"`
}

// ErrInvalidStagingStatus is wrapped by every decoding error of a staging status.
var ErrInvalidStagingStatus = errors.New("invalid staging status")

// EncodeStagingStatus serialises a staging status.
func EncodeStagingStatus(s StagingStatus) (string, error) {
	s.V = StagingStatusVersion
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encode staging status: %w", err)
	}
	return string(b), nil
}

// DecodeStagingStatus parses and validates a staging status annotation value, as
// DecodeStatus does (an identifier reason, bounded message and item).
func DecodeStagingStatus(value string) (StagingStatus, error) {
	var s StagingStatus
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		return StagingStatus{}, fmt.Errorf("%w: %w", ErrInvalidStagingStatus, err)
	}
	if s.V != StagingStatusVersion {
		return StagingStatus{}, fmt.Errorf("%w: envelope version %d, want %d", ErrInvalidStagingStatus, s.V, StagingStatusVersion)
	}
	switch s.Phase {
	case StagePhaseStaging, StagePhaseStaged, StagePhaseFailed:
	default:
		return StagingStatus{}, fmt.Errorf("%w: unknown phase %.32q", ErrInvalidStagingStatus, s.Phase)
	}
	if s.PlanHash == "" || len(s.PlanHash) > maxHashBytes {
		return StagingStatus{}, fmt.Errorf("%w: planHash %.64q is empty or too long", ErrInvalidStagingStatus, s.PlanHash)
	}
	if s.Items < 0 || s.Done < 0 || s.Done > s.Items || s.Bytes < 0 || s.Size < 0 {
		return StagingStatus{}, fmt.Errorf("%w: %d of %d items, %d of %d bytes", ErrInvalidStagingStatus, s.Done, s.Items, s.Bytes, s.Size)
	}
	if !validReason(s.Reason) {
		return StagingStatus{}, fmt.Errorf("%w: reason %.64q is not an identifier", ErrInvalidStagingStatus, s.Reason)
	}
	s.Message = BoundText(s.Message, MaxMessageBytes)
	s.Item = StageItemName(BoundText(string(s.Item), MaxNameBytes))
	return s, nil
}

// Progress is the staging progress in one short phrase ("kubelet 12.0 of 58.3 MiB,
// 1 of 2 artifacts staged").
func (s StagingStatus) Progress() string {
	mib := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }
	var b strings.Builder
	switch {
	case s.Item == StageImages && s.Phase == StagePhaseStaging:
		// Pulled by the container runtime, which reports no bytes to the agent.
		b.WriteString("pulling control-plane images, ")
	case s.Item != "" && s.Phase == StagePhaseStaging:
		b.WriteString(string(s.Item) + " " + mib(s.Bytes))
		if s.Size > 0 {
			b.WriteString(" of " + mib(s.Size))
		}
		b.WriteString(" MiB, ")
	}
	fmt.Fprintf(&b, "%d of %d artifacts staged", s.Done, s.Items)
	return b.String()
}

// EncodeStageTimeout is the value of inplacev1.StageTimeoutAnnotation: how long the
// agent may spend on one staging, counted on its own clock from when it starts. A
// duration and never an instant, because the node's clock need not agree with the
// coordinator's: a node 31 minutes ahead would find any instant "now + 30m" the
// coordinator sent already past, and fail every staging. The coordinator judges its
// own staging deadline on its own clock.
func EncodeStageTimeout(d time.Duration) string {
	return d.String()
}

// DecodeStageTimeout reads inplacev1.StageTimeoutAnnotation; ok is false for a
// missing, garbled or non-positive value (the agent's own limit applies then).
func DecodeStageTimeout(s string) (d time.Duration, ok bool) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, false
	}
	return d, true
}
