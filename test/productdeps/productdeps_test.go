package productdeps

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/capi-inplace/capi-inplace"

// products are the shipped binaries.
var products = []string{module + "/cmd/capi-inplace", module + "/cmd/capi-inplace-agent", module + "/cmd/capi-inplace-etcd", module + "/cmd/capi-inplace-cel", module + "/cmd/kubectl-inplace"}

// harness are the packages (and package trees, with a trailing "/") no product
// binary may link.
var harness = []string{
	module + "/internal/agent/simhost",
	module + "/internal/backend/simulated",
	module + "/internal/localstack",
	module + "/internal/demo",
	module + "/bench",
	module + "/test/",
	module + "/internal/agent/etcd/etcdtest",
	module + "/internal/agent/helperbin/helperbintest",
	module + "/internal/backend/backendtest",
	module + "/internal/coordinator/coordinatortest",
	module + "/internal/extension/extensiontest",
	module + "/internal/preview/previewtest",
	module + "/internal/testenv",
	"sigs.k8s.io/controller-runtime/pkg/envtest",
	"github.com/onsi/ginkgo",
}

// agentForbidden are what the agent, which runs on every node, must not link on
// top of the harness: the extension's side (controller-runtime, the coordinator,
// the Cluster API types and their conversion code, which links gomega).
var agentForbidden = []string{
	"sigs.k8s.io/controller-runtime",
	"sigs.k8s.io/cluster-api/",
	module + "/internal/coordinator",
	module + "/internal/extension",
	module + "/internal/singlenode",
	module + "/internal/policy",
	module + "/internal/planner",
	"github.com/onsi/gomega",
	// etcd's client and etcdutl (with etcd's server packages) run in the helper
	// binary capi-inplace-etcd: linked into the agent they doubled its binary
	// (55 MB) and its idle memory (issue 15: < 40 MB, < 30 MiB).
	"go.etcd.io/etcd/",
	module + "/internal/agent/etcd/etcdhelper",
	// cel-go runs in the helper binary capi-inplace-cel, for CEL gates only: its
	// package initialisation (CEL's standard library, ANTLR's parser tables) cost
	// the idle agent about 3 MiB of RSS at every start, gate or no gate.
	"github.com/google/cel-go",
	// (internal/celgate links cel-go; its celproto, the wire, does not.)
	"github.com/antlr4-go/antlr",
	module + "/internal/celgate/celhelper",
}

// deps lists the packages pkg links (go list -deps, as the linker sees them:
// without test files).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	return strings.Fields(string(out))
}

// linked returns the packages of list that match one of the forbidden entries.
func linked(list, forbidden []string) []string {
	var bad []string
	for _, p := range list {
		for _, f := range forbidden {
			if p == strings.TrimSuffix(f, "/") || strings.HasPrefix(p, strings.TrimSuffix(f, "/")+"/") {
				bad = append(bad, p)
				break
			}
		}
	}
	return bad
}

func TestProductBinariesLinkNoHarness(t *testing.T) {
	for _, p := range products {
		list := deps(t, p)
		if len(list) < 50 {
			t.Fatalf("go list -deps %s listed only %d packages: %v", p, len(list), list)
		}
		if bad := linked(list, harness); len(bad) > 0 {
			t.Errorf("%s links test harness packages (move their use to test/cmd/capi-inplace-dev):\n  %s", p, strings.Join(bad, "\n  "))
		}
	}
}

func TestAgentLinksNoExtension(t *testing.T) {
	if bad := linked(deps(t, module+"/cmd/capi-inplace-agent"), agentForbidden); len(bad) > 0 {
		t.Errorf("capi-inplace-agent links the extension's side:\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestExtensionRunsNoAgent: the extension binary has no node agent (the hidden
// `capi-inplace agent` stayed while the real-node lane built its image from it;
// the lane now ships capi-inplace-agent with its etcd helper, as nodes do).
func TestExtensionRunsNoAgent(t *testing.T) {
	if bad := linked(deps(t, module+"/cmd/capi-inplace"), []string{module + "/internal/agent/agentcmd", module + "/internal/agent/executor"}); len(bad) > 0 {
		t.Errorf("capi-inplace links the node agent:\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestPluginLinksOnlyTheCLI: the kubectl plugin runs on operators' machines and
// reads the management cluster; it has neither the extension's side (hooks,
// coordinator, guard, single-node controller) nor the node agent. (etcd's client
// is linked, through Cluster API's KubeadmControlPlane packages that plan uses for
// KCP's desired state, as in capi-inplace.)
func TestPluginLinksOnlyTheCLI(t *testing.T) {
	list := deps(t, module+"/cmd/kubectl-inplace")
	forbidden := []string{
		module + "/internal/extension", module + "/internal/coordinator", module + "/internal/guard",
		module + "/internal/singlenode", module + "/internal/agent/",
	}
	if bad := linked(list, forbidden); len(bad) > 0 {
		t.Errorf("kubectl-inplace links more than the CLI:\n  %s", strings.Join(bad, "\n  "))
	}
	if len(linked(list, []string{module + "/internal/cli"})) == 0 {
		t.Errorf("kubectl-inplace does not link internal/cli: update this test")
	}
}

// TestEtcdHelperLinksEtcd keeps the agent's etcd entry honest: the helper binary
// links etcd's client and etcdutl, so a renamed module path fails here.
func TestEtcdHelperLinksEtcd(t *testing.T) {
	list := deps(t, module+"/cmd/capi-inplace-etcd")
	for _, want := range []string{"go.etcd.io/etcd/client/v3", "go.etcd.io/etcd/etcdutl/v3/snapshot"} {
		if len(linked(list, []string{want})) == 0 {
			t.Errorf("capi-inplace-etcd does not link %s: update agentForbidden", want)
		}
	}
}

// TestCELHelperLinksCEL keeps the agent's cel-go entry honest: the CEL helper
// links cel-go and the gate environment, so a renamed module path fails here.
func TestCELHelperLinksCEL(t *testing.T) {
	list := deps(t, module+"/cmd/capi-inplace-cel")
	for _, want := range []string{"github.com/google/cel-go/cel", module + "/internal/celgate", module + "/internal/celgate/celhelper"} {
		if len(linked(list, []string{want})) == 0 {
			t.Errorf("capi-inplace-cel does not link %s: update agentForbidden", want)
		}
	}
	// It evaluates an expression over JSON: none of the agent's Kubernetes client.
	if bad := linked(list, []string{"k8s.io/client-go", module + "/internal/agent/"}); len(bad) > 0 {
		t.Errorf("capi-inplace-cel links more than CEL:\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestHarnessBinaryLinksTheSimulator keeps the forbidden list honest: the harness
// binary does link the simulated host and the local stack, so a renamed package
// fails here instead of silently passing the product checks.
func TestHarnessBinaryLinksTheSimulator(t *testing.T) {
	list := deps(t, module+"/test/cmd/capi-inplace-dev")
	for _, want := range []string{module + "/internal/agent/simhost", module + "/internal/backend/simulated", module + "/internal/localstack", module + "/internal/demo"} {
		if len(linked(list, []string{want})) == 0 {
			t.Errorf("capi-inplace-dev does not link %s: update the harness list", want)
		}
	}
}

func TestLinked(t *testing.T) {
	for _, tc := range []struct {
		list, forbidden, want []string
	}{
		{[]string{"a/b", "a/bc", "a/b/c"}, []string{"a/b"}, []string{"a/b", "a/b/c"}},
		{[]string{"a/b", "a/bc", "a/b/c"}, []string{"a/b/"}, []string{"a/b", "a/b/c"}},
		{[]string{"x/test", "x/testing"}, []string{"x/test/"}, []string{"x/test"}},
		{[]string{"fmt"}, []string{"a"}, nil},
	} {
		if got := linked(tc.list, tc.forbidden); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("linked(%v, %v) = %v, want %v", tc.list, tc.forbidden, got, tc.want)
		}
	}
}
