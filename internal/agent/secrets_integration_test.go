package agent_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestFailingUseraddLeaksNoPasswordHash: a plan whose user cannot be created
// (useradd refuses an unknown group) fails on the node, and the user's password
// hash appears nowhere the failure travels: not in any annotation of the Node
// (the status envelope the coordinator turns into the hook message, the Machine
// condition and Events), not in the agent's log, and not on the host's process
// table (the simulated host records every argv it ran).
func TestFailingUseraddLeaksNoPasswordHash(t *testing.T) {
	g := NewWithT(t)
	const secret = "SECRETHASHsecrethash0123456789"
	n := newNode(t, "wk-secret", "v1.36.0", false)
	n.start()
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))

	p := protocol.NewPlan(n.name)
	p.Machine = protocol.MachineRef{Namespace: "default", Name: n.name, Cluster: "c1"}
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmNone}
	users, _ := json.Marshal([]map[string]any{{"name": "deploy", "groups": "nope", "passwd": "$6$rounds=5000$SALTsalt$" + secret}})
	p.Users = users
	hash := n.publishPlan(p)

	st := n.waitPhase(g, hash, protocol.PhaseRolledBack, 60*time.Second)
	g.Expect(st.Message).To(ContainSubstring("group 'nope' does not exist"), "the failure is still explained")
	for k, v := range n.get().Annotations {
		g.Expect(v).NotTo(ContainSubstring(secret), "annotation %s", k)
	}
	g.Expect(n.read(".sim/commands.log")).To(ContainSubstring("useradd"))
	g.Expect(n.read(".sim/commands.log")).NotTo(ContainSubstring(secret))
	n.kill()
	g.Expect(strings.Contains(n.log.String(), secret)).To(BeFalse(), "agent log:\n%s", n.log.String())
}
