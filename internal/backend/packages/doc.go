// Package packages is the OS backend for hosts whose Kubernetes binaries come
// from the distribution's package manager (apt or dnf) rather than an image.
//
// Artifact: Ref is a comma-separated set of exact pins,
// "kubeadm=1.36.0-1.1,kubelet=1.36.0-1.1,kubectl=1.36.0-1.1"; Digest is the
// sha256 of the canonical form of that set (see Digest), so the agent installs
// exactly the set the coordinator decided. The integrity of the packages
// themselves is apt's or dnf's signature checking on the repository metadata.
//
// Steps: Stage records the installed versions of the pinned packages (once, in
// StateDir, so that a repeated Stage after Activate cannot overwrite them) and
// downloads the pinned versions without installing them; a version the
// repositories do not have is ErrArtifactRefused. Activate installs the pins
// (downgrades allowed, holds kept) and applies live: NeedsReboot is false, and
// restarting kubelet is the Kubernetes layer's job. Verify compares the
// installed versions with the pins; Commit forgets the recorded versions;
// Rollback reinstalls the recorded versions and removes packages that were not
// installed before.
//
// Allowed imports: the standard library and internal/backend. All commands go
// through backend.Runner.
package packages
