package planner

import (
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func TestChainedUpgradePlan(t *testing.T) {
	classVersions := []string{"v1.33.0", "v1.33.4", "v1.34.0", "v1.34.2", "v1.35.1", "v1.36.0", "v1.36.1", "v1.37.0-rc.0"}
	tests := []struct {
		name    string
		in      UpgradePlanInput
		want    UpgradePlan
		wantErr string
	}{
		{
			name: "three minors, workers step with the control plane at every minor",
			in:   UpgradePlanInput{FromControlPlane: "v1.33.0", FromWorkers: "v1.33.0", To: "v1.36.0", Versions: classVersions, StepWorkers: true},
			want: UpgradePlan{ControlPlane: []string{"v1.34.2", "v1.35.1", "v1.36.0"}, Workers: []string{"v1.34.2", "v1.35.1", "v1.36.0"}},
		},
		{
			name: "not opted in: the workers' plan is left to Cluster API",
			in:   UpgradePlanInput{FromControlPlane: "v1.33.0", FromWorkers: "v1.33.0", To: "v1.36.0", Versions: classVersions},
			want: UpgradePlan{ControlPlane: []string{"v1.34.2", "v1.35.1", "v1.36.0"}},
		},
		{
			name: "mid-chain: the control plane is one minor ahead, workers take its version first",
			in:   UpgradePlanInput{FromControlPlane: "v1.34.2", FromWorkers: "v1.33.0", To: "v1.36.0", Versions: classVersions, StepWorkers: true},
			want: UpgradePlan{ControlPlane: []string{"v1.35.1", "v1.36.0"}, Workers: []string{"v1.34.2", "v1.35.1", "v1.36.0"}},
		},
		{
			name: "control plane done, workers one minor behind",
			in:   UpgradePlanInput{FromControlPlane: "v1.36.0", FromWorkers: "v1.35.1", To: "v1.36.0", Versions: classVersions, StepWorkers: true},
			want: UpgradePlan{Workers: []string{"v1.36.0"}},
		},
		{
			name: "one minor",
			in:   UpgradePlanInput{FromControlPlane: "v1.35.0", FromWorkers: "v1.35.0", To: "v1.36.0", StepWorkers: true},
			want: UpgradePlan{ControlPlane: []string{"v1.36.0"}, Workers: []string{"v1.36.0"}},
		},
		{
			name: "a patch release",
			in:   UpgradePlanInput{FromControlPlane: "v1.36.0", FromWorkers: "v1.36.0", To: "v1.36.1", Versions: classVersions, StepWorkers: true},
			want: UpgradePlan{ControlPlane: []string{"v1.36.1"}, Workers: []string{"v1.36.1"}},
		},
		{
			name: "workers on an older patch of the control plane's minor go straight to the next minor",
			in:   UpgradePlanInput{FromControlPlane: "v1.33.4", FromWorkers: "v1.33.0", To: "v1.35.1", Versions: classVersions, StepWorkers: true},
			want: UpgradePlan{ControlPlane: []string{"v1.34.2", "v1.35.1"}, Workers: []string{"v1.34.2", "v1.35.1"}},
		},
		{
			name: "no workers",
			in:   UpgradePlanInput{FromControlPlane: "v1.33.0", To: "v1.35.1", Versions: classVersions, StepWorkers: true},
			want: UpgradePlan{ControlPlane: []string{"v1.34.2", "v1.35.1"}},
		},
		{
			name: "nothing to do",
			in:   UpgradePlanInput{FromControlPlane: "v1.36.0", FromWorkers: "v1.36.0", To: "v1.36.0", StepWorkers: true},
			want: UpgradePlan{},
		},
		{name: "no version for an intermediate minor", in: UpgradePlanInput{FromControlPlane: "v1.33.0", To: "v1.36.0", Versions: []string{"v1.34.0"}, StepWorkers: true}, wantErr: "no version of minor 1.35"},
		{name: "more than one minor without versions (Cluster API's one-minor rule)", in: UpgradePlanInput{FromControlPlane: "v1.33.0", To: "v1.35.0"}, wantErr: "no version of minor 1.34"},
		{name: "downgrade", in: UpgradePlanInput{FromControlPlane: "v1.36.0", To: "v1.35.0", StepWorkers: true}, wantErr: "downgrade"},
		{name: "major change", in: UpgradePlanInput{FromControlPlane: "v1.36.0", To: "v2.0.0", StepWorkers: true}, wantErr: "major"},
		{name: "impossible target", in: UpgradePlanInput{FromControlPlane: "v1.36.0", To: "1.37", StepWorkers: true}, wantErr: "toKubernetesVersion"},
		{name: "empty control plane version", in: UpgradePlanInput{To: "v1.37.0", StepWorkers: true}, wantErr: "fromControlPlaneKubernetesVersion is empty"},
		{name: "impossible workers version", in: UpgradePlanInput{FromControlPlane: "v1.36.0", FromWorkers: "v1.x", To: "v1.37.0", StepWorkers: true}, wantErr: "fromWorkersKubernetesVersion"},
		{name: "workers newer than the control plane", in: UpgradePlanInput{FromControlPlane: "v1.35.0", FromWorkers: "v1.36.0", To: "v1.36.0", StepWorkers: true}, wantErr: "newer than the control plane"},
		{name: "workers downgrade", in: UpgradePlanInput{FromControlPlane: "v1.37.0", FromWorkers: "v1.37.0", To: "v1.37.0-rc.0", StepWorkers: true}, wantErr: "downgrade"},
		{name: "workers two minors behind", in: UpgradePlanInput{FromControlPlane: "v1.35.1", FromWorkers: "v1.33.0", To: "v1.36.0", Versions: classVersions, StepWorkers: true}, wantErr: "more than one minor behind"},
		{name: "a listed version that is not one", in: UpgradePlanInput{FromControlPlane: "v1.35.1", To: "v1.36.0", Versions: []string{"latest"}, StepWorkers: true}, wantErr: `listed version "latest"`},
		{name: "too many listed versions", in: UpgradePlanInput{FromControlPlane: "v1.35.1", To: "v1.36.0", Versions: make([]string, maxCandidateVersions+1), StepWorkers: true}, wantErr: "candidate versions"},
	}
	p, err := New(policy.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := p.UpgradePlan(tt.in)
			if tt.wantErr != "" {
				g.Expect(err).To(HaveOccurred())
				g.Expect(errors.Is(err, ErrUpgradePlan)).To(BeTrue(), "%v", err)
				g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
			if tt.in.StepWorkers {
				// Every step of the workers is one the planner covers in place.
				from := tt.in.FromWorkers
				for _, v := range got.Workers {
					fv, _ := protocol.ParseVersion(from)
					tv, _ := protocol.ParseVersion(v)
					g.Expect(protocol.ClassifyVersionStep(fv, tv).Upgrade()).To(BeTrue(), "workers %s -> %s", from, v)
					from = v
				}
			}
		})
	}
}

// TestUpgradePlanPolicyCoversEveryStep: when the policy delivers kubeadm and kubelet
// for the target, an intermediate step it does not list is refused (the step's
// nodes would need their OS image to bring them), and the policy's versions fill a
// minor the ClusterClass does not list.
func TestUpgradePlanPolicyCoversEveryStep(t *testing.T) {
	bin := func(v string) map[string]policy.BinariesConfig {
		d := "sha256:" + strings.Repeat("a", 64)
		return map[string]policy.BinariesConfig{"linux/amd64": {
			Kubeadm: policy.BinaryConfig{URL: "https://dl.example/" + v + "/kubeadm", Digest: d},
			Kubelet: policy.BinaryConfig{URL: "https://dl.example/" + v + "/kubelet", Digest: d},
		}}
	}
	tests := []struct {
		name     string
		binaries policy.KubernetesBinariesConfig
		in       UpgradePlanInput
		want     UpgradePlan
		wantErr  string
	}{
		{
			name:     "every step listed",
			binaries: policy.KubernetesBinariesConfig{"v1.34.1": bin("v1.34.1"), "v1.35.0": bin("v1.35.0"), "v1.36.0": bin("v1.36.0")},
			in:       UpgradePlanInput{FromControlPlane: "v1.33.0", FromWorkers: "v1.33.0", To: "v1.36.0", Versions: []string{"v1.34.1", "v1.35.0", "v1.36.0"}, StepWorkers: true},
			want:     UpgradePlan{ControlPlane: []string{"v1.34.1", "v1.35.0", "v1.36.0"}, Workers: []string{"v1.34.1", "v1.35.0", "v1.36.0"}},
		},
		{
			name:     "the policy fills a minor the ClusterClass does not list",
			binaries: policy.KubernetesBinariesConfig{"v1.34.1": bin("v1.34.1"), "v1.35.0": bin("v1.35.0"), "v1.36.0": bin("v1.36.0")},
			in:       UpgradePlanInput{FromControlPlane: "v1.33.0", FromWorkers: "v1.33.0", To: "v1.36.0", StepWorkers: true},
			want:     UpgradePlan{ControlPlane: []string{"v1.34.1", "v1.35.0", "v1.36.0"}, Workers: []string{"v1.34.1", "v1.35.0", "v1.36.0"}},
		},
		{
			name:     "an intermediate step without binaries",
			binaries: policy.KubernetesBinariesConfig{"v1.35.0": bin("v1.35.0"), "v1.36.0": bin("v1.36.0")},
			in:       UpgradePlanInput{FromControlPlane: "v1.33.0", FromWorkers: "v1.33.0", To: "v1.36.0", Versions: []string{"v1.34.3", "v1.35.0", "v1.36.0"}, StepWorkers: true},
			wantErr:  "not for the intermediate step(s) v1.34.3",
		},
		{
			name:     "no binaries for the target: the OS image brings every version",
			binaries: policy.KubernetesBinariesConfig{"v1.35.0": bin("v1.35.0")},
			in:       UpgradePlanInput{FromControlPlane: "v1.34.0", FromWorkers: "v1.34.0", To: "v1.36.0", Versions: []string{"v1.35.0", "v1.36.0"}, StepWorkers: true},
			want:     UpgradePlan{ControlPlane: []string{"v1.35.0", "v1.36.0"}, Workers: []string{"v1.35.0", "v1.36.0"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			pol, err := policy.New(policy.Config{KubernetesBinaries: tt.binaries})
			g.Expect(err).NotTo(HaveOccurred())
			p, err := New(pol)
			g.Expect(err).NotTo(HaveOccurred())
			got, err := p.UpgradePlan(tt.in)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}
