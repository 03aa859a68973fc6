package agent_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/freeport"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// agentMetrics scrapes the agent's /metrics over HTTP: series (name with its
// labels, as exposed) to value.
func agentMetrics(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// TestAgentMetricsAfterACommittedPlan runs the real agent with --metrics-addr
// through a control-plane plan (apply, one reboot, verify, commit) and reads its
// metrics endpoint: one committed plan, each phase timed once, journal writes,
// the commit's time.
func TestAgentMetricsAfterACommittedPlan(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "cp-metrics", "v1.35.2", true)
	addr := freeAddr(t)
	n.start("--gate-timeout", "60s", "--metrics-addr", addr)
	g.Eventually(func() error { _, err := agentMetrics(addr); return err }, 20*time.Second).Should(Succeed())
	m, err := agentMetrics(addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_plans_total{outcome="committed"}`, 0.0))
	g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_last_committed_plan_timestamp_seconds`, 0.0))
	g.Expect(m).To(HaveKey("process_cpu_seconds_total"))

	before := time.Now()
	hash := n.publishPlan(cpPlan(n.name))
	n.waitPhase(g, hash, protocol.PhaseCommitted, 90*time.Second)
	m, err = agentMetrics(addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_plans_total{outcome="committed"}`, 1.0))
	g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_plans_total{outcome="rolled_back"}`, 0.0))
	// The plan runs apply twice, around its reboot: the OS image before it,
	// Kubernetes and files after it.
	for phase, runs := range map[string]float64{"stage": 1, "apply": 2, "reboot": 1, "verify": 1} {
		g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_phase_duration_seconds_count{phase="`+phase+`"}`, runs), phase)
	}
	g.Expect(m).NotTo(HaveKey(`capi_inplace_agent_phase_failures_total{phase="verify"}`))
	// One write before each action and one after it, at least.
	g.Expect(m[`capi_inplace_agent_journal_writes_total{result="ok"}`]).To(BeNumerically(">=", float64(len(n.runs()))))
	g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_journal_writes_total{result="error"}`, 0.0))
	g.Expect(m[`capi_inplace_agent_last_committed_plan_timestamp_seconds`]).To(BeNumerically(">=", float64(before.Unix())))
}

// TestAgentMetricsAfterARollback: a failed gate rolls the plan back; the metrics
// say which phase failed and time the rollback.
func TestAgentMetricsAfterARollback(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "cp-metrics-gate", "v1.35.2", true)
	addr := freeAddr(t)
	n.start("--gate-timeout", "3s", "--metrics-addr", addr)
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	g.Expect(os.WriteFile(n.sim("fail-gate"), []byte("etcd-health"), 0o644)).To(Succeed())

	hash := n.publishPlan(cpPlan(n.name))
	n.waitPhase(g, hash, protocol.PhaseRolledBack, 90*time.Second)
	m, err := agentMetrics(addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_plans_total{outcome="rolled_back"}`, 1.0))
	g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_plans_total{outcome="committed"}`, 0.0))
	g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_phase_failures_total{phase="verify"}`, 1.0))
	g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_phase_duration_seconds_count{phase="rollback"}`, 1.0))
	g.Expect(m).To(HaveKeyWithValue(`capi_inplace_agent_last_committed_plan_timestamp_seconds`, 0.0))
}
