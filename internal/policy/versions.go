package policy

// KubernetesVersions lists, sorted, the Kubernetes versions the policy names
// kubeadm and kubelet for (kubernetesBinaries). A chained upgrade steps through
// intermediate minors; the planner takes its step versions from these (and the
// ClusterClass) and requires an entry for each step when the target has one, so
// that every step is delivered the way the operator declared the target.
func (p *Policy) KubernetesVersions() []string { return sortedKeys(p.binaries) }
