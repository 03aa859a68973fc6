package policy

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// laneGatesYAML is the policy docs/gates.md shows for the real-node lane.
const laneGatesYAML = `
gates:
- cluster: realnode/realnode
  machineSelector:
    matchExpressions:
    - {key: cluster.x-k8s.io/control-plane, operator: Exists}
  gates:
  - name: lane-health
    command: ["/bin/sh", "-c", "test -f /etc/realnode/healthy"]
    passWithinSeconds: 20
- machineSelector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: md-gpu
  gates:
  - name: gpu-driver
    command: ["/usr/bin/nvidia-smi"]
    timeoutSeconds: 10
  - name: app-health
    command: ["/usr/bin/curl", "-fsS", "http://127.0.0.1:8080/healthz"]
`

func TestGatesPerPool(t *testing.T) {
	p, err := Parse([]byte(laneGatesYAML))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	lane := protocol.Gate{Name: "lane-health", Command: []string{"/bin/sh", "-c", "test -f /etc/realnode/healthy"}, PassWithinSeconds: 20}
	gpu := protocol.Gate{Name: "gpu-driver", Command: []string{"/usr/bin/nvidia-smi"}, TimeoutSeconds: 10}
	app := protocol.Gate{Name: "app-health", Command: []string{"/usr/bin/curl", "-fsS", "http://127.0.0.1:8080/healthz"}}
	cp := map[string]string{clusterNameLabel: "realnode", "cluster.x-k8s.io/control-plane": ""}
	tests := []struct {
		name      string
		namespace string
		labels    map[string]string
		want      []protocol.Gate
	}{
		{"control-plane machine of the cluster", "realnode", cp, []protocol.Gate{lane}},
		{"worker of the cluster", "realnode", map[string]string{clusterNameLabel: "realnode", "cluster.x-k8s.io/deployment-name": "md-0"}, nil},
		{"same cluster name in another namespace", "lab", cp, nil},
		{"another cluster in the namespace", "realnode", map[string]string{clusterNameLabel: "other", "cluster.x-k8s.io/control-plane": ""}, nil},
		{"machine without labels", "realnode", nil, nil},
		{"pool of every cluster, gates in policy order", "edge", map[string]string{clusterNameLabel: "store-42", "cluster.x-k8s.io/deployment-name": "md-gpu"}, []protocol.Gate{gpu, app}},
		{"both pools, in policy order", "realnode", map[string]string{clusterNameLabel: "realnode", "cluster.x-k8s.io/control-plane": "", "cluster.x-k8s.io/deployment-name": "md-gpu"}, []protocol.Gate{lane, gpu, app}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := p.Gates(tt.namespace, tt.labels)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}

	g := NewWithT(t)
	got, err := p.Gates("realnode", cp)
	g.Expect(err).NotTo(HaveOccurred())
	got[0].Command[0] = "/tmp/evil"
	again, err := p.Gates("realnode", cp)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again[0].Command[0]).To(Equal("/bin/sh"), "a caller cannot change the policy through the gates it got")

	none, err := Builtin().Gates("realnode", cp)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(none).To(BeNil(), "no gates unless configured")
}

// TestHTTPAndCELGatesFromThePolicy: the three kinds of gate reach the plan's
// gates as the policy gives them, and a caller cannot change the policy's copies.
func TestHTTPAndCELGatesFromThePolicy(t *testing.T) {
	g := NewWithT(t)
	p, err := Parse([]byte(`
gates:
- machineSelector: {matchLabels: {role: db}}
  gates:
  - name: db-ready
    httpGet: {url: "https://127.0.0.1:8443/readyz", expectedStatusMin: 200, expectedStatusMax: 204, insecureSkipVerify: true}
    timeoutSeconds: 5
  - name: pods-ready
    cel:
      expression: pods.all(p, p.status.conditions.exists(c, c.type == "Ready" && c.status == "True"))
    passWithinSeconds: 300
  - name: disk
    command: [/usr/local/bin/disk-ok]
`))
	g.Expect(err).NotTo(HaveOccurred())
	got, err := p.Gates("a", map[string]string{clusterNameLabel: "b", "role": "db"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]protocol.Gate{
		{Name: "db-ready", HTTPGet: &protocol.HTTPGetGate{URL: "https://127.0.0.1:8443/readyz", ExpectedStatusMin: 200, ExpectedStatusMax: 204, InsecureSkipVerify: true}, TimeoutSeconds: 5},
		{Name: "pods-ready", CEL: &protocol.CELGate{Expression: `pods.all(p, p.status.conditions.exists(c, c.type == "Ready" && c.status == "True"))`}, PassWithinSeconds: 300},
		{Name: "disk", Command: []string{"/usr/local/bin/disk-ok"}},
	}))
	got[0].HTTPGet.URL = "http://evil/"
	got[1].CEL.Expression = "true"
	again, err := p.Gates("a", map[string]string{clusterNameLabel: "b", "role": "db"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again[0].HTTPGet.URL).To(Equal("https://127.0.0.1:8443/readyz"))
	g.Expect(again[1].CEL.Expression).To(HavePrefix("pods.all"))
}

func TestGatesOfOverlappingPoolsMustNotClash(t *testing.T) {
	g := NewWithT(t)
	p, err := Parse([]byte(`
gates:
- cluster: a/b
  gates: [{name: health, command: [/bin/true]}]
- machineSelector: {matchLabels: {role: db}}
  gates: [{name: health, command: [/usr/local/bin/db-health]}]
`))
	g.Expect(err).NotTo(HaveOccurred(), "each pool's names are unique; pools may reuse a name")
	got, err := p.Gates("a", map[string]string{clusterNameLabel: "b"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(1))
	_, err = p.Gates("a", map[string]string{clusterNameLabel: "b", "role": "db"})
	g.Expect(err).To(MatchError(ContainSubstring(`gates of the pools that select the machine: [1].name "health" is listed twice`)))
}

func TestGatesPolicyValidation(t *testing.T) {
	entry := func(gate string) string {
		return "gates:\n- cluster: a/b\n  gates:\n  - " + gate + "\n"
	}
	tests := []struct {
		name, yaml, wantErr string
	}{
		{"bad cluster key", "gates:\n- cluster: b\n  gates: [{name: x, command: [/bin/true]}]\n", `gates[0].cluster "b" is not <namespace>/<cluster>`},
		{"bad selector", "gates:\n- machineSelector:\n    matchExpressions:\n    - {key: a, operator: Near}\n  gates: [{name: x, command: [/bin/true]}]\n", "gates[0].machineSelector"},
		{"empty pool", "gates:\n- cluster: a/b\n", "gates[0].gates is empty"},
		{"name twice in a pool", "gates:\n- gates:\n  - {name: x, command: [/bin/true]}\n  - {name: x, command: [/bin/false]}\n", `gates[0].gates[1].name "x" is listed twice`},
		{"name not a DNS label", entry("{name: Lane_Health, command: [/bin/true]}"), `gates[0].gates[0].name "Lane_Health" is not a DNS label`},
		{"no name", entry("{command: [/bin/true]}"), `[0].name "" is not a DNS label`},
		{"no kind", entry("{name: x}"), "gates[0].gates[0] has none of command, httpGet and cel: give exactly one"},
		{"empty command", entry("{name: x, command: []}"), "[0] has none of command, httpGet and cel"},
		{"two kinds", entry("{name: x, command: [/bin/true], cel: {expression: 'true'}}"), "gates[0].gates[0] has more than one of command, httpGet and cel"},
		{"file URL", entry("{name: x, httpGet: {url: 'file:///etc/shadow'}}"), `gates[0].gates[0].httpGet.url scheme "file" is not http or https`},
		{"URL with a password", entry("{name: x, httpGet: {url: 'https://u:p@127.0.0.1/'}}"), "[0].httpGet.url carries user info"},
		{"empty status range", entry("{name: x, httpGet: {url: 'http://127.0.0.1/', expectedStatusMin: 300, expectedStatusMax: 299}}"), "[0].httpGet.expected status range 300-299 is empty"},
		{"unknown httpGet field", entry("{name: x, httpGet: {url: 'http://127.0.0.1/', insecure: true}}"), `unknown field "insecure"`},
		{"CEL syntax error", entry("{name: x, cel: {expression: 'pods.all(p, '}}"), "gates[0].gates[0].cel.expression: CEL expression does not compile"},
		{"CEL of another type", entry("{name: x, cel: {expression: 'size(pods)'}}"), "gates[0].gates[0].cel.expression: CEL expression is of type int, want bool"},
		{"CEL unknown variable", entry("{name: x, cel: {expression: 'machine.ready'}}"), "undeclared reference to 'machine'"},
		{"CEL empty", entry("{name: x, cel: {expression: ''}}"), "[0].cel.expression is empty"},
		{"relative argv[0]", entry("{name: x, command: [curl, -f, http://127.0.0.1/]}"), `[0].command[0] "curl" is not a clean absolute path`},
		{"argument too long", entry("{name: x, command: [/bin/echo, " + strings.Repeat("y", protocol.MaxGateArgBytes+1) + "]}"), "[0].command[1] is 4097 bytes"},
		{"negative timeout", entry("{name: x, command: [/bin/true], timeoutSeconds: -1}"), "[0].timeoutSeconds -1 is not between 0 and 3600"},
		{"timeout too long", entry("{name: x, command: [/bin/true], timeoutSeconds: 3601}"), "timeoutSeconds 3601"},
		{"negative passWithin", entry("{name: x, command: [/bin/true], passWithinSeconds: -1}"), "[0].passWithinSeconds -1"},
		{"passWithin too long", entry("{name: x, command: [/bin/true], passWithinSeconds: 86400}"), "passWithinSeconds 86400 is not between 0 and 3600"},
		{"unknown gate field", entry("{name: x, command: [/bin/true], timeout: 5}"), `unknown field "timeout"`},
		{"unknown pool field", "gates:\n- clusters: a/b\n  gates: [{name: x, command: [/bin/true]}]\n", `unknown field "clusters"`},
		{"command as a string", entry("{name: x, command: /bin/true}"), "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, err := Parse([]byte(tt.yaml))
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(err).To(MatchError(ErrInvalid))
			g.Expect(p).To(BeNil())
		})
	}
}

func TestCELGatesPerCluster(t *testing.T) {
	p, err := Parse([]byte(laneGatesYAML + `
- cluster: edge/store-1
  machineSelector: {matchLabels: {role: db}}
  gates:
  - name: pods-ready
    cel: {expression: "pods.size() > 0"}
`))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	everywhere, err := Parse([]byte(`
gates:
- machineSelector: {matchLabels: {role: db}}
  gates:
  - name: pods-ready
    cel: {expression: "pods.size() > 0"}
`))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	tests := []struct {
		name               string
		p                  *Policy
		namespace, cluster string
		want               bool
	}{
		{"command gates only", p, "realnode", "realnode", false},
		{"a CEL gate of the cluster, whatever its machine selector", p, "edge", "store-1", true},
		{"same cluster name in another namespace", p, "lab", "store-1", false},
		{"a CEL gate of every cluster", everywhere, "any", "thing", true},
		{"built-in policy", Builtin(), "edge", "store-1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(tt.p.CELGates(tt.namespace, tt.cluster)).To(Equal(tt.want))
		})
	}
}
