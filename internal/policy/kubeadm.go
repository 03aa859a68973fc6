package policy

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// KubeadmConfig configures the kubeadm commands the agent runs on nodes.
type KubeadmConfig struct {
	// IgnorePreflightErrors are kubeadm preflight checks every node's kubeadm
	// upgrade skips (--ignore-preflight-errors): e.g. SystemVerification where the
	// hosts run cgroup v1, CoreDNSUnsupportedPlugins and CoreDNSMigration where a
	// cluster runs without CoreDNS.
	IgnorePreflightErrors []string `json:"ignorePreflightErrors,omitempty"`
	// AllowIgnoreAllPreflightErrors must be true for "all" to be accepted in any
	// list: skipping every check also skips the ones that protect the node.
	AllowIgnoreAllPreflightErrors bool `json:"allowIgnoreAllPreflightErrors,omitempty"`
	// Pools add preflight exceptions for the machines they select.
	Pools []KubeadmPoolConfig `json:"pools,omitempty"`
	// EtcdRestore says whether the rollback of a control-plane update restores a
	// single-member etcd from the snapshot taken before the update, which drops
	// every write to the cluster since then: IfDataChanged (the default) only
	// when the update may have changed what etcd stores (a Kubernetes minor
	// version or etcd minor version change, protocol.RestoreEtcdOnRollback),
	// Always, or Never.
	EtcdRestore protocol.EtcdRestore `json:"etcdRestore,omitempty"`
}

// KubeadmPoolConfig adds preflight exceptions for one pool of machines.
type KubeadmPoolConfig struct {
	// Cluster is "<namespace>/<cluster name>"; empty matches every cluster.
	Cluster string `json:"cluster,omitempty"`
	// MachineSelector selects Machines by their labels, e.g.
	// cluster.x-k8s.io/deployment-name: md-0 or cluster.x-k8s.io/control-plane: "";
	// absent selects every Machine of the cluster.
	MachineSelector *metav1.LabelSelector `json:"machineSelector,omitempty"`
	// IgnorePreflightErrors are added to the global list for these machines.
	IgnorePreflightErrors []string `json:"ignorePreflightErrors"`
}

// kubeadmPool is a validated pool entry.
type kubeadmPool struct {
	namespace, cluster string // empty: every cluster
	selector           labels.Selector
	checks             []string
}

// compileKubeadm validates the kubeadm section.
func compileKubeadm(cfg KubeadmConfig) (global []string, pools []kubeadmPool, errs []error) {
	check := func(field string, names []string) {
		if err := protocol.ValidatePreflightChecks(names); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
		for _, n := range names {
			if strings.EqualFold(n, protocol.IgnoreAllPreflightErrors) && !cfg.AllowIgnoreAllPreflightErrors {
				errs = append(errs, fmt.Errorf("%s: %q skips every kubeadm preflight check; set kubeadm.allowIgnoreAllPreflightErrors to mean it", field, n))
			}
		}
	}
	if !cfg.EtcdRestore.Valid() {
		errs = append(errs, fmt.Errorf("kubeadm.etcdRestore %q is not %s, %s or %s", cfg.EtcdRestore,
			protocol.EtcdRestoreIfDataChanged, protocol.EtcdRestoreAlways, protocol.EtcdRestoreNever))
	}
	check("kubeadm.ignorePreflightErrors", cfg.IgnorePreflightErrors)
	global = cfg.IgnorePreflightErrors
	for i, pc := range cfg.Pools {
		field := fmt.Sprintf("kubeadm.pools[%d]", i)
		pool := kubeadmPool{selector: labels.Everything(), checks: pc.IgnorePreflightErrors}
		if pc.Cluster != "" {
			ns, name, ok := strings.Cut(pc.Cluster, "/")
			if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
				errs = append(errs, fmt.Errorf("%s.cluster %q is not <namespace>/<cluster>", field, pc.Cluster))
			}
			pool.namespace, pool.cluster = ns, name
		}
		if pc.MachineSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(pc.MachineSelector)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.machineSelector: %w", field, err))
			} else {
				pool.selector = sel
			}
		}
		if len(pc.IgnorePreflightErrors) == 0 {
			errs = append(errs, fmt.Errorf("%s.ignorePreflightErrors is empty: the entry would change nothing", field))
		}
		check(field+".ignorePreflightErrors", pc.IgnorePreflightErrors)
		pools = append(pools, pool)
	}
	return global, pools, errs
}

// IgnorePreflightErrors returns the kubeadm preflight checks a Machine's kubeadm
// commands skip: the global list and those of every pool that selects the
// Machine (by its namespace and labels; the cluster comes from CAPI's
// cluster-name label). The result is sorted and unique (kubeadm compares names in
// lower case), just "all" when any list says all, and nil when there are none, so
// that the plan, and its hash, do not depend on the policy's order.
func (p *Policy) IgnorePreflightErrors(namespace string, machineLabels map[string]string) []string {
	var names []string
	names = append(names, p.preflightGlobal...)
	for _, pool := range p.preflightPools {
		if pool.cluster != "" && (pool.namespace != namespace || pool.cluster != machineLabels[clusterNameLabel]) {
			continue
		}
		if pool.selector.Matches(labels.Set(machineLabels)) {
			names = append(names, pool.checks...)
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		key := strings.ToLower(n)
		if key == protocol.IgnoreAllPreflightErrors {
			return []string{protocol.IgnoreAllPreflightErrors}
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// EtcdRestore is the policy's kubeadm.etcdRestore as a plan carries it: empty
// for the default, IfDataChanged, so that a plan under the default is the same
// as before the setting existed (and an agent from then accepts it).
func (p *Policy) EtcdRestore() protocol.EtcdRestore {
	if p.etcdRestore == protocol.EtcdRestoreIfDataChanged {
		return ""
	}
	return p.etcdRestore
}
