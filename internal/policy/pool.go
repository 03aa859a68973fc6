package policy

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// PoolSelector selects a pool of Machines: those of one cluster, or of every
// cluster, whose labels match a selector. Every policy section that differs per
// pool embeds it, so that "which Machines does this entry apply to" has one
// answer (machinePool.selects).
type PoolSelector struct {
	// Cluster is "<namespace>/<cluster name>"; empty matches every cluster.
	Cluster string `json:"cluster,omitempty"`
	// MachineSelector selects Machines by their labels, e.g.
	// cluster.x-k8s.io/deployment-name: md-0 or cluster.x-k8s.io/control-plane: "";
	// absent selects every Machine of the cluster.
	MachineSelector *metav1.LabelSelector `json:"machineSelector,omitempty"`
}

// machinePool is a validated PoolSelector.
type machinePool struct {
	namespace, cluster string // empty: every cluster
	selector           labels.Selector
}

// compilePool validates a pool selector; field names the entry in errors.
func compilePool(field string, ps PoolSelector) (machinePool, []error) {
	var errs []error
	pool := machinePool{selector: labels.Everything()}
	if ps.Cluster != "" {
		ns, name, ok := strings.Cut(ps.Cluster, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			errs = append(errs, fmt.Errorf("%s.cluster %q is not <namespace>/<cluster>", field, ps.Cluster))
		}
		pool.namespace, pool.cluster = ns, name
	}
	if ps.MachineSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(ps.MachineSelector)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.machineSelector: %w", field, err))
		} else {
			pool.selector = sel
		}
	}
	return pool, errs
}

// selects reports whether the pool holds a Machine of the namespace with these
// labels; the Machine's cluster is CAPI's cluster-name label, which CAPI sets on
// every Machine.
func (mp machinePool) selects(namespace string, machineLabels map[string]string) bool {
	if mp.cluster != "" && (mp.namespace != namespace || mp.cluster != machineLabels[clusterNameLabel]) {
		return false
	}
	return mp.selector.Matches(labels.Set(machineLabels))
}

// String names the pool's Machines in a few words, for errors.
func (mp machinePool) String() string {
	s := "every cluster"
	if mp.cluster != "" {
		s = "cluster " + mp.namespace + "/" + mp.cluster
	}
	if !mp.selector.Empty() {
		s += ", Machines " + mp.selector.String()
	}
	return s
}
