// Package mender is the OS backend for A/B partition systems updated with
// Mender rootfs-image Artifacts in standalone mode: the `mender` client 3.x or
// `mender-update` 4.x+, which share the verbs install, commit, rollback and
// show-artifact.
//
// Artifact: Ref is the path of a .mender file on the node; Digest is the sha256
// of the file. Stage checks the digest and then `mender-artifact validate`
// (payload checksums, and the signature when a verify key is configured)
// before anything changes; either failure is ErrArtifactRefused. The Artifact
// name (from `mender-artifact read`) is what identifies the running image.
//
// Steps: `mender install` writes the inactive partition and points the
// bootloader at it on trial in one step, so it cannot be a Stage: CanStage is
// false, Stage only verifies, and Activate installs. Verify accepts the
// Artifact name from `mender show-artifact` (which Mender updates only on
// commit) or, before commit, Mender's own rule for the running partition: the
// trial is armed (upgrade_available=1, cleared by the bootloader when it falls
// back) and the root in `mount` is the partition mender_boot_part names.
// Commit is `mender commit`
// (which ends the trial; exit 2 "nothing to commit" means already committed);
// Rollback is `mender rollback` (exit 2 means there is no update in progress,
// so nothing to undo).
//
// Allowed imports: the standard library and internal/backend. All commands go
// through backend.Runner.
package mender
