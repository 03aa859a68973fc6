// Package simulated is an OS backend for tests and demos: a directory-based A/B
// image store under a host root directory, with the semantics of a real A/B
// mechanism (RAUC-like): two slots, a staged image written beside the booted one,
// a next-boot pointer, a boot that switches slots, mark-good and rollback.
//
// Layout under <host root>/var/lib/capi-inplace-sim/os:
//
//	state.json            {"booted":"a","next":"a","fallback":"","good":true}
//	slots/<a|b>/image     the artifact's bytes
//	slots/<a|b>/meta.json {"ref":...,"digest":...}
//
// Artifacts: a Ref starting with "sim:" is a named image whose content is the
// reference string itself (so its digest is sha256 of the ref, e.g.
// sha256("sim:os-v2")); any other Ref is a file path, looked up under the host root
// first and then as given. Either way the digest is checked before anything changes.
//
// The reboot itself is the simulated host's (internal/agent/simhost), which calls
// Boot (FallBack plays a bootloader's fallback from a failed trial); every other
// method is idempotent, as the backend contract requires.
//
// Imports: internal/backend, internal/protocol and the standard library.
package simulated
