// Package drain evicts the pods of one node without ever blocking its caller for
// long: each Attempt lists the pods that must go (through k8s.io/kubectl/pkg/drain's
// filters: DaemonSet pods and mirror pods stay, emptyDir data is accepted as lost),
// sends one eviction per pod through the Eviction API (so PodDisruptionBudgets are
// honoured), and returns what blocks, by pod and PDB name. The caller turns that
// into a requeue and a message; CAPI's 10 s hook timeout leaves no room to wait.
//
// Cordoning is not here: the coordinator cordons with its own marker annotation so
// that it only ever uncordons what it cordoned.
//
// Imports: client-go, k8s.io/kubectl/pkg/drain, apimachinery; no controller-runtime.
package drain
