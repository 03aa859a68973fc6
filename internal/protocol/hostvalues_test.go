package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestHostValueRules(t *testing.T) {
	tests := []struct {
		name string
		err  error
		bad  bool
	}{
		{"plain kubelet arg", ValidateKubeletArg(Arg{Name: "max-pods", Value: "110"}), false},
		{"kubelet arg with commas and <", ValidateKubeletArg(Arg{Name: "eviction-hard", Value: "nodefs.available<0%,imagefs.available<0%"}), false},
		{"empty kubelet value", ValidateKubeletArg(Arg{Name: "node-labels", Value: ""}), false},
		{"kubelet value with a quote", ValidateKubeletArg(Arg{Name: "v", Value: `2" EVIL="1`}), true},
		{"kubelet value with a newline", ValidateKubeletArg(Arg{Name: "v", Value: "2\nEVIL=1"}), true},
		{"kubelet value with a space", ValidateKubeletArg(Arg{Name: "v", Value: "2 --anonymous-auth=true"}), true},
		{"kubelet value with a backslash", ValidateKubeletArg(Arg{Name: "v", Value: `2\`}), true},
		{"kubelet value with a tab", ValidateKubeletArg(Arg{Name: "v", Value: "2\t3"}), true},
		{"kubelet name with =", ValidateKubeletArg(Arg{Name: "v=2 --x", Value: "1"}), true},
		{"kubelet name with a leading dash", ValidateKubeletArg(Arg{Name: "-v", Value: "1"}), true},
		{"user", ValidateUserName("ops", true), false},
		{"user with a dot, no sudo", ValidateUserName("jane.doe", false), false},
		{"user with a dot and sudo", ValidateUserName("jane.doe", true), true},
		{"user with a colon", ValidateUserName("a:b", false), true},
		{"user with a slash", ValidateUserName("../x", false), true},
		{"user with a newline", ValidateUserName("a\nroot", false), true},
		{"user starting with a dash", ValidateUserName("-o", false), true},
		{"empty user", ValidateUserName("", false), true},
		{"sudo rule", ValidateSudoRule("ops", "ALL=(ALL) NOPASSWD:ALL"), false},
		{"sudo rule with a newline", ValidateSudoRule("ops", "ALL=(ALL) ALL\nALL ALL=(ALL) NOPASSWD:ALL"), true},
		{"hash", ValidatePasswordHash("ops", "$6$salt$hash"), false},
		{"hash with a colon", ValidatePasswordHash("ops", "$6$x\nroot:$6$y"), true},
		{"home", ValidateHomeDir("ops", "/srv/ops"), false},
		{"relative home", ValidateHomeDir("ops", "../../tmp"), true},
		{"unclean home", ValidateHomeDir("ops", "/home/../etc"), true},
		{"ntp host", ValidateNTPServer("0.pool.ntp.org"), false},
		{"ntp ipv6", ValidateNTPServer("2001:db8::1"), false},
		{"ntp with a newline", ValidateNTPServer("a\nserver evil"), true},
		{"ntp with a space", ValidateNTPServer("a iburst"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.bad != (tt.err != nil) {
				t.Fatalf("got %v, want unsafe=%v", tt.err, tt.bad)
			}
			if tt.bad && !errors.Is(tt.err, ErrUnsafeHostValue) {
				t.Fatalf("%v does not wrap ErrUnsafeHostValue", tt.err)
			}
		})
	}
}

// TestDecodePlanRefusesUnsafeHostValues: the agent refuses the whole plan, with
// the typed error, before anything changes on the node.
func TestDecodePlanRefusesUnsafeHostValues(t *testing.T) {
	base := func() *NodePlan {
		p := NewPlan("n1")
		p.Kubernetes = KubernetesPlan{Role: RoleWorker, Version: "v1.36.0", Action: KubeadmNone}
		return p
	}
	tests := []struct {
		name   string
		mutate func(p *NodePlan)
		want   string
	}{
		{"kubelet arg injecting a line", func(p *NodePlan) {
			p.KubeletExtraArgs = []Arg{{Name: "v", Value: "2\"\nEVIL=\"1"}}
		}, "kubelet arg v"},
		{"sudo user with a dot", func(p *NodePlan) {
			p.Users = json.RawMessage(`[{"name":"jane.doe","sudo":"ALL=(ALL) ALL"}]`)
		}, "sudo ignores"},
		{"password hash with a line break", func(p *NodePlan) {
			p.Users = json.RawMessage(`[{"name":"ops","passwd":"$6$x\nroot:$6$y"}]`)
		}, "password hash"},
		{"ntp server injecting a line", func(p *NodePlan) {
			p.NTP = json.RawMessage(`{"servers":["a\nallow all"]}`)
		}, "NTP server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base()
			tt.mutate(p)
			raw, _ := json.Marshal(p)
			_, err := DecodePlan(raw)
			if !errors.Is(err, ErrInvalidPlan) || !errors.Is(err, ErrUnsafeHostValue) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodePlan: %v, want ErrInvalidPlan and ErrUnsafeHostValue mentioning %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "$6$y") {
				t.Fatalf("the error carries the hash: %v", err)
			}
		})
	}
	p := base()
	p.KubeletExtraArgs = []Arg{{Name: "max-pods", Value: "200"}}
	p.Users = json.RawMessage(`[{"name":"jane.doe"},{"name":"ops","sudo":"ALL=(ALL) NOPASSWD:ALL","passwd":"$6$s$h"}]`)
	p.NTP = json.RawMessage(`{"servers":["time.example.com"]}`)
	raw, _ := json.Marshal(p)
	if _, err := DecodePlan(raw); err != nil {
		t.Fatalf("a safe plan is refused: %v", err)
	}
}
