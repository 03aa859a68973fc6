package planner

import (
	"fmt"
	"slices"
	"strings"
)

// kubeadmCategory says how a KubeadmConfigSpec field is treated.
type kubeadmCategory int

const (
	// appliedOnNode: the agent (or kubeadm on the node) applies the change.
	appliedOnNode kubeadmCategory = iota + 1
	// bootstrapOnly: the field only acts while a machine bootstraps.
	bootstrapOnly
	// versionDerived: kubeadm feature gates, which KCP derives from the version.
	versionDerived
	// notAppliedOnNode: the field acts on a running node, but the agent does not
	// apply it (yet); the reason says what it would take.
	notAppliedOnNode
)

type kubeadmRule struct {
	path     []string
	category kubeadmCategory
	reason   string
}

const (
	reasonFiles          = "files are written on the node by the agent (inline content and content from Secrets)"
	reasonUsers          = "users are created and updated on the node by the agent"
	reasonNTP            = "NTP settings are applied on the node by the agent"
	reasonKubeletArgs    = "kubelet extra args are written to the kubelet's flags on the node and the kubelet is restarted"
	reasonComponentArgs  = "control-plane component args and volumes are applied to the static pod manifests by kubeadm on the node"
	reasonCertSANs       = "a new SAN needs the API server serving certificate regenerated (kubeadm certs renew apiserver after the ClusterConfiguration is updated), and the agent re-renders the control plane with --certificate-renewal=false, so the certificate would keep the old SANs"
	reasonEtcd           = "etcd's image tag and args are applied to its static pod manifest by kubeadm on the node, after an etcd snapshot"
	reasonBootstrapOnly  = "acts only while a machine bootstraps"
	reasonFeatureGates   = "kubeadm feature gates"
	reasonInitPhases     = "KubeadmControlPlane reads the first node's init configuration as a join configuration; its skipped phases that only kubeadm init has (e.g. addon/coredns, which kubeadm join refuses) have no join counterpart, so nothing changes on the node"
	kubeadmConfigGroupV1 = "bootstrap.cluster.x-k8s.io/v1beta2"
)

// kubeadmRules returns the KubeadmConfigSpec fields (paths relative to the spec) we
// do not refuse. The longest matching path wins.
func kubeadmRules() []kubeadmRule {
	return []kubeadmRule{
		{path: []string{"files"}, category: appliedOnNode, reason: reasonFiles},
		{path: []string{"users"}, category: appliedOnNode, reason: reasonUsers},
		{path: []string{"ntp"}, category: appliedOnNode, reason: reasonNTP},
		{path: []string{"initConfiguration", "nodeRegistration", "kubeletExtraArgs"}, category: appliedOnNode, reason: reasonKubeletArgs},
		{path: []string{"joinConfiguration", "nodeRegistration", "kubeletExtraArgs"}, category: appliedOnNode, reason: reasonKubeletArgs},
		{path: []string{"clusterConfiguration", "apiServer", "extraArgs"}, category: appliedOnNode, reason: reasonComponentArgs},
		{path: []string{"clusterConfiguration", "apiServer", "extraVolumes"}, category: appliedOnNode, reason: reasonComponentArgs},
		{path: []string{"clusterConfiguration", "apiServer", "certSANs"}, category: notAppliedOnNode, reason: reasonCertSANs},
		{path: []string{"clusterConfiguration", "controllerManager", "extraArgs"}, category: appliedOnNode, reason: reasonComponentArgs},
		{path: []string{"clusterConfiguration", "controllerManager", "extraVolumes"}, category: appliedOnNode, reason: reasonComponentArgs},
		{path: []string{"clusterConfiguration", "scheduler", "extraArgs"}, category: appliedOnNode, reason: reasonComponentArgs},
		{path: []string{"clusterConfiguration", "scheduler", "extraVolumes"}, category: appliedOnNode, reason: reasonComponentArgs},
		{path: []string{"clusterConfiguration", "etcd", "local", "imageTag"}, category: appliedOnNode, reason: reasonEtcd},
		{path: []string{"clusterConfiguration", "etcd", "local", "extraArgs"}, category: appliedOnNode, reason: reasonEtcd},
		{path: []string{"clusterConfiguration", "featureGates"}, category: versionDerived, reason: reasonFeatureGates},

		{path: []string{"preKubeadmCommands"}, category: bootstrapOnly},
		{path: []string{"postKubeadmCommands"}, category: bootstrapOnly},
		{path: []string{"bootCommands"}, category: bootstrapOnly},
		{path: []string{"format"}, category: bootstrapOnly},
		{path: []string{"verbosity"}, category: bootstrapOnly},
		{path: []string{"initConfiguration", "bootstrapTokens"}, category: bootstrapOnly},
		{path: []string{"initConfiguration", "skipPhases"}, category: bootstrapOnly},
		{path: []string{"initConfiguration", "timeouts"}, category: bootstrapOnly},
		{path: []string{"joinConfiguration", "skipPhases"}, category: bootstrapOnly},
		{path: []string{"joinConfiguration", "timeouts"}, category: bootstrapOnly},
		{path: []string{"joinConfiguration", "discovery"}, category: bootstrapOnly},
	}
}

// kubeadmDecision decides one differing KubeadmConfigSpec field (rel is relative to
// the spec; full is the path shown to people).
func kubeadmDecision(rules []kubeadmRule, kind string, rel, full fieldPath, versionCovered, acceptBootstrapOnly bool) Decision {
	var best *kubeadmRule
	for i, r := range rules {
		if rel.hasPrefix(r.path) && (best == nil || len(r.path) > len(best.path)) {
			best = &rules[i]
		}
	}
	d := Decision{Object: kind, Field: full.String()}
	switch {
	case best == nil:
		d.Reason = fmt.Sprintf("%s field %s cannot be applied to a running node", kind, full)
	case best.category == appliedOnNode:
		d.Covered, d.Reason = true, best.reason
	case best.category == notAppliedOnNode:
		d.Reason = fmt.Sprintf("%s field %s is not applied in place: %s", kind, full, best.reason)
	case best.category == versionDerived && versionCovered:
		d.Covered = true
		d.Reason = "kubeadm feature gates change with the Kubernetes version (KCP derives them from it); kubeadm upgrade applies them on the node"
	case best.category == versionDerived:
		d.Reason = fmt.Sprintf("%s field %s: kubeadm feature gates change in place only together with a covered Kubernetes version upgrade", kind, full)
	case acceptBootstrapOnly:
		d.Covered = true
		d.Reason = fmt.Sprintf("%s %s; accepted as a no-op by the policy (acceptBootstrapOnlyFields)", full, reasonBootstrapOnly)
	default:
		d.Reason = fmt.Sprintf("%s field %s %s, so it cannot take effect on a running node; set acceptBootstrapOnlyFields in the policy to accept it as a no-op", kind, full, reasonBootstrapOnly)
	}
	return d
}

// kubeadmJoinPhases are the top-level phases of `kubeadm join` (kubeadm's
// cmd/kubeadm/app/cmd/join.go): a join configuration may skip only these, and
// kubeadm join refuses any other ("invalid phase name").
var kubeadmJoinPhases = []string{
	"preflight", "control-plane-prepare", "check-etcd", "kubelet-start", "etcd-join",
	"kubelet-wait-bootstrap", "control-plane-join", "wait-control-plane",
}

// initPhasesReadAsJoin reports whether the joinConfiguration.skipPhases of cur and
// des differ only by phases kubeadm join does not have, in cur. KubeadmControlPlane
// compares the first node's KubeadmConfig with its initConfiguration copied into
// joinConfiguration (PrepareKubeadmConfigsForDiff), while the KCP's own
// joinConfiguration cannot name init-only phases: a cluster without CoreDNS or
// kube-proxy would otherwise show a skipPhases change at every update of its first
// node. A real change of the phases a join skips is still a difference.
func initPhasesReadAsJoin(cur, des map[string]any) bool {
	path := fieldPath{"joinConfiguration", "skipPhases"}
	curPhases, desPhases := stringsAt(cur, path), stringsAt(des, path)
	joinOnly := slices.DeleteFunc(slices.Clone(curPhases), func(phase string) bool {
		top, _, _ := strings.Cut(phase, "/")
		return !slices.Contains(kubeadmJoinPhases, top)
	})
	return len(joinOnly) < len(curPhases) && slices.Equal(joinOnly, desPhases)
}

// stringsAt returns the list of strings at path in m, nil when absent or not a
// list of strings.
func stringsAt(m map[string]any, path fieldPath) []string {
	v, _ := lookup(m, path)
	items, _ := v.([]any)
	out := make([]string, 0, len(items))
	for _, v := range items {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		out = append(out, s)
	}
	return out
}

// capiPreviousDefaults are the KubeadmConfigSpec defaults Cluster API's webhooks
// once set and no longer do (bootstrap/kubeadm/webhooks/admission's
// ApplyPreviousKubeadmConfigDefaults; TestPreviousDefaultsAreCAPIs ties the two):
// its topology controller's dry-run requests still carry them, so that objects
// created before Cluster API dropped them compare equal.
var capiPreviousDefaults = []struct {
	path  []string
	value string
}{
	{[]string{"format"}, "cloud-config"},
	{[]string{"initConfiguration", "nodeRegistration", "imagePullPolicy"}, "IfNotPresent"},
	{[]string{"joinConfiguration", "nodeRegistration", "imagePullPolicy"}, "IfNotPresent"},
}

// reasonPreviousDefault: the field is absent on one side and at Cluster API's
// previous default on the other (capiPreviousDefaults), which means the same.
const reasonPreviousDefault = "Cluster API's previous default, the same as unset"

// previousDefault reports whether rel differs only by a previous Cluster API
// default: absent on one side, at the default on the other.
func previousDefault(rel fieldPath, cur, des map[string]any) bool {
	for _, d := range capiPreviousDefaults {
		if !slices.Equal(rel, d.path) {
			continue
		}
		c, cok := lookup(cur, d.path)
		n, nok := lookup(des, d.path)
		return (!cok && nok && n == d.value) || (cok && !nok && c == d.value)
	}
	return false
}
