package preview

// DesiredPatch is desiredPatch, for the external tests.
var DesiredPatch = desiredPatch
