package policy

import (
	"errors"
	"testing"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// FuzzParse: the policy file is operator input read at start-up. Any bytes are
// refused with ErrInvalid or give a policy whose lookups answer without panicking,
// whose drain timeout is positive and each of whose gate pools fits the
// verifying deadline. Seeds: testdata/fuzz/FuzzParse (the
// package's sample policy, JSON, and near-misses).
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("parse error is not ErrInvalid: %v", err)
			}
			return
		}
		if p.Drain().TimeoutSeconds <= 0 {
			t.Fatalf("accepted a non-positive drain timeout: %+v", p.Drain())
		}
		for i, gp := range p.gatePools {
			if most := protocol.GatesMax(gp.gates, protocol.AgentGateDefaults()); most >= p.Deadlines().Verifying {
				t.Fatalf("accepted gates[%d], whose gates may take %s, with a verifying deadline of %s", i, most, p.Deadlines().Verifying)
			}
		}
		_ = p.AcceptBootstrapOnlyFields()
		_ = p.BackendFor("edge", "store-42")
		for _, kind := range []string{"AcmeMachine", "AcmeMachineTemplate", "Metal3Machine", "DevMachineTemplate", ""} {
			for _, group := range []string{"infrastructure.example.com", "infrastructure.cluster.x-k8s.io"} {
				_, _, _ = p.InfraKindFor(group, kind)
			}
			for _, image := range []any{"https://images.example.com/node-1.36.qcow2", map[string]any{"id": "0f3c"}, nil, 42} {
				if a, ok := p.LookupArtifact(kind, image); ok && a.Ref == "" {
					t.Fatalf("artifact without a ref for %s %v: %+v", kind, image, a)
				}
				_, _ = p.OSImageFor(kind, image, "edge", "store-42")
			}
		}
	})
}
