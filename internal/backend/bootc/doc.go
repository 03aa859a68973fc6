// Package bootc is the OS backend for bootable container images managed by
// bootc (Fedora/CentOS bootc, RHEL image mode).
//
// Artifact: Ref is a container image reference ("quay.io/org/os:tag" or
// "quay.io/org/os@sha256:..."), Digest is the manifest digest. The backend
// always switches to "<repository>@<digest>", so what boots is pinned by
// content: a tag that moved, or a registry that serves something else, cannot
// change it. `bootc upgrade` is not used because it follows the tag of the
// booted image rather than a digest.
//
// Steps: bootc has no download-only switch, so Stage only validates the
// reference (CanStage is false); Activate runs `bootc switch <repo>@<digest>`,
// which pulls and verifies the image and stages it for the next boot, and
// refuses a digest the registry does not have before anything is staged;
// Verify reads status.booted.image.imageDigest from `bootc status --json`;
// Commit has nothing to mark (boot counting is greenboot's); Rollback makes the
// image that ran before the update the next boot again with `bootc rollback`
// (which discards a staged image and toggles the queued rollback).
//
// Tests run on recorded outputs: bootc is not packaged in Debian and needs a
// booted bootc host. The outputs follow bootc's documented status schema
// (apiVersion org.containers.bootc/v1, kind BootcHost).
//
// Allowed imports: the standard library and internal/backend. All commands go
// through backend.Runner.
package bootc
