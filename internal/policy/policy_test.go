package policy

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

const sampleYAML = `
acceptBootstrapOnlyFields: true
drain:
  timeoutSeconds: 120
  skipOnSingleNode: false
backends:
  default: ostree
  clusters:
    edge/store-42: rauc
infrastructureKinds:
- group: infrastructure.example.com
  kind: AcmeMachine
  imagePaths: [spec.os.image, spec.os.sha]
  ignorePaths: [spec.tuning]
artifacts:
- image: https://images.example.com/node-1.36.qcow2
  ref: quay.io/example/node-os:1.36
  digest: ` + digestA + `
- image: https://images.example.com/node-1.36.qcow2
  kind: Metal3Machine
  backend: bootc
  ref: quay.io/example/metal3-os:1.36
  digest: ` + digestB + `
- image: {id: 0f3c}
  ref: example/os/x86_64/stable
  digest: ` + digestA + `
- image: ami-nodigest
  ref: example/os/nodigest
`

func TestParse(t *testing.T) {
	g := NewWithT(t)
	p, err := Parse([]byte(sampleYAML))
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(p.AcceptBootstrapOnlyFields()).To(BeTrue())
	g.Expect(p.Drain()).To(Equal(Drain{TimeoutSeconds: 120, SkipOnSingleNode: false}))
	g.Expect(p.BackendFor("edge", "store-42")).To(Equal("rauc"))
	g.Expect(p.BackendFor("edge", "other")).To(Equal("ostree"))

	k, tmpl, ok := p.InfraKindFor("infrastructure.example.com", "AcmeMachineTemplate")
	g.Expect(ok).To(BeTrue())
	g.Expect(tmpl).To(BeTrue())
	g.Expect(k.ImagePaths).To(Equal([][]string{{"os", "image"}, {"os", "sha"}}))
	g.Expect(k.IgnorePaths).To(Equal([][]string{{"tuning"}}))

	// Built-in kinds stay in place next to configured ones.
	_, _, ok = p.InfraKindFor("infrastructure.cluster.x-k8s.io", "Metal3Machine")
	g.Expect(ok).To(BeTrue())
}

// TestDrainForce: drain.force, which the coordinator's refusal to evict a pod
// without a controller names as the way out, is a key of the policy.
func TestDrainForce(t *testing.T) {
	g := NewWithT(t)
	p, err := Parse([]byte("drain:\n  force: true\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Drain()).To(Equal(Drain{TimeoutSeconds: 600, SkipOnSingleNode: true, Force: true}))
	g.Expect(Builtin().Drain().Force).To(BeFalse())
}

func TestDefaults(t *testing.T) {
	g := NewWithT(t)
	p := Builtin()
	g.Expect(p.AcceptBootstrapOnlyFields()).To(BeFalse())
	g.Expect(p.Drain()).To(Equal(Drain{TimeoutSeconds: 600, SkipOnSingleNode: true}))
	g.Expect(p.BackendFor("a", "b")).To(BeEmpty())
	for _, kind := range []string{"Metal3Machine", "VSphereMachine", "AWSMachine", "AzureMachine", "OpenStackMachine", "GCPMachine", "DockerMachine", "DevMachine"} {
		e, tmpl, ok := p.InfraKindFor("infrastructure.cluster.x-k8s.io", kind+"Template")
		g.Expect(ok).To(BeTrue(), kind)
		g.Expect(tmpl).To(BeTrue(), kind)
		g.Expect(e.ImagePaths).NotTo(BeEmpty(), kind)
	}
	_, _, ok := p.InfraKindFor("infrastructure.cluster.x-k8s.io", "NoSuchMachine")
	g.Expect(ok).To(BeFalse())
}

func TestConfigReplacesBuiltinKind(t *testing.T) {
	g := NewWithT(t)
	p, err := New(Config{InfrastructureKinds: []InfraKindConfig{{
		Group: "infrastructure.cluster.x-k8s.io", Kind: "AWSMachine", ImagePaths: []string{"spec.ami.arn"},
	}}})
	g.Expect(err).NotTo(HaveOccurred())
	e, _, _ := p.InfraKindFor("infrastructure.cluster.x-k8s.io", "AWSMachine")
	g.Expect(e.ImagePaths).To(Equal([][]string{{"ami", "arn"}}))
}

func TestValidation(t *testing.T) {
	neg := int32(-1)
	tests := []struct {
		name    string
		cfg     string
		wantErr string
	}{
		{name: "unknown field", cfg: "acceptBootstrapOnly: true", wantErr: "unknown field"},
		{name: "negative drain timeout", cfg: "drain: {timeoutSeconds: -1}", wantErr: "drain.timeoutSeconds -1 must be positive"},
		{name: "unknown default backend", cfg: "backends: {default: floppy}", wantErr: `backends.default "floppy"`},
		{name: "bad cluster key", cfg: "backends: {clusters: {nocluster: ostree}}", wantErr: "is not <namespace>/<cluster>"},
		{name: "kind without group", cfg: "infrastructureKinds: [{kind: X}]", wantErr: "group and kind are required"},
		{name: "template kind", cfg: "infrastructureKinds: [{group: g, kind: XTemplate}]", wantErr: "must be the machine kind"},
		{name: "path outside spec", cfg: "infrastructureKinds: [{group: g, kind: X, imagePaths: [status.image]}]", wantErr: "must look like spec."},
		{name: "empty path segment", cfg: "infrastructureKinds: [{group: g, kind: X, ignorePaths: [spec..a]}]", wantErr: "must look like spec."},
		{name: "duplicate kind", cfg: "infrastructureKinds: [{group: g, kind: X}, {group: g, kind: X}]", wantErr: "g/X is listed twice"},
		{name: "artifact without image", cfg: "artifacts: [{ref: r}]", wantErr: "artifacts[0].image must be"},
		{name: "artifact without ref", cfg: "artifacts: [{image: i}]", wantErr: "artifacts[0]: ref or url is required"},
		{name: "artifact bad digest", cfg: "artifacts: [{image: i, ref: r, digest: md5:abc}]", wantErr: "is not sha256:<64 lowercase hex>"},
		{name: "artifact unknown backend", cfg: "artifacts: [{image: i, ref: r, backend: floppy}]", wantErr: `artifacts[0].backend "floppy"`},
		{name: "artifact mapped twice", cfg: "artifacts: [{image: i, ref: r}, {image: i, ref: s}]", wantErr: "mapped twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tt.cfg))
			g.Expect(err).To(HaveOccurred())
			g.Expect(errors.Is(err, ErrInvalid)).To(BeTrue())
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
	g := NewWithT(t)
	_, err := New(Config{Drain: DrainConfig{TimeoutSeconds: &neg}})
	g.Expect(err).To(MatchError(ContainSubstring("must be positive")))
}

func TestOSImageFor(t *testing.T) {
	p, err := Parse([]byte(sampleYAML))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	noBackend, err := New(Config{Artifacts: []ArtifactConfig{{Image: "img", Ref: "r", Digest: digestA}}})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	tests := []struct {
		name       string
		pol        *Policy
		kind       string
		image      any
		cluster    string
		want       *protocol.OSImage
		wantReason string
	}{
		{name: "kind-specific entry wins", pol: p, kind: "Metal3Machine", image: "https://images.example.com/node-1.36.qcow2", cluster: "c",
			want: &protocol.OSImage{Backend: "bootc", Ref: "quay.io/example/metal3-os:1.36", Digest: digestB}},
		{name: "kind-less entry, default backend", pol: p, kind: "VSphereMachine", image: "https://images.example.com/node-1.36.qcow2", cluster: "c",
			want: &protocol.OSImage{Backend: "ostree", Ref: "quay.io/example/node-os:1.36", Digest: digestA}},
		{name: "kind-less entry, cluster backend", pol: p, kind: "VSphereMachine", image: "https://images.example.com/node-1.36.qcow2", cluster: "store-42",
			want: &protocol.OSImage{Backend: "rauc", Ref: "quay.io/example/node-os:1.36", Digest: digestA}},
		{name: "object image", pol: p, kind: "OpenStackMachine", image: map[string]any{"id": "0f3c"}, cluster: "c",
			want: &protocol.OSImage{Backend: "ostree", Ref: "example/os/x86_64/stable", Digest: digestA}},
		{name: "not mapped", pol: p, kind: "AWSMachine", image: "ami-unknown", wantReason: "image ami-unknown is not mapped"},
		{name: "no digest", pol: p, kind: "AWSMachine", image: "ami-nodigest", wantReason: "has no digest"},
		{name: "no backend", pol: noBackend, kind: "AWSMachine", image: "img", cluster: "c", wantReason: "no OS backend is configured for cluster edge/c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, reason := tt.pol.OSImageFor(tt.kind, tt.image, "edge", tt.cluster)
			if tt.want != nil {
				g.Expect(reason).To(BeEmpty())
				g.Expect(got).To(Equal(tt.want))
				return
			}
			g.Expect(got).To(BeNil())
			g.Expect(reason).To(ContainSubstring(tt.wantReason))
		})
	}
}

func TestResolveOSImage(t *testing.T) {
	p, err := Parse([]byte(sampleYAML))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	obj := func(kind string, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": kind, "spec": spec,
		}}
		u.SetName("m-1")
		u.SetNamespace("edge")
		u.SetLabels(map[string]string{"cluster.x-k8s.io/cluster-name": "store-42"})
		return u
	}
	tests := []struct {
		name        string
		obj         *unstructured.Unstructured
		want        *protocol.OSImage
		wantPresent bool
		wantErr     error
	}{
		{name: "metal3 machine", obj: obj("Metal3Machine", map[string]any{"image": map[string]any{"url": "https://images.example.com/node-1.36.qcow2", "checksum": "x"}}),
			want: &protocol.OSImage{Backend: "bootc", Ref: "quay.io/example/metal3-os:1.36", Digest: digestB}, wantPresent: true},
		{name: "metal3 template", obj: obj("Metal3MachineTemplate", map[string]any{"template": map[string]any{"spec": map[string]any{"image": map[string]any{"url": "https://images.example.com/node-1.36.qcow2"}}}}),
			want: &protocol.OSImage{Backend: "bootc", Ref: "quay.io/example/metal3-os:1.36", Digest: digestB}, wantPresent: true},
		{name: "vsphere uses the cluster's backend", obj: obj("VSphereMachine", map[string]any{"template": "https://images.example.com/node-1.36.qcow2"}),
			want: &protocol.OSImage{Backend: "rauc", Ref: "quay.io/example/node-os:1.36", Digest: digestA}, wantPresent: true},
		{name: "image not set", obj: obj("DockerMachine", map[string]any{}), wantPresent: false},
		{name: "image not mapped", obj: obj("AWSMachine", map[string]any{"ami": map[string]any{"id": "ami-1"}}), wantPresent: true, wantErr: ErrUnresolvable},
		{name: "unknown kind", obj: obj("FooMachine", map[string]any{}), wantErr: ErrUnknownKind},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, present, err := p.ResolveOSImage(tt.obj)
			g.Expect(present).To(Equal(tt.wantPresent))
			if tt.wantErr != nil {
				g.Expect(err).To(MatchError(tt.wantErr))
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
			if got != nil {
				plan := protocol.NewPlan("n")
				plan.OS = got
				// The resolved image must be acceptable in a node plan as is.
				g.Expect(plan.Validate().Error()).NotTo(ContainSubstring("os."))
			}
		})
	}
}
