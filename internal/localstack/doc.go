// Package localstack runs the whole upstream Cluster API v1.14.2 stack on this machine,
// without Docker: a real kube-apiserver and etcd (envtest) with every provider's CRDs
// and webhooks, the core, KubeadmControlPlane, kubeadm bootstrap and Dev (in-memory
// backend) managers as separate processes, runtime extensions over real HTTPS
// registered through ExtensionConfigs, our own ClusterClass with inline patches, and
// one simulated node agent process per Node of an in-memory workload cluster.
//
// The end-to-end tests (test/e2e) and the demo command both build on it:
//
//	stack, err := localstack.Start(ctx, localstack.Options{BinDir: "bin"})
//	defer stack.Stop()
//	ext, err := stack.StartExtension(ctx, localstack.OurExtension(bin, "capi-inplace", labels, nil))
//	err = stack.CreateNamespace(ctx, ns, labels)
//	err = stack.CreateClusterClass(ctx, ns, "inplace")
//	err = stack.CreateCluster(ctx, localstack.ClusterSpec{...})
//	agents, err := stack.StartAgents(ctx, ns, cluster, localstack.AgentOptions{})
//
// StartExtensionReplicas runs several processes of one extension behind a loopback
// Forwarder (replicas.go), as a Deployment's replicas behind its Service.
//
// Upstream's in-memory workload API server lacks parts of the Kubernetes API (see
// test/e2e/README.md). The agents therefore reach it through apiProxy, which adds field
// selectors on metadata.name, the status subresource and PATCH-as-PUT, and the
// provider's control-plane pods are marked as mirror pods (staticPodMarker), as a
// kubelet would; Options.DirectWorkloadAPI turns the proxy off. The in-memory provider
// binds the fixed port 19000, so one stack runs per machine (Start waits for it).
//
// Allowed imports: standard library, controller-runtime (client, envtest), k8s.io/*,
// sigs.k8s.io/cluster-api/api types, cluster-api's util/secret and util/certs (the
// certificates of an external etcd, externaletcd.go), api/v1alpha1, internal/workload (the one
// kubeconfig-to-client, for the API proxy and the static pod marker). Never the extension, coordinator or
// agent packages: the stack runs them as binaries (bin/capi-inplace for the extension,
// bin/capi-inplace-dev agent --simulate for the agents).
//
// Invariants:
//   - Every process the stack starts runs in its own process group with a parent-death
//     signal, and Stop kills each group by its id (TERM, then KILL), so nothing outlives
//     the test binary, also after a failure, an interrupt or a test time-out.
//   - Every process writes its output to a log file under the artifacts directory.
//   - Temporary directories (certs, simulated hosts, kubeconfigs) live under one root
//     that Stop removes unless Options.KeepTemp is set.
package localstack
