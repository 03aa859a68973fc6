// Package rauc is the OS backend for A/B (or A/B/R) slot systems updated with
// RAUC bundles.
//
// Artifact: Ref is the path of a signed RAUC bundle on the node; Digest is the
// sha256 of the bundle file. Stage checks the digest and then `rauc info`
// (which verifies the bundle's signature against the system keyring) before
// anything is installed; either failure is ErrArtifactRefused.
//
// Which slot holds the artifact is never remembered by guesswork: the bundle's
// image checksums (from `rauc info`) are kept in StateDir, and RAUC's own slot
// status (`rauc status --detailed --output-format=json`) records the checksum of
// the image each slot holds. A slot holds the artifact when its checksum matches.
//
// Steps: Stage installs into the inactive slot group (`rauc install`) when the
// system configuration sets activate-installed=false; otherwise installing would
// also switch the next boot, so Stage only verifies and Activate installs.
// Activate marks the slot active (`rauc status mark-active`); Verify checks that
// the booted slot holds the artifact; Commit is `rauc status mark-good booted`,
// which ends the bootloader's boot counting; Rollback marks the previous slot
// active again, before or after the reboot, and the slot holding the artifact
// bad, so that no bootloader tries it again without a new plan.
//
// Allowed imports: the standard library and internal/backend. All commands go
// through backend.Runner. RAUC itself runs as a D-Bus service; this package is
// only its client.
package rauc
