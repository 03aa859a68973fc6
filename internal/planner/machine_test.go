package planner_test

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/planner"
	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
)

var specBase = []string{"spec"}

// kcpObjects are the typed objects of one side of a CanUpdateMachine request.
type kcpObjects struct {
	m     *clusterv1.Machine
	kc    *bootstrapv1.KubeadmConfig
	infra *unstructured.Unstructured
}

// baseKCP is a control-plane machine as KCP sends it: KubeadmConfig already
// prepared for diff (joinConfiguration with controlPlane set).
func baseKCP(version string) kcpObjects {
	spec := pt.KubeadmConfigSpec()
	spec.JoinConfiguration.ControlPlane = &bootstrapv1.JoinControlPlane{}
	return kcpObjects{
		m:     pt.Machine("cp-x7k2p", version),
		kc:    pt.KubeadmConfig("cp-x7k2p", spec),
		infra: pt.DevMachine("cp-x7k2p", pt.DevMachineSpec("")),
	}
}

func (o kcpObjects) objects() planner.Objects {
	return planner.Objects{
		Machine:        pt.ToUnstructured(o.m),
		Infrastructure: pt.ToUnstructured(o.infra.Object),
		Bootstrap:      pt.ToUnstructured(o.kc),
	}
}

func TestCanUpdateMachine(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(cur, des *kcpObjects)
		want   map[string]want
	}{
		{
			name: "KCP minor upgrade 1.35 to 1.36 drops ControlPlaneKubeletLocalMode",
			mutate: func(cur, des *kcpObjects) {
				cur.m.Spec.Version = "v1.35.4"
				des.m.Spec.Version = "v1.36.0"
				des.kc.Spec.ClusterConfiguration.FeatureGates = nil
			},
			want: map[string]want{
				"spec.version": {true, "one minor up"},
				"spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode": {true, "kubeadm upgrade applies them"},
			},
		},
		{
			name: "KCP minor upgrade keeps operator feature gates",
			mutate: func(cur, des *kcpObjects) {
				cur.kc.Spec.ClusterConfiguration.FeatureGates["EtcdLearnerMode"] = true
				des.kc.Spec.ClusterConfiguration.FeatureGates = map[string]bool{"EtcdLearnerMode": true}
				cur.m.Spec.Version = "v1.35.4"
				des.m.Spec.Version = "v1.36.0"
			},
			want: map[string]want{
				"spec.version": {true, "one minor up"},
				"spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode": {true, "feature gates"},
			},
		},
		{
			name: "etcd image tag, cert SANs and files",
			mutate: func(_, des *kcpObjects) {
				des.kc.Spec.ClusterConfiguration.Etcd.Local.ImageTag = "3.6.5-0"
				des.kc.Spec.ClusterConfiguration.APIServer.CertSANs = []string{"edge-1.example.com", "edge-1.internal"}
				des.kc.Spec.Files = des.kc.Spec.Files[:1]
			},
			want: map[string]want{
				"spec.clusterConfiguration.etcd.local.imageTag": {true, "etcd"},
				"spec.clusterConfiguration.apiServer.certSANs":  {false, "certificate regenerated"},
				"spec.files": {false, "does not delete files"},
			},
		},
		{
			// KCP reads the first node's init configuration as a join configuration;
			// kubeadm join refuses addon phases, so the KCP's join list cannot match.
			name: "first node's init-only skipped phases read as join phases",
			mutate: func(cur, des *kcpObjects) {
				cur.kc.Spec.JoinConfiguration.SkipPhases = []string{"addon/coredns", "addon/kube-proxy", "preflight"}
				des.kc.Spec.JoinConfiguration.SkipPhases = []string{"preflight"}
			},
			want: map[string]want{"spec.joinConfiguration.skipPhases": {true, "init configuration as a join configuration"}},
		},
		{
			name: "first node's init-only skipped phases and no join phases",
			mutate: func(cur, _ *kcpObjects) {
				cur.kc.Spec.JoinConfiguration.SkipPhases = []string{"addon/coredns", "addon/kube-proxy"}
			},
			want: map[string]want{"spec.joinConfiguration.skipPhases": {true, "init configuration as a join configuration"}},
		},
		{
			name: "a change of the join phases skipped stays bootstrap-only",
			mutate: func(cur, des *kcpObjects) {
				cur.kc.Spec.JoinConfiguration.SkipPhases = []string{"addon/coredns"}
				des.kc.Spec.JoinConfiguration.SkipPhases = []string{"preflight"}
			},
			want: map[string]want{"spec.joinConfiguration.skipPhases": {false, "set acceptBootstrapOnlyFields"}},
		},
		{
			name: "join phases skipped only on the desired side stay bootstrap-only",
			mutate: func(_, des *kcpObjects) {
				des.kc.Spec.JoinConfiguration.SkipPhases = []string{"preflight"}
			},
			want: map[string]want{"spec.joinConfiguration.skipPhases": {false, "set acceptBootstrapOnlyFields"}},
		},
		{
			name: "in-memory DevMachine timings",
			mutate: func(_, des *kcpObjects) {
				des.infra.Object["spec"].(map[string]any)["backend"].(map[string]any)["inMemory"].(map[string]any)["apiServer"] = map[string]any{
					"provisioning": map[string]any{"startupDuration": "5s"},
				}
			},
			want: map[string]want{
				"spec.backend.inMemory.apiServer.provisioning.startupDuration": {true, "does not affect"},
				"spec.backend.inMemory.apiServer.provisioning.startupJitter":   {true, "does not affect"},
			},
		},
		{
			name: "DevMachine providerID is not an image field",
			mutate: func(_, des *kcpObjects) {
				des.infra.Object["spec"].(map[string]any)["providerID"] = "in-memory://other"
			},
			want: map[string]want{"spec.providerID": {false, "DevMachine field spec.providerID cannot be changed"}},
		},
		{
			name:   "Machine fields KCP does not compare are not decisions",
			mutate: func(_, des *kcpObjects) { des.m.Spec.ReadinessGates = nil; des.m.Spec.ProviderID = "" },
			want:   map[string]want{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cur, des := baseKCP("v1.35.4"), baseKCP("v1.35.4")
			tt.mutate(&cur, &des)
			p, err := planner.New(testPolicy(t, false))
			g.Expect(err).NotTo(HaveOccurred())
			curObjs, desObjs := cur.objects(), des.objects()
			res, err := p.CanUpdateMachine(nil, curObjs, desObjs)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Decisions).To(HaveLen(len(tt.want)), "decisions: %+v", res.Decisions)
			for _, d := range res.Decisions {
				w, ok := tt.want[d.Field]
				g.Expect(ok).To(BeTrue(), "unexpected decision %+v", d)
				g.Expect(d.Covered).To(Equal(w.covered), d.Reason)
				g.Expect(d.Reason).To(ContainSubstring(w.reason))
			}
			verifyPatches(g, res, curObjs, desObjs, specBase, specBase)
		})
	}
}

func TestMalformedRequests(t *testing.T) {
	ms := func() (planner.Objects, planner.Objects) {
		return baseMS("a", "v1.35.2").objects(), baseMS("b", "v1.35.2").objects()
	}
	tests := []struct {
		name    string
		machine bool
		mutate  func(cur, des *planner.Objects)
		wantErr string
	}{
		{name: "machine set slot holds a Machine", mutate: func(cur, _ *planner.Objects) {
			cur.Machine.SetKind("Machine")
		}, wantErr: `current.machineSet has apiVersion "cluster.x-k8s.io/v1beta2" kind "Machine", expected cluster.x-k8s.io/v1beta2 MachineSet`},
		{name: "old core API version", mutate: func(_, des *planner.Objects) {
			des.Machine.SetAPIVersion("cluster.x-k8s.io/v1beta1")
		}, wantErr: "desired.machineSet has apiVersion \"cluster.x-k8s.io/v1beta1\""},
		{name: "infrastructure template missing", mutate: func(_, des *planner.Objects) {
			des.Infrastructure = nil
		}, wantErr: "desired.infrastructureMachineTemplate is missing"},
		{name: "infrastructure without kind", mutate: func(cur, _ *planner.Objects) {
			cur.Infrastructure.SetKind("")
		}, wantErr: "current.infrastructureMachineTemplate has no apiVersion or kind"},
		{name: "machine kind in the template slot", mutate: func(cur, _ *planner.Objects) {
			cur.Infrastructure.SetKind("DevMachine")
		}, wantErr: `current.infrastructureMachineTemplate has kind "DevMachine", expected a template kind`},
		{name: "KubeadmConfig in the template slot", mutate: func(_, des *planner.Objects) {
			des.Bootstrap.SetKind("KubeadmConfig")
		}, wantErr: `desired.bootstrapConfigTemplate has kind "KubeadmConfig"`},
		{name: "spec is not an object", mutate: func(_, des *planner.Objects) {
			des.Machine.Object["spec"] = "oops"
		}, wantErr: "desired.machineSet.spec is a string, not an object"},
		{name: "template spec is a list", mutate: func(cur, _ *planner.Objects) {
			cur.Infrastructure.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"] = []any{}
		}, wantErr: "current.infrastructureMachineTemplate.spec.template.spec is a []interface {}, not an object"},
		{name: "machine hook with a template", machine: true, mutate: func(cur, _ *planner.Objects) {
			cur.Infrastructure.SetKind("DevMachineTemplate")
		}, wantErr: `current.infrastructureMachine has kind "DevMachineTemplate", expected a machine kind`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, err := planner.New(testPolicy(t, false))
			g.Expect(err).NotTo(HaveOccurred())
			var res *planner.Result
			if tt.machine {
				cur, des := baseKCP("v1.35.4").objects(), baseKCP("v1.35.4").objects()
				tt.mutate(&cur, &des)
				res, err = p.CanUpdateMachine(nil, cur, des)
			} else {
				cur, des := ms()
				tt.mutate(&cur, &des)
				res, err = p.CanUpdateMachineSet(nil, cur, des)
			}
			g.Expect(res).To(BeNil())
			g.Expect(errors.Is(err, planner.ErrMalformed)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}

func TestNewNeedsPolicy(t *testing.T) {
	g := NewWithT(t)
	_, err := planner.New(nil)
	g.Expect(err).To(HaveOccurred())
}

func TestDeterministic(t *testing.T) {
	g := NewWithT(t)
	p, err := planner.New(testPolicy(t, false))
	g.Expect(err).NotTo(HaveOccurred())
	cur, des := baseMS("a", "v1.35.2"), baseMS("b", "v1.35.2")
	des.ms.Spec.Template.Spec.Version = "v1.36.0"
	des.kct.Spec.Template.Spec.Files = nil
	des.kct.Spec.Template.Spec.Users = nil
	des.kct.Spec.Template.Spec.ClusterConfiguration = bootstrapv1.ClusterConfiguration{}
	first, err := p.CanUpdateMachineSet(nil, cur.objects(), des.objects())
	g.Expect(err).NotTo(HaveOccurred())
	for range 20 {
		again, err := p.CanUpdateMachineSet(nil, cur.objects(), des.objects())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(again).To(Equal(first))
	}
}

func BenchmarkPlannerCanUpdateMachineSet(b *testing.B) {
	p, err := planner.New(testPolicy(&testing.T{}, false))
	if err != nil {
		b.Fatal(err)
	}
	cur, des := baseMS("a", "v1.35.2"), baseMS("b", "v1.35.2")
	des.ms.Spec.Template.Spec.Version = "v1.36.1"
	des.kct.Spec.Template.Spec.ClusterConfiguration.FeatureGates = nil
	des.kct.Spec.Template.Spec.Files = append(des.kct.Spec.Template.Spec.Files, bootstrapv1.File{Path: "/etc/edge/site.conf", Content: "site=42\n"})
	setImage(infraSpec(des), imageNew)
	curObjs, desObjs := cur.objects(), des.objects()
	b.ReportAllocs()
	for b.Loop() {
		res, err := p.CanUpdateMachineSet(nil, curObjs, desObjs)
		if err != nil || !res.FullyCovered() {
			b.Fatalf("unexpected result: %v %+v", err, res)
		}
	}
}

func BenchmarkPlannerCanUpdateMachine(b *testing.B) {
	p, err := planner.New(testPolicy(&testing.T{}, false))
	if err != nil {
		b.Fatal(err)
	}
	cur, des := baseKCP("v1.35.4"), baseKCP("v1.35.4")
	des.m.Spec.Version = "v1.36.0"
	des.kc.Spec.ClusterConfiguration.FeatureGates = nil
	des.kc.Spec.ClusterConfiguration.Etcd.Local.ImageTag = "3.6.5-0"
	curObjs, desObjs := cur.objects(), des.objects()
	b.ReportAllocs()
	for b.Loop() {
		res, err := p.CanUpdateMachine(nil, curObjs, desObjs)
		if err != nil || !res.FullyCovered() {
			b.Fatalf("unexpected result: %v %+v", err, res)
		}
	}
}
