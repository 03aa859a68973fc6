package guard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/preview"
	"github.com/capi-inplace/capi-inplace/internal/preview/previewtest"
	"github.com/capi-inplace/capi-inplace/internal/secretbudget"
)

var now = time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)

func toU(t testing.TB, obj runtime.Object, gvk schema.GroupVersionKind) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u
}

// A write turns the stored object of a snapshot into the written one.
type write func(t testing.TB, s preview.Snapshot) (old, written *unstructured.Unstructured)

func kcpWrite(mut func(*controlplanev1.KubeadmControlPlane)) write {
	return func(t testing.TB, s preview.Snapshot) (*unstructured.Unstructured, *unstructured.Unstructured) {
		gvk := controlplanev1.GroupVersion.WithKind("KubeadmControlPlane")
		n := s.ControlPlane.DeepCopy()
		mut(n)
		return toU(t, s.ControlPlane, gvk), toU(t, n, gvk)
	}
}

func clusterWrite(mut func(*clusterv1.Cluster)) write {
	return func(t testing.TB, s preview.Snapshot) (*unstructured.Unstructured, *unstructured.Unstructured) {
		gvk := clusterv1.GroupVersion.WithKind("Cluster")
		n := s.Cluster.DeepCopy()
		mut(n)
		return toU(t, s.Cluster, gvk), toU(t, n, gvk)
	}
}

func mdWrite(mut func(*clusterv1.MachineDeployment)) write {
	return func(t testing.TB, s preview.Snapshot) (*unstructured.Unstructured, *unstructured.Unstructured) {
		gvk := clusterv1.GroupVersion.WithKind("MachineDeployment")
		n := s.MachineDeployments[0].DeepCopy()
		mut(n)
		return toU(t, &s.MachineDeployments[0], gvk), toU(t, n, gvk)
	}
}

// templateWrite changes a template under its name (the KubeadmConfigTemplate or
// DevMachineTemplate of the workers).
func templateWrite(kind string, mut func(u *unstructured.Unstructured)) write {
	return func(t testing.TB, s preview.Snapshot) (*unstructured.Unstructured, *unstructured.Unstructured) {
		for k, u := range s.Objects {
			if k.Kind == kind && strings.Contains(k.Name, "md-0") {
				n := u.DeepCopy()
				mut(n)
				return u.DeepCopy(), n
			}
		}
		t.Fatalf("no %s in the fixture", kind)
		return nil, nil
	}
}

// decide runs the guard's core as the webhook does: Change, preview.Apply, Decide.
func decide(t *testing.T, o previewtest.Options, prepare func(*preview.Snapshot), w write, settings map[string]string) (Verdict, error) {
	t.Helper()
	live := previewtest.MustSnapshot(t, o)
	if prepare != nil {
		prepare(&live)
	}
	old, written := w(t, live)
	proposed, _, err := preview.Apply(live, []*unstructured.Unstructured{Change(old, written)})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	pl, err := planner.New(policy.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	return Decide(Input{
		Object: written.GetKind() + " " + written.GetName(), Live: live, Proposed: proposed,
		Planner: pl, Policy: policy.Builtin(), Settings: settings, Now: now,
		Override: OverrideOf(old.GetAnnotations(), written.GetAnnotations()),
	})
}

func unhealthyAPIServer(machine string) func(*preview.Snapshot) {
	return func(s *preview.Snapshot) {
		for i := range s.Machines {
			if s.Machines[i].Name == machine {
				s.Machines[i].Status.Conditions = append(s.Machines[i].Status.Conditions, metav1.Condition{
					Type: controlplanev1.KubeadmControlPlaneMachineAPIServerPodHealthyCondition, Status: metav1.ConditionFalse, Reason: "PodFailed",
				})
			}
		}
	}
}

// bigSecrets records, as Gatherer.Secrets reads them, three Secrets of 1 MiB (two
// cross the budget) and one that does not exist.
func bigSecrets(s *preview.Snapshot) {
	s.SecretSizes = secretbudget.Sizes{"big-0": 1<<20 + 1100, "big-1": 1<<20 + 1100, "big-2": 1<<20 + 1100, "created-later": secretbudget.NotFound}
}

// filesFrom adds to a KubeadmControlPlane files whose content comes from secrets.
func filesFrom(secrets ...string) func(*controlplanev1.KubeadmControlPlane) {
	return func(k *controlplanev1.KubeadmControlPlane) {
		for i, name := range secrets {
			k.Spec.KubeadmConfigSpec.Files = append(k.Spec.KubeadmConfigSpec.Files, bootstrapv1.File{Path: fmt.Sprintf("/etc/big-%d", i),
				ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: name, Key: "f"}}})
		}
	}
}

func TestDecide(t *testing.T) {
	classy := previewtest.Default()
	plain := previewtest.Default()
	plain.Topology = false
	version := func(v string) write {
		return clusterWrite(func(c *clusterv1.Cluster) { c.Spec.Topology.Version = v })
	}
	kcpVersion := func(v string) func(*controlplanev1.KubeadmControlPlane) {
		return func(k *controlplanev1.KubeadmControlPlane) { k.Spec.Version = v }
	}
	cp := []string{"demo-cp-0", "demo-cp-1", "demo-cp-2"}
	workers := []string{"demo-md-0-v1-0", "demo-md-0-v1-1"}
	all := append(append([]string{}, cp...), workers...)

	tests := []struct {
		name     string
		opts     previewtest.Options
		prepare  func(*preview.Snapshot)
		write    write
		settings map[string]string
		// allowed, and when refused: the Machines, the cause kinds and words the
		// message must hold.
		allowed  bool
		override string
		disabled bool
		machines []string
		kinds    []preview.CauseKind
		says     []string
	}{
		{name: "ClusterClass: one minor up through the topology is in place", opts: classy, write: version("v1.36.0"), allowed: true},
		{
			name: "ClusterClass: two minors up through the topology replaces every Machine", opts: classy, write: version("v1.37.0"),
			machines: all, kinds: []preview.CauseKind{preview.CauseField}, says: []string{"spec.version", "in-place", "v1.37.0"},
		},
		{
			name: "plain: a KubeadmControlPlane bootstrap-only field replaces the control plane", opts: plain,
			write: kcpWrite(func(k *controlplanev1.KubeadmControlPlane) {
				k.Spec.KubeadmConfigSpec.PreKubeadmCommands = []string{"echo hi"}
			}),
			machines: cp, kinds: []preview.CauseKind{preview.CauseField}, says: []string{"preKubeadmCommands", "in-place", "Machines demo-cp-0, demo-cp-1, demo-cp-2: KubeadmConfig field spec.preKubeadmCommands"},
		},
		{name: "plain: a KubeadmControlPlane patch version is in place", opts: plain, write: kcpWrite(kcpVersion("v1.35.2")), allowed: true},
		{
			name: "plain: KubeadmControlPlane files whose Secrets are over the budget replace the control plane", opts: plain,
			prepare: bigSecrets, write: kcpWrite(filesFrom("big-0", "big-1", "big-2")),
			machines: cp, kinds: []preview.CauseKind{preview.CauseSecretBudget},
			says: []string{"KubeadmControlPlane demo-cp kubeadmConfigSpec files and users", "more than 2097152 bytes (2 MiB)", "(big-0, big-1)", "passed at Secret big-1", "in-place"},
		},
		{name: "plain: KubeadmControlPlane files whose Secrets fit the budget are in place", opts: plain, prepare: bigSecrets, write: kcpWrite(filesFrom("big-0")), allowed: true},
		{
			name: "plain: a referenced Secret that does not exist is not over the budget", opts: plain,
			prepare: bigSecrets, write: kcpWrite(filesFrom("big-0", "created-later")), allowed: true,
		},
		{
			name: "KubeadmControlPlane maxSurge 1 with a version change surges", opts: plain,
			write: kcpWrite(func(k *controlplanev1.KubeadmControlPlane) {
				k.Spec.Version = "v1.35.2"
				k.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(1))
			}),
			machines: cp, kinds: []preview.CauseKind{preview.CauseRollout}, says: []string{"maxSurge 1", "in-place"},
		},
		{
			name: "maxSurge 1 alone changes no Machine: allowed", opts: plain,
			write: kcpWrite(func(k *controlplanev1.KubeadmControlPlane) {
				k.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(1))
			}),
			allowed: true,
		},
		{
			name: "an unhealthy control-plane Machine while a KubeadmControlPlane change is written", opts: plain,
			prepare: unhealthyAPIServer("demo-cp-1"), write: kcpWrite(kcpVersion("v1.35.2")),
			machines: []string{"demo-cp-1"}, kinds: []preview.CauseKind{preview.CauseUnhealthyControlPlane},
			says: []string{"demo-cp-1 is not healthy", "APIServerPodHealthy", "in-place"},
		},
		{
			name: "an unhealthy control-plane Machine and a worker-only change: allowed", opts: plain,
			prepare: unhealthyAPIServer("demo-cp-1"),
			write:   mdWrite(func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.Version = "v1.35.2" }),
			allowed: true,
		},
		{
			name: "MachineDeployment maxUnavailable 0 with a version change surges the workers", opts: func() previewtest.Options {
				o := plain
				o.MDMaxUnavailable = 0
				return o
			}(),
			write:    mdWrite(func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.Version = "v1.35.2" }),
			machines: workers, kinds: []preview.CauseKind{preview.CauseRollout}, says: []string{"maxUnavailable 0", "in-place"},
		},
		{
			name: "MachineDeployment new infrastructure template name that does not exist", opts: plain,
			write:    mdWrite(func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.InfrastructureRef.Name = "nope" }),
			machines: workers, kinds: []preview.CauseKind{preview.CauseMissingObject}, says: []string{"nope", "in place"},
		},
		{
			name: "disableInPlaceUpdates makes every change a replacement", opts: classy, write: version("v1.36.0"),
			settings: map[string]string{inplacev1.SettingDisableInPlaceUpdates: "true"},
			machines: all, kinds: []preview.CauseKind{preview.CauseField}, says: []string{"disableInPlaceUpdates"},
		},
		{
			name: "KubeadmConfigTemplate changed under its name: planned as rotated, bootstrap-only field refused", opts: plain,
			write: templateWrite("KubeadmConfigTemplate", func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedStringSlice(u.Object, []string{"echo hi"}, "spec", "template", "spec", "preKubeadmCommands")
			}),
			machines: workers, kinds: []preview.CauseKind{preview.CauseField}, says: []string{"preKubeadmCommands", "in-place"},
		},
		{
			name: "KubeadmConfigTemplate files change: in place", opts: plain,
			write: templateWrite("KubeadmConfigTemplate", func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"path": "/etc/motd", "content": "new\n"}}, "spec", "template", "spec", "files")
			}),
			allowed: true,
		},
		{
			name: "infrastructure template OS image not in the policy: refused", opts: plain,
			write: templateWrite("DevMachineTemplate", func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "registry.example/node-os:9.9", "spec", "template", "spec", "backend", "docker", "customImage")
			}),
			machines: workers, kinds: []preview.CauseKind{preview.CauseField}, says: []string{"customImage"},
		},
		{
			name: "override: a new allow-replace value lets the replacing write through", opts: classy,
			write: clusterWrite(func(c *clusterv1.Cluster) {
				c.Spec.Topology.Version = "v1.37.0"
				c.Annotations = map[string]string{inplacev1.AllowReplaceAnnotation: "CHG-1234"}
			}),
			allowed: true, override: "CHG-1234", machines: all, kinds: []preview.CauseKind{preview.CauseField},
		},
		{
			name: "override already stored: the same value does not admit a second replacing change", opts: classy,
			prepare: func(s *preview.Snapshot) {
				s.Cluster.Annotations = map[string]string{inplacev1.AllowReplaceAnnotation: "CHG-1234"}
			},
			write: version("v1.37.0"), machines: all, kinds: []preview.CauseKind{preview.CauseField},
		},
		{
			name: "guard disabled on the Cluster", opts: func() previewtest.Options {
				o := classy
				o.ClusterAnnotations = map[string]string{inplacev1.GuardAnnotation: inplacev1.GuardDisabled}
				return o
			}(),
			write: version("v1.37.0"), allowed: true, disabled: true,
		},
		{
			name: "an already pending replacement retargeted by the write (same reason text, new value) is this write's doing", opts: plain,
			settings: map[string]string{inplacev1.SettingDisableInPlaceUpdates: "true"},
			prepare:  func(s *preview.Snapshot) { s.ControlPlane.Spec.Version = "v1.35.2" },
			write:    kcpWrite(kcpVersion("v1.35.3")),
			machines: cp, kinds: []preview.CauseKind{preview.CauseField}, says: []string{"disableInPlaceUpdates"},
		},
		{
			name: "an already pending replacement the write does not touch: a worker-only write is allowed", opts: plain,
			settings: map[string]string{inplacev1.SettingDisableInPlaceUpdates: "true"},
			prepare:  func(s *preview.Snapshot) { s.ControlPlane.Spec.Version = "v1.35.2" },
			write:    mdWrite(func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.MinReadySeconds = ptr.To[int32](5) }),
			allowed:  true,
		},
		{
			name: "a Machine already marked for deletion is not this write's doing", opts: plain,
			prepare: func(s *preview.Snapshot) {
				s.Machines[0].Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: ""}
			},
			write: kcpWrite(kcpVersion("v1.35.2")), allowed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			v, err := decide(t, tt.opts, tt.prepare, tt.write, tt.settings)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v.Allowed).To(Equal(tt.allowed), "%+v", v.Refusals)
			g.Expect(v.Disabled).To(Equal(tt.disabled))
			g.Expect(v.Override).To(Equal(tt.override))
			g.Expect(v.Machines()).To(ConsistOf(tt.machines))
			g.Expect(v.Kinds()).To(ConsistOf(tt.kinds))
			msg := v.Message("the object", "demo")
			for _, s := range tt.says {
				g.Expect(msg).To(ContainSubstring(s))
			}
		})
	}
}

func TestOverrideOf(t *testing.T) {
	k := inplacev1.AllowReplaceAnnotation
	tests := []struct {
		name     string
		old, new map[string]string
		want     string
	}{
		{"none", nil, nil, ""},
		{"set by this write", nil, map[string]string{k: "CHG-1"}, "CHG-1"},
		{"changed by this write", map[string]string{k: "CHG-1"}, map[string]string{k: "CHG-2"}, "CHG-2"},
		{"kept from an earlier write", map[string]string{k: "CHG-1"}, map[string]string{k: "CHG-1"}, ""},
		{"removed", map[string]string{k: "CHG-1"}, nil, ""},
		{"empty value", nil, map[string]string{k: ""}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(OverrideOf(tt.old, tt.new)).To(Equal(tt.want))
		})
	}
}

func TestMergePatch(t *testing.T) {
	tests := []struct {
		name     string
		old, new map[string]any
		want     map[string]any
	}{
		{"equal", map[string]any{"a": 1.0}, map[string]any{"a": 1.0}, map[string]any{}},
		{"changed scalar", map[string]any{"a": 1.0}, map[string]any{"a": 2.0}, map[string]any{"a": 2.0}},
		{"dropped key becomes null", map[string]any{"a": 1.0, "b": 2.0}, map[string]any{"a": 1.0}, map[string]any{"b": nil}},
		{"nested map", map[string]any{"s": map[string]any{"x": 1.0, "y": 2.0}}, map[string]any{"s": map[string]any{"x": 1.0}}, map[string]any{"s": map[string]any{"y": nil}}},
		{"list replaced whole", map[string]any{"l": []any{1.0, 2.0}}, map[string]any{"l": []any{1.0}}, map[string]any{"l": []any{1.0}}},
		{"map replaced by scalar", map[string]any{"s": map[string]any{"x": 1.0}}, map[string]any{"s": "v"}, map[string]any{"s": "v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(preview.MergePatch(tt.old, tt.new)).To(Equal(tt.want))
		})
	}
}

func TestSpecChanged(t *testing.T) {
	obj := func(spec map[string]any, labels map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"labels": labels}, "spec": spec}}
	}
	tests := []struct {
		name     string
		kind     string
		old, new *unstructured.Unstructured
		want     bool
	}{
		{"metadata only", "KubeadmControlPlane", obj(map[string]any{"version": "v1"}, nil), obj(map[string]any{"version": "v1"}, map[string]any{"a": "b"}), false},
		{"spec field", "KubeadmControlPlane", obj(map[string]any{"version": "v1"}, nil), obj(map[string]any{"version": "v2"}, nil), true},
		{"Cluster: outside spec.topology", "Cluster", obj(map[string]any{"paused": false}, nil), obj(map[string]any{"paused": true}, nil), false},
		{"Cluster: spec.topology", "Cluster", obj(map[string]any{"topology": map[string]any{"version": "v1"}}, nil), obj(map[string]any{"topology": map[string]any{"version": "v2"}}, nil), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(specChanged(tt.kind, tt.old, tt.new)).To(Equal(tt.want))
		})
	}
}

// TestFingerprint: the remembered plan of the stored objects is reused only while
// every object, the settings and the minute are the same.
func TestFingerprint(t *testing.T) {
	g := NewWithT(t)
	live := previewtest.MustSnapshot(t, previewtest.Default())
	in := Input{Live: live, Now: now}
	base := fingerprint(in)
	g.Expect(fingerprint(in)).To(Equal(base))

	moved := in
	moved.Live = live.DeepCopy()
	moved.Live.Machines[1].ResourceVersion = "42"
	g.Expect(fingerprint(moved)).NotTo(Equal(base), "a Machine written since")

	for k := range moved.Live.Objects {
		moved = in
		moved.Live = live.DeepCopy()
		moved.Live.Objects[k].SetResourceVersion("43")
		g.Expect(fingerprint(moved)).NotTo(Equal(base), "%s written since", k)
		break
	}

	set := in
	set.Settings = map[string]string{inplacev1.SettingDisableInPlaceUpdates: "true"}
	g.Expect(fingerprint(set)).NotTo(Equal(base), "other settings")

	later := in
	later.Now = now.Add(time.Minute)
	g.Expect(fingerprint(later)).NotTo(Equal(base), "another minute")
}
