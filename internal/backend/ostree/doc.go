// Package ostree is the OS backend for OSTree systems, driven through the
// `ostree admin` CLI against a sysroot, or through rpm-ostree where the host
// uses it (Fedora CoreOS, RHEL for Edge).
//
// Artifact: Ref is "<source>:<ref>", where source is either an absolute path to
// a local OSTree repository (imported with `ostree pull-local --untrusted`, which
// re-checksums every object) or the name of a remote configured in the sysroot
// repository (`ostree pull`). Digest is "sha256:<commit checksum>": an OSTree
// commit checksum is a SHA-256 over the commit object, which in turn covers every
// file, so pinning it pins the whole tree. The ref is only a name: the digest is
// what is pulled and deployed.
//
// Steps: Stage pulls the commit and holds it with a ref (capi-inplace/staged) so
// that pruning cannot remove it; Activate runs `ostree admin deploy` (the new
// deployment becomes the default boot entry, the booted one stays as rollback);
// Verify reads the booted deployment from `ostree admin status`; Commit drops
// the staging ref (OSTree has no boot counting of its own: greenboot provides
// it); Rollback undeploys a deployment that has not booted yet, or, after it
// booted, deploys the previous commit again as the default.
//
// Invariants: nothing touches the deployment list before the commit is pulled
// and verified; every step reads the status first and does nothing when its
// effect is already there, so that the agent can repeat it.
//
// Allowed imports: the standard library and internal/backend. All commands go
// through backend.Runner.
package ostree
