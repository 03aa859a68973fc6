package policy

import (
	"testing"

	. "github.com/onsi/gomega"
)

const preflightYAML = `
kubeadm:
  ignorePreflightErrors: [SystemVerification]
  pools:
  - cluster: edge/store-42
    ignorePreflightErrors: [CoreDNSUnsupportedPlugins, CoreDNSMigration]
  - machineSelector:
      matchLabels:
        cluster.x-k8s.io/deployment-name: md-gpu
    ignorePreflightErrors: [Swap, systemverification]
`

func TestIgnorePreflightErrors(t *testing.T) {
	p, err := Parse([]byte(preflightYAML))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	tests := []struct {
		name      string
		namespace string
		labels    map[string]string
		want      []string
	}{
		{"global only", "default", map[string]string{clusterNameLabel: "other"}, []string{"SystemVerification"}},
		{"the cluster's pool", "edge", map[string]string{clusterNameLabel: "store-42"}, []string{"CoreDNSMigration", "CoreDNSUnsupportedPlugins", "SystemVerification"}},
		{"same cluster name in another namespace", "lab", map[string]string{clusterNameLabel: "store-42"}, []string{"SystemVerification"}},
		{"selected by label, duplicates folded as kubeadm does", "lab", map[string]string{clusterNameLabel: "x", "cluster.x-k8s.io/deployment-name": "md-gpu"}, []string{"Swap", "SystemVerification"}},
		{"both pools", "edge", map[string]string{clusterNameLabel: "store-42", "cluster.x-k8s.io/deployment-name": "md-gpu"},
			[]string{"CoreDNSMigration", "CoreDNSUnsupportedPlugins", "Swap", "SystemVerification"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(p.IgnorePreflightErrors(tt.namespace, tt.labels)).To(Equal(tt.want))
		})
	}
	NewWithT(t).Expect(Builtin().IgnorePreflightErrors("default", nil)).To(BeNil(), "no exceptions unless configured")
}

func TestIgnoreAllPreflightErrorsNeedsOptIn(t *testing.T) {
	g := NewWithT(t)
	_, err := Parse([]byte("kubeadm:\n  pools:\n  - cluster: a/b\n    ignorePreflightErrors: [all]\n"))
	g.Expect(err).To(MatchError(ContainSubstring(`kubeadm.pools[0].ignorePreflightErrors: "all" skips every kubeadm preflight check; set kubeadm.allowIgnoreAllPreflightErrors`)))
	p, err := Parse([]byte("kubeadm:\n  allowIgnoreAllPreflightErrors: true\n  ignorePreflightErrors: [Swap]\n  pools:\n  - cluster: a/b\n    ignorePreflightErrors: [All]\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.IgnorePreflightErrors("a", map[string]string{clusterNameLabel: "b"})).To(Equal([]string{"all"}), "kubeadm refuses all alongside other checks")
	g.Expect(p.IgnorePreflightErrors("a", map[string]string{clusterNameLabel: "c"})).To(Equal([]string{"Swap"}))
}

func TestKubeadmPolicyValidation(t *testing.T) {
	tests := []struct {
		name, yaml, wantErr string
	}{
		{"comma inside a name", "kubeadm:\n  ignorePreflightErrors: [\"Swap,NumCPU\"]\n", `kubeadm.ignorePreflightErrors: [0] "Swap,NumCPU" is not a kubeadm preflight check name`},
		{"a flag smuggled in", "kubeadm:\n  ignorePreflightErrors: [\"--config=/tmp/x\"]\n", "is not a kubeadm preflight check name"},
		{"twice", "kubeadm:\n  ignorePreflightErrors: [Swap, SWAP]\n", "is listed twice"},
		{"bad cluster key", "kubeadm:\n  pools:\n  - cluster: store-42\n    ignorePreflightErrors: [Swap]\n", `kubeadm.pools[0].cluster "store-42" is not <namespace>/<cluster>`},
		{"bad selector", "kubeadm:\n  pools:\n  - machineSelector:\n      matchExpressions:\n      - {key: a, operator: Near}\n    ignorePreflightErrors: [Swap]\n", "kubeadm.pools[0].machineSelector"},
		{"empty pool", "kubeadm:\n  pools:\n  - cluster: a/b\n", "kubeadm.pools[0].ignorePreflightErrors is empty"},
		{"unknown field", "kubeadm:\n  ignorePreflightError: [Swap]\n", "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tt.yaml))
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(err).To(MatchError(ErrInvalid))
		})
	}
}
