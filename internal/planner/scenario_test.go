package planner_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// scenario is one testdata/*.yaml file: a whole hook request as CAPI builds it and
// the expected answer.
type scenario struct {
	Hook     string            `json:"hook"`
	Policy   *policy.Config    `json:"policy,omitempty"`
	Settings map[string]string `json:"settings,omitempty"`
	Current  scenarioObjects   `json:"current"`
	Desired  scenarioObjects   `json:"desired"`
	Expect   struct {
		FullyCovered bool `json:"fullyCovered"`
		Decisions    []struct {
			Field   string `json:"field"`
			Covered bool   `json:"covered"`
			Reason  string `json:"reason"`
		} `json:"decisions"`
		MachinePatch        *string `json:"machinePatch,omitempty"`
		InfrastructurePatch *string `json:"infrastructurePatch,omitempty"`
		BootstrapPatch      *string `json:"bootstrapPatch,omitempty"`
	} `json:"expect"`
}

type scenarioObjects struct {
	Machine        map[string]any `json:"machine"`
	Infrastructure map[string]any `json:"infrastructure"`
	Bootstrap      map[string]any `json:"bootstrap,omitempty"`
}

func (o scenarioObjects) objects() planner.Objects {
	out := planner.Objects{
		Machine:        &unstructured.Unstructured{Object: o.Machine},
		Infrastructure: &unstructured.Unstructured{Object: o.Infrastructure},
	}
	if o.Bootstrap != nil {
		out.Bootstrap = &unstructured.Unstructured{Object: o.Bootstrap}
	}
	return out
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			g := NewWithT(t)
			data, err := os.ReadFile(file)
			g.Expect(err).NotTo(HaveOccurred())
			var sc scenario
			g.Expect(yaml.UnmarshalStrict(data, &sc)).To(Succeed())
			pol := policy.Builtin()
			if sc.Policy != nil {
				pol, err = policy.New(*sc.Policy)
				g.Expect(err).NotTo(HaveOccurred())
			}
			p, err := planner.New(pol)
			g.Expect(err).NotTo(HaveOccurred())

			cur, des := sc.Current.objects(), sc.Desired.objects()
			var res *planner.Result
			base := []string{"spec"}
			switch sc.Hook {
			case "CanUpdateMachine":
				res, err = p.CanUpdateMachine(sc.Settings, cur, des)
			case "CanUpdateMachineSet":
				res, err = p.CanUpdateMachineSet(sc.Settings, cur, des)
				base = tmplBase
			default:
				t.Fatalf("unknown hook %q", sc.Hook)
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.FullyCovered()).To(Equal(sc.Expect.FullyCovered), "%+v", res.Decisions)
			g.Expect(res.Decisions).To(HaveLen(len(sc.Expect.Decisions)), "%+v", res.Decisions)
			for i, want := range sc.Expect.Decisions {
				got := res.Decisions[i]
				g.Expect(got.Field).To(Equal(want.Field))
				g.Expect(got.Covered).To(Equal(want.Covered), got.Reason)
				g.Expect(got.Reason).To(ContainSubstring(want.Reason))
			}
			for _, pc := range []struct {
				name string
				want *string
				got  []byte
			}{
				{"machinePatch", sc.Expect.MachinePatch, res.MachinePatch},
				{"infrastructurePatch", sc.Expect.InfrastructurePatch, res.InfrastructurePatch},
				{"bootstrapPatch", sc.Expect.BootstrapPatch, res.BootstrapPatch},
			} {
				if pc.want == nil {
					g.Expect(pc.got).To(BeNil(), pc.name)
					continue
				}
				g.Expect(string(pc.got)).To(MatchJSON(*pc.want), pc.name)
			}
			verifyPatches(g, res, cur, des, base, base)
		})
	}
}
