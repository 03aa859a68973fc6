// Package swupdate is the OS backend for A/B partition systems updated with
// SWUpdate (.swu images) and booted by U-Boot (or any bootloader whose
// environment libubootenv's fw_printenv/fw_setenv can edit).
//
// Artifact: Ref is the path of a .swu file on the node; Digest is the sha256 of
// that file. Stage checks the digest, then `swupdate -c` (signature,
// sw-description and hardware compatibility, without installing) before
// anything is written; either failure is ErrArtifactRefused.
//
// SWUpdate writes images; it does not decide what boots. This backend follows
// the usual U-Boot A/B convention for that:
//
//	<SlotVar>          the slot the bootloader boots (e.g. "A" or "B")
//	upgrade_available  1 while an update is on trial: U-Boot counts boots in
//	                   bootcount and falls back (altbootcmd) past bootlimit
//	bootcount          reset to 0 on activate and commit
//
// Stage installs into the inactive slot with `swupdate -i <swu> -e <selection>`
// (each slot has its own software set/mode in sw-description, e.g.
// stable,copy1 and stable,copy2). Activate sets the environment to boot that
// slot on trial; Verify checks that the booted slot (from root= on the kernel
// command line) holds the artifact; Commit clears upgrade_available; Rollback
// points the bootloader back at the previous slot.
//
// Which digest each slot holds is recorded in StateDir: a slot's record is
// cleared before it is written and set only after SWUpdate succeeded.
//
// Allowed imports: the standard library and internal/backend. All commands go
// through backend.Runner.
package swupdate
