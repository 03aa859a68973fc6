package policy

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestOSBackends(t *testing.T) {
	const pol = `
osBackends:
- cluster: edge/site-a
  machineSelector:
    matchLabels: {cluster.x-k8s.io/deployment-name: rauc-pool}
  config:
    rauc: {conf: /etc/rauc/system.conf}
- cluster: edge/site-a
  config:
    packages: {manager: apt}
`
	p, err := Parse([]byte(pol))
	if err != nil {
		t.Fatal(err)
	}
	lbl := func(cluster, md string) map[string]string {
		return map[string]string{clusterNameLabel: cluster, "cluster.x-k8s.io/deployment-name": md}
	}
	tests := []struct {
		name      string
		namespace string
		labels    map[string]string
		want      string
	}{
		{name: "the pool's entry", namespace: "edge", labels: lbl("site-a", "rauc-pool"), want: `{"rauc":{"conf":"/etc/rauc/system.conf"}}`},
		{name: "another pool of the cluster: the cluster's entry", namespace: "edge", labels: lbl("site-a", "md-0"), want: `{"packages":{"manager":"apt"}}`},
		{name: "another cluster: nothing", namespace: "edge", labels: lbl("site-b", "rauc-pool")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := p.OSBackends(tt.namespace, tt.labels)
			if tt.want == "" {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(string(got)).To(Equal(tt.want))
		})
	}

	bad := []struct{ name, yaml, wantErr string }{
		{name: "misspelt backend field", yaml: "osBackends:\n- config: {rauc: {confg: /etc/rauc/system.conf}}\n", wantErr: `osBackends[0].config: OS backend configuration: json: unknown field "confg"`},
		{name: "unknown backend", yaml: "osBackends:\n- config: {raucc: {}}\n", wantErr: `unknown field "raucc"`},
		{name: "no config", yaml: "osBackends:\n- cluster: edge/site-a\n", wantErr: "osBackends[0].config is empty"},
		{name: "bad cluster", yaml: "osBackends:\n- cluster: site-a\n  config: {packages: {}}\n", wantErr: `osBackends[0].cluster "site-a" is not <namespace>/<cluster>`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tt.yaml))
			g.Expect(err).To(MatchError(ErrInvalid))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}
