// Package drain evicts the pods of one node without ever blocking its caller for
// long: each attempt lists the pods that must go, sends one eviction per pod
// through the Eviction API (so PodDisruptionBudgets are honoured), and returns
// what blocks, by pod and PDB name. The caller turns that into a requeue and a
// message; CAPI's 10 s hook timeout leaves no room to wait.
//
//   - AttemptMachine drains as Cluster API's machine controller drains a Machine's
//     node, through Cluster API's own exported drain helper: MachineDrainRules
//     (Drain with order, Skip, WaitCompleted; matched by Machine, Cluster, pod and
//     namespace labels) and the cluster.x-k8s.io/drain pod label; DaemonSet and
//     mirror pods stay, emptyDir data is accepted as lost.
//   - AttachedVolumes lists the volumes still attached to a drained node, which an
//     update waits for before the node may reboot.
//
// Cordoning is not here: the coordinator cordons with its own marker annotation so
// that it only ever uncordons what it cordoned.
//
// Imports: k8s.io/api, apimachinery, controller-runtime's client,
// sigs.k8s.io/cluster-api (api/core/v1beta2, core/reconcilers/machine/drain).
package drain
