// Package workload turns the kubeconfig Secret Cluster API keeps for each Cluster
// into a rest config of that workload cluster: the one definition of
// kubeconfig-to-client shared by the coordinator (which caches clients by the
// kubeconfig's hash), `capi-inplace status` and the bench.
//
// Imports: client-go (rest, clientcmd), Cluster API's util/kubeconfig,
// controller-runtime's client (as the Secret reader) and the standard library.
package workload
