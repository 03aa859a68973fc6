// Package backend defines how the node agent swaps a node's OS image, whatever the
// mechanism: OSTree/rpm-ostree, bootc, A/B partitions (RAUC, SWUpdate, Mender),
// packages, a user script, or nothing at all. Each mechanism lives in its own
// package under internal/backend/<name> and depends only on this one.
//
// Backends shell out through Runner, never os/exec directly, so that every backend
// can be tested against recorded real outputs where the real tool cannot run.
//
// Contract, in the order the agent calls it for one artifact:
//
//	Stage     fetch and verify the artifact (digest) and write it beside the running
//	          image; must not change what the node boots or runs. Refuses a corrupt
//	          or wrong-digest artifact before changing anything.
//	Activate  make the staged image the next boot (or apply it live when
//	          Capabilities.NeedsReboot is false).
//	          ---- reboot here when NeedsReboot ----
//	Verify    confirm the running (booted) image is the artifact.
//	Commit    mark the running image good (boot counting ends).
//	Rollback  return to the image that ran before Activate; valid after Stage,
//	          Activate or Verify, and a no-op when nothing was changed.
//
// Every method is idempotent: the agent journals before each call and repeats it
// after a crash or reboot.
package backend
