//go:build e2ereal

package e2ereal

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
	"github.com/capi-inplace/capi-inplace/test/realcapi"
)

// The lane's two releases and the address of this test's network namespace as the
// node containers see it.
const (
	from    = realcapi.From
	to      = realcapi.To
	gateway = realcapi.Gateway
)

// Labels of the namespaces the scenarios create: our extension serves them and the
// guard and the single-node hold webhook act on them.
const extensionName = "capi-inplace"

var suite struct {
	ctx       context.Context
	root      string
	artifacts string
	stack     *localstack.Stack
	ext       *localstack.Extension
	figures   *lanekit.Figures
	// nodeImage is the node image the DevMachineTemplates name (hack/realcapi/images.sh).
	nodeImage string
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Last, after the teardown's output: CI keeps the end of it.
	defer failed.Write(os.Stdout)
	wd, _ := os.Getwd()
	suite.root = filepath.Clean(filepath.Join(wd, "..", ".."))
	suite.artifacts = filepath.Join(suite.root, "_artifacts", "realcapi", "run-"+time.Now().UTC().Format("20060102-150405"))
	suite.figures = &lanekit.Figures{Title: "Real Cluster API lane figures"}
	if err := os.MkdirAll(suite.artifacts, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2ereal:", err)
		return 1
	}
	suite.nodeImage = os.Getenv("E2EREAL_NODE_IMAGE")
	agentImage, agentTar := os.Getenv("E2EREAL_AGENT_IMAGE"), os.Getenv("E2EREAL_AGENT_IMAGE_TAR")
	dockerHost := os.Getenv("DOCKER_HOST")
	if suite.nodeImage == "" || agentImage == "" || agentTar == "" || dockerHost == "" {
		fmt.Fprintln(os.Stderr, "e2ereal: E2EREAL_NODE_IMAGE, E2EREAL_AGENT_IMAGE, E2EREAL_AGENT_IMAGE_TAR and DOCKER_HOST must be set (make e2e-real sets them)")
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	suite.ctx = ctx
	start := time.Now()

	// The target release's control-plane images (the nodes hold their own release's
	// only), the agent and the scenarios' workload.
	mirrors, err := realcapi.StartMirrors(ctx, suite.root, filepath.Join(suite.artifacts, "registry"), map[string]string{
		agentImage:  agentTar,
		workloadRef: filepath.Join(suite.root, "_cache", "realcapi", "httpserve.tar"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2ereal:", err)
		return 1
	}
	defer mirrors.Close()
	policyFile := filepath.Join(suite.artifacts, "policy.yaml")
	if err := writePolicy(policyFile, mirrors); err != nil {
		fmt.Fprintln(os.Stderr, "e2ereal:", err)
		return 1
	}

	stack, err := localstack.Start(ctx, localstack.Options{
		BinDir:       filepath.Join(suite.root, "bin"),
		ArtifactsDir: suite.artifacts,
		Out:          os.Stdout,
		DockerHost:   dockerHost,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2ereal: start stack:", err)
		return 1
	}
	suite.stack = stack
	defer stack.Stop()

	// Tear down on SIGINT/SIGTERM and before go test's own -timeout panics, which
	// would skip deferred calls.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var watchdog <-chan time.Time
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > time.Minute {
			watchdog = time.After(d - 30*time.Second - time.Since(start))
		}
	}
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "e2ereal: %v: tearing down\n", s)
		case <-watchdog:
			fmt.Fprintln(os.Stderr, "e2ereal: test time-out about to fire: tearing down")
		case <-ctx.Done():
			return
		}
		cancel()
		stack.Stop()
		os.Exit(2)
	}()

	ext, err := stack.StartExtension(ctx, realcapi.Extension(filepath.Join(suite.root, "bin"), extensionName, policyFile, agentImage, map[string]string{extensionLabel: "true"}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2ereal: extension:", err)
		return 1
	}
	suite.ext = ext
	if err := registerWebhooks(ctx, stack, ext); err != nil {
		fmt.Fprintln(os.Stderr, "e2ereal:", err)
		return 1
	}
	suite.figures.Add("lane: management side up (registry, artifacts, Cluster API, extension)", time.Since(start))
	fmt.Printf("e2ereal: management side up in %s; logs in %s\n", time.Since(start).Round(time.Millisecond), suite.artifacts)

	code := m.Run()
	suite.figures.Add("lane: go test wall time", time.Since(start))
	if err := suite.figures.Write(filepath.Join(suite.root, "_artifacts", "realcapi", "figures.md")); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return code
}

// extensionLabel marks the lane's namespaces for the ExtensionConfig and the hold
// webhook.
const extensionLabel = "e2ereal.capi-inplace.dev/served"

// writePolicy writes the extension's policy: the lane's binaries, and the pool gates
// of the failure scenarios.
func writePolicy(path string, mirrors *realcapi.Mirrors) error {
	policy, err := mirrors.BinariesPolicy()
	if err != nil {
		return err
	}
	// The failure scenarios' pool gate: it fails while the node has
	// failUnhealthyFile, which their failing change delivers.
	failing := fmt.Sprintf(`  - name: %s
    command: ["/bin/sh", "-c", "test ! -e %s"]
    passWithinSeconds: 20
`, failGate, failUnhealthyFile)
	policy += fmt.Sprintf(`gates:
- cluster: %s/%s
  gates:
  # Ten seconds of gates at least, so the scenario's power cut finds them running.
  - name: settle
    command: ["/bin/sleep", "10"]
%s- cluster: %s/%s
  gates:
%s- cluster: %s/%s
  gates:
  # Ten seconds of gates at least, so the scenario's power cut finds them running.
  - name: settle
    command: ["/bin/sleep", "10"]
%s`, failNamespace, failCluster, failing, restoreNamespace, restoreCluster, failing, haNamespace, haCluster, failing)
	// The watchdog phases' pool (a worker of the pair, the single control plane):
	// gates that take a few seconds, so that the silence finds the agent in them,
	// and a verifying deadline the phase can wait out.
	deadlines := "deadlines:\n  pools:\n"
	for _, c := range []string{pairNamespace + "/" + pairCluster, singleNamespace + "/" + singleCluster} {
		policy += fmt.Sprintf(`- cluster: %s
  machineSelector:
    matchLabels: {%s: "true"}
  gates:
  - name: settle
    command: ["/bin/sleep", "10"]
    passWithinSeconds: 15
`, c, watchdogPoolLabel)
		deadlines += fmt.Sprintf(`  - cluster: %s
    machineSelector:
      matchLabels: {%s: "true"}
    verifyingSeconds: %d
`, c, watchdogPoolLabel, int(watchdogVerifying/time.Second))
	}
	policy += deadlines
	return os.WriteFile(path, []byte(policy), 0o600)
}
