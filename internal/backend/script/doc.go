// Package script is the OS backend for anything else: a user-provided executable
// that implements a small, documented contract.
//
// The agent runs `<script> <action>` where action is one of stage, activate,
// verify, commit, rollback or status, with these environment variables:
//
//	CAPI_INPLACE_ACTION           the action, repeated for convenience
//	CAPI_INPLACE_ARTIFACT_REF     the artifact reference (empty for status)
//	CAPI_INPLACE_ARTIFACT_DIGEST  "sha256:<hex>" (empty for status)
//
// The script may print one JSON object on stdout:
//
//	{"ok": true, "message": "...", "booted": "...", "staged": "...", "rollback": "..."}
//
// booted/staged/rollback are read for status only. Empty stdout is allowed.
// Exit codes carry the outcome, so that a script in any language can signal it:
//
//	0  success (unless the JSON says "ok": false, which is a failure)
//	2  artifact refused: corrupt or wrong digest, nothing was changed
//	3  verification failed: the running image is not the artifact
//	4  action not supported by this script
//	other  failure; the agent retries the step
//
// Every action must be idempotent: the agent repeats a step after a crash.
// Capabilities cannot be discovered without running the script, so they are
// declared in Options.
//
// Allowed imports: the standard library and internal/backend. All execution goes
// through backend.Runner.
package script
