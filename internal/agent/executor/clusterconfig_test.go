package executor

import (
	"encoding/json"
	"testing"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestClusterConfigChanged: the control-plane config is re-rendered when the
// ClusterConfiguration's value changes, not when its encoding does.
func TestClusterConfigChanged(t *testing.T) {
	plan := func(cc string) *protocol.NodePlan {
		p := protocol.NewPlan("cp1")
		p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmNone}
		if cc != "" {
			p.ClusterConfiguration = json.RawMessage(cc)
		}
		return p
	}
	committed := func(cc string) json.RawMessage {
		raw, err := protocol.EncodePlan(plan(cc))
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	const cc = `{"apiServer":{"extraArgs":[{"name":"v","value":"2"}]},"etcd":{"local":{"dataDir":"/var/lib/etcd"}}}`
	tests := []struct {
		name      string
		committed json.RawMessage
		desired   string
		want      bool
	}{
		{"no ClusterConfiguration in the plan", committed(cc), "", false},
		{"nothing committed yet", nil, cc, true},
		{"same encoding", committed(cc), cc, false},
		{"same value, other key order and spacing", committed(cc),
			` { "etcd" : {"local":{"dataDir":"/var/lib/etcd"}}, "apiServer": {"extraArgs": [ {"value":"2","name":"v"} ]} }`, false},
		{"a changed value", committed(cc), `{"apiServer":{"extraArgs":[{"name":"v","value":"4"}]},"etcd":{"local":{"dataDir":"/var/lib/etcd"}}}`, true},
		{"a reordered list is a change", committed(`{"a":[1,2]}`), `{"a":[2,1]}`, true},
		{"committed plan without one", committed(""), cc, true},
		{"undecodable committed plan", json.RawMessage(`{`), cc, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := clusterConfigChanged(tt.committed, plan(tt.desired)); got != tt.want {
				t.Fatalf("clusterConfigChanged = %v, want %v", got, tt.want)
			}
		})
	}
}
