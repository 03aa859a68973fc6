package preview_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/preview"
	"github.com/capi-inplace/capi-inplace/internal/preview/previewtest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

var now = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// capabilities are those of the real backends, as the CLI builds them.
var capabilities = map[string]backend.Capabilities{
	"none":     {},
	"rauc":     {NeedsReboot: true, SupportsRollback: true, HasMarkGood: true, VerifiesDigest: true},
	"packages": {CanStage: true, SupportsRollback: true, VerifiesDigest: true},
}

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// mapped is a policy that maps the next worker OS image to an artifact.
const mapped = `
backends: {default: rauc}
artifacts:
- image: registry.example/node-os:2.0
  ref: https://artifacts.example/node-os-2.0.raucb
  digest: ` + digest + `
`

func parsePolicy(t *testing.T, text string) *policy.Policy {
	t.Helper()
	if text == "" {
		return policy.Builtin()
	}
	p, err := policy.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// plan runs Apply and Build as the CLI does.
func plan(t *testing.T, o previewtest.Options, pol string, change string) preview.Report {
	t.Helper()
	g := NewWithT(t)
	live := previewtest.MustSnapshot(t, o)
	proposed, notes := live, []string(nil)
	if change != "" {
		objs, err := preview.ParseChange([]byte(change))
		g.Expect(err).NotTo(HaveOccurred())
		proposed, notes, err = preview.Apply(live, objs)
		g.Expect(err).NotTo(HaveOccurred())
	}
	p := parsePolicy(t, pol)
	pl, err := planner.New(p)
	g.Expect(err).NotTo(HaveOccurred())
	r, err := preview.Build(preview.Input{Live: live, Proposed: proposed, Planner: pl, Policy: p, Backends: capabilities, Now: now, Notes: notes, Change: "change.yaml"})
	g.Expect(err).NotTo(HaveOccurred())
	return r
}

func topologyVersion(v string) string {
	return "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo, namespace: fleet}\nspec: {topology: {version: " + v + "}}\n"
}

const filesChange = `apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata: {name: demo-md-0-v2, namespace: fleet}
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          kubeletExtraArgs: [{name: eviction-hard, value: "nodefs.available<0%"}]
      files:
      - {path: /etc/motd, content: "worker\n"}
      - {path: /etc/sysctl.d/90-inplace.conf, content: "vm.swappiness=10\n"}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: demo-md-0, namespace: fleet}
spec:
  template:
    spec:
      bootstrap:
        configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfigTemplate, name: demo-md-0-v2}
`

// imageTemplate is a DevMachineTemplate of the OS image the policy mapped maps.
func imageTemplate(name string) string {
	return "apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: DevMachineTemplate\nmetadata: {name: " + name + "}\n" +
		`spec: {template: {spec: {backend: {docker: {customImage: "registry.example/node-os:2.0"}}}}}` + "\n---\n"
}

var imageChange = imageTemplate("demo-md-0-v2") + `apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: demo-md-0}
spec: {template: {spec: {infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DevMachineTemplate, name: demo-md-0-v2}}}}
`

// cpImageAndVersion moves a plain cluster's control plane to the OS image mapped
// and to Kubernetes v1.36.0 in one change.
var cpImageAndVersion = imageTemplate("demo-cp-v2") + `apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata: {name: demo-cp}
spec:
  machineTemplate: {spec: {infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DevMachineTemplate, name: demo-cp-v2}}}
  version: v1.36.0
`

// workerImageAndVersion moves a plain cluster's workers to the OS image mapped and
// to Kubernetes v1.36.0 in one change.
var workerImageAndVersion = imageTemplate("demo-md-0-v2") + `apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: demo-md-0}
spec:
  template:
    spec:
      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DevMachineTemplate, name: demo-md-0-v2}
      version: v1.36.0
`

// binariesFor is a policy's kubernetesBinaries entry for version on linux/amd64.
func binariesFor(version string) string {
	return "kubernetesBinaries:\n  " + version + ":\n    linux/amd64:\n" +
		"      kubeadm: {url: \"https://dl.k8s.io/" + version + "/kubeadm\", digest: \"" + digest + "\"}\n" +
		"      kubelet: {url: \"https://dl.k8s.io/" + version + "/kubelet\", digest: \"" + digest + "\"}\n"
}

func verdicts(r preview.Report) map[string]preview.Verdict {
	out := map[string]preview.Verdict{}
	for _, m := range r.Machines {
		out[m.Name] = m.Verdict
	}
	return out
}

func machine(t *testing.T, r preview.Report, name string) preview.MachinePlan {
	t.Helper()
	for _, m := range r.Machines {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no machine %s in plan", name)
	return preview.MachinePlan{}
}

func TestBuild(t *testing.T) {
	def := previewtest.Default()
	with := func(f func(*previewtest.Options)) previewtest.Options {
		o := previewtest.Default()
		f(&o)
		return o
	}
	// singleCPImage is a plain single-node cluster whose node runs an OS image.
	singleCPImage := with(func(o *previewtest.Options) {
		o.Topology, o.CPReplicas, o.Workers, o.CPImage = false, 1, 0, "registry.example/node-os:1.0"
		o.ClusterAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
	})
	cp := []string{"demo-cp-0", "demo-cp-1", "demo-cp-2"}
	workers := []string{"demo-md-0-v1-0", "demo-md-0-v1-1"}
	all := append(append([]string{}, cp...), workers...)
	want := func(v preview.Verdict, names ...string) map[string]preview.Verdict {
		out := map[string]preview.Verdict{}
		for _, n := range all {
			out[n] = preview.VerdictUnchanged
		}
		for _, n := range names {
			out[n] = v
		}
		return out
	}

	tests := []struct {
		name     string
		opts     previewtest.Options
		policy   string
		change   string
		verdicts map[string]preview.Verdict
		check    func(g *WithT, r preview.Report)
	}{
		{
			name: "no change: every machine unchanged", opts: def,
			verdicts: want(preview.VerdictUnchanged),
			check: func(g *WithT, r preview.Report) {
				g.Expect(r.Summary).To(Equal(preview.Summary{Machines: 5, Unchanged: 5}))
				g.Expect(r.Machines[0].Changes).To(BeEmpty())
			},
		},
		{
			name: "one minor up through the Cluster topology: all in place", opts: def, change: topologyVersion("v1.36.0"),
			verdicts: want(preview.VerdictInPlace, all...),
			check: func(g *WithT, r preview.Report) {
				g.Expect(r.Notes).To(ContainElement(ContainSubstring("topology version v1.35.0 -> v1.36.0")))
				m := machine(t, r, "demo-cp-1")
				g.Expect(m.Path).To(Equal(preview.PathKCP))
				g.Expect(m.DesiredVersion).To(Equal("v1.36.0"))
				// KCP drops a version-derived kubeadm feature gate at 1.36: covered with the version.
				g.Expect(m.Changes).To(ContainElement(HaveField("Field", "spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode")))
				g.Expect(m.Drain).To(Equal(preview.Drain{Needed: true, By: preview.DrainByInPlace, Reason: "cordoned and drained before the update (5 nodes)"}))
				g.Expect(m.Reboot.Needed).To(BeFalse())
				g.Expect(m.Backend).To(Equal(preview.Backend{Name: "none", Source: "none"}))
				w := machine(t, r, "demo-md-0-v1-0")
				g.Expect(w.Path).To(Equal(preview.PathMD))
				g.Expect(w.Changes).To(ConsistOf(HaveField("Field", "spec.template.spec.version")))
			},
		},
		{
			name: "a MachineDeployment version change: workers in place", opts: def,
			change:   "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: demo-md-0}\nspec: {template: {spec: {version: v1.35.4}}}\n",
			verdicts: want(preview.VerdictInPlace, workers...),
			check: func(g *WithT, r preview.Report) {
				w := machine(t, r, workers[0])
				g.Expect(w.DesiredVersion).To(Equal("v1.35.4"))
				g.Expect(w.Changes).To(ConsistOf(HaveField("Reason", ContainSubstring("is a patch upgrade"))))
			},
		},
		{
			name: "a paused Cluster is noted", opts: with(func(o *previewtest.Options) {
				o.ClusterAnnotations = map[string]string{inplacev1.PausedAnnotation: "true"}
			}),
			verdicts: want(preview.VerdictUnchanged),
			check: func(g *WithT, r preview.Report) {
				g.Expect(r.Notes).To(HaveExactElements(ContainSubstring("starts no node update")))
			},
		},
		{
			name: "two minors up: all replaced, reason named", opts: def, change: topologyVersion("v1.37.0"),
			verdicts: want(preview.VerdictReplace, all...),
			check: func(g *WithT, r preview.Report) {
				for _, name := range all {
					m := machine(t, r, name)
					g.Expect(m.Reasons).To(ContainElement(ContainSubstring("skips a minor version")), name)
					g.Expect(m.Drain.By).To(Equal(preview.DrainByClusterAPI))
				}
				g.Expect(r.Summary.Replace).To(Equal(5))
			},
		},
		{
			name: "files change in a new KubeadmConfigTemplate: workers in place", opts: def, change: filesChange,
			verdicts: want(preview.VerdictInPlace, workers...),
			check: func(g *WithT, r preview.Report) {
				w := machine(t, r, "demo-md-0-v1-1")
				g.Expect(w.Changes).To(ConsistOf(And(HaveField("Object", "KubeadmConfigTemplate"), HaveField("Field", "spec.template.spec.files"), HaveField("Covered", true))))
			},
		},
		{
			name: "KCP maxSurge 1 surges: control plane replaced", opts: with(func(o *previewtest.Options) { o.KCPMaxSurge = 1 }), change: topologyVersion("v1.36.0"),
			verdicts: map[string]preview.Verdict{cp[0]: preview.VerdictReplace, cp[1]: preview.VerdictReplace, cp[2]: preview.VerdictReplace,
				workers[0]: preview.VerdictInPlace, workers[1]: preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").Reasons).To(HaveExactElements(ContainSubstring("maxSurge 1")))
			},
		},
		{
			name: "single control-plane node without the opt-in: replaced", opts: with(func(o *previewtest.Options) { o.CPReplicas = 1 }), change: topologyVersion("v1.36.0"),
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictReplace, workers[0]: preview.VerdictInPlace, workers[1]: preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				m := machine(t, r, "demo-cp-0")
				g.Expect(m.Causes).To(HaveExactElements(And(HaveField("Kind", preview.CauseRollout),
					HaveField("Message", ContainSubstring("1 replica(s)")), HaveField("Message", ContainSubstring(inplacev1.SingleNodeControlPlaneAnnotation+"=true")))))
			},
		},
		{
			name: "single control-plane node with an opt-in value other than true on both: replaced",
			opts: with(func(o *previewtest.Options) {
				o.CPReplicas = 1
				o.ClusterAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "false"}
				o.KCPAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "yes"}
			}),
			change:   topologyVersion("v1.36.0"),
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictReplace, workers[0]: preview.VerdictInPlace, workers[1]: preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").Causes).To(ContainElement(HaveField("Kind", preview.CauseRollout)))
			},
		},
		{
			// What the topology controller does with spec.topology.controlPlane.metadata.annotations
			// (merged with the ClusterClass's controlPlane.metadata into the KCP's metadata,
			// server-side applied), and what the single-node controller's copy leaves when
			// Cluster API drops the Cluster's annotations: the KCP carries the opt-in, the
			// Cluster does not. internal/singlenode takes its path for it (KCPOptedIn).
			name: "single control-plane node opted in on the KubeadmControlPlane alone: our path",
			opts: with(func(o *previewtest.Options) {
				o.CPReplicas = 1
				o.KCPAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
			}),
			change:   topologyVersion("v1.36.0"),
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace, workers[0]: preview.VerdictInPlace, workers[1]: preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				m := machine(t, r, "demo-cp-0")
				g.Expect(m.Path).To(Equal(preview.PathSingleNode))
				g.Expect(m.Causes).To(BeEmpty())
			},
		},
		{
			name: "single control-plane node opted in by the KubeadmControlPlane write itself: our path",
			opts: with(func(o *previewtest.Options) { o.CPReplicas = 1 }),
			change: "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\n" +
				"metadata: {name: demo-cp, annotations: {" + inplacev1.SingleNodeControlPlaneAnnotation + ": \"true\"}}\nspec: {version: v1.36.0}\n",
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace, workers[0]: preview.VerdictUnchanged, workers[1]: preview.VerdictUnchanged},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").Path).To(Equal(preview.PathSingleNode))
			},
		},
		{
			name: "single control-plane node whose KubeadmControlPlane write removes its only opt-in: replaced",
			opts: with(func(o *previewtest.Options) {
				o.CPReplicas = 1
				o.KCPAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
			}),
			change: "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\n" +
				"metadata: {name: demo-cp, annotations: {" + inplacev1.SingleNodeControlPlaneAnnotation + ": null}}\nspec: {version: v1.36.0}\n",
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictReplace, workers[0]: preview.VerdictUnchanged, workers[1]: preview.VerdictUnchanged},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").Causes).To(ContainElement(HaveField("Kind", preview.CauseRollout)))
			},
		},
		{
			name: "single control-plane node opted in on the Cluster alone: our path, drained (other nodes exist)",
			opts: with(func(o *previewtest.Options) {
				o.CPReplicas = 1
				o.ClusterAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
			}),
			change:   topologyVersion("v1.36.0"),
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace, workers[0]: preview.VerdictInPlace, workers[1]: preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				m := machine(t, r, "demo-cp-0")
				g.Expect(m.Path).To(Equal(preview.PathSingleNode))
				g.Expect(m.Drain.Needed).To(BeTrue())
			},
		},
		{
			name: "a single-node cluster: cordon only, no eviction",
			opts: with(func(o *previewtest.Options) {
				o.CPReplicas, o.Workers = 1, 0
				o.ClusterAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
			}),
			change:   topologyVersion("v1.36.0"),
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").Drain).To(Equal(preview.Drain{Needed: false, By: preview.DrainByInPlace,
					Reason: "the cluster's only node: cordoned, pods are not evicted (policy drain.skipOnSingleNode)"}))
			},
		},
		{
			name: "a single control plane's minor upgrade: a rollback restores etcd, and the preview says so",
			opts: with(func(o *previewtest.Options) {
				o.CPReplicas, o.Workers = 1, 0
				o.ClusterAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
			}),
			change:   topologyVersion("v1.36.0"),
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").EtcdOnRollback).To(Equal(&preview.EtcdOnRollback{Restore: true, Reason: protocol.EtcdMinorVersionChange}))
			},
		},
		{
			name: "a single control plane's patch upgrade: a rollback keeps etcd's data",
			opts: with(func(o *previewtest.Options) {
				o.CPReplicas, o.Workers = 1, 0
				o.ClusterAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
			}),
			change:   topologyVersion("v1.35.1"),
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").EtcdOnRollback).To(Equal(&preview.EtcdOnRollback{Restore: false, Reason: protocol.EtcdDataUnchanged}))
			},
		},
		{
			name: "a single control plane under etcdRestore Never: kept whatever changes",
			opts: with(func(o *previewtest.Options) {
				o.CPReplicas, o.Workers = 1, 0
				o.ClusterAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
			}),
			policy: "kubeadm: {etcdRestore: Never}", change: topologyVersion("v1.36.0"),
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").EtcdOnRollback).To(Equal(&preview.EtcdOnRollback{Restore: false, Reason: protocol.EtcdPolicyNever}))
			},
		},
		{
			name: "a single-node cluster with skipOnSingleNode false: evicted anyway",
			opts: with(func(o *previewtest.Options) {
				o.CPReplicas, o.Workers = 1, 0
				o.ClusterAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
			}),
			policy: "drain: {skipOnSingleNode: false}", change: topologyVersion("v1.36.0"),
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").Drain.Needed).To(BeTrue())
			},
		},
		{
			name: "MachineDeployment maxUnavailable 0 surges: workers replaced", opts: with(func(o *previewtest.Options) { o.MDMaxUnavailable = 0 }), change: filesChange,
			verdicts: want(preview.VerdictReplace, workers...),
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, workers[0]).Reasons).To(HaveExactElements(ContainSubstring("maxUnavailable 0")))
			},
		},
		{
			name: "MachineDeployment OnDelete: workers replaced", opts: def,
			change:   filesChange + "  rollout: {strategy: {type: OnDelete, rollingUpdate: null}}\n",
			verdicts: want(preview.VerdictReplace, workers...),
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, workers[0]).Reasons).To(HaveExactElements(ContainSubstring("OnDelete")))
			},
		},
		{
			name: "OS image change mapped to a rauc artifact: in place with a reboot", opts: def, policy: mapped, change: imageChange,
			verdicts: want(preview.VerdictInPlace, workers...),
			check: func(g *WithT, r preview.Report) {
				w := machine(t, r, workers[0])
				g.Expect(w.Reboot).To(Equal(preview.Reboot{Needed: true, Reason: "backend rauc switches the OS image at the next boot"}))
				g.Expect(w.Backend).To(Equal(preview.Backend{Name: "rauc", Source: "policy default", Runs: true}))
				g.Expect(w.OSImage).To(Equal(&preview.OSImageChange{Field: "spec.template.spec.backend.docker.customImage",
					From: "registry.example/node-os:1.0", To: "registry.example/node-os:2.0", Artifact: "https://artifacts.example/node-os-2.0.raucb", Digest: digest}))
			},
		},
		{
			name: "OS image change with a packages artifact: no reboot", opts: def,
			policy: strings.Replace(mapped, "  ref:", "  backend: packages\n  ref:", 1), change: imageChange,
			verdicts: want(preview.VerdictInPlace, workers...),
			check: func(g *WithT, r preview.Report) {
				w := machine(t, r, workers[0])
				g.Expect(w.Reboot.Needed).To(BeFalse())
				g.Expect(w.Backend).To(Equal(preview.Backend{Name: "packages", Source: "policy artifact", Runs: true}))
			},
		},
		{
			name: "a control plane's image and version, kubeadm only in the image: image first, the kubelet ahead",
			opts: singleCPImage, policy: mapped, change: cpImageAndVersion,
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").ImageOrder).To(Equal(protocol.ImageOrderImageFirstKubeletAhead))
			},
		},
		{
			name: "a control plane's image and version, kubeadm and kubelet in the policy: Kubernetes first",
			opts: singleCPImage, policy: mapped + binariesFor("v1.36.0"), change: cpImageAndVersion,
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").ImageOrder).To(Equal(protocol.ImageOrderKubernetesFirst))
			},
		},
		{
			name: "a worker's image and version: image first, after the control plane",
			opts: with(func(o *previewtest.Options) { o.Topology = false }), policy: mapped, change: workerImageAndVersion,
			verdicts: want(preview.VerdictInPlace, workers...),
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, workers[0]).ImageOrder).To(Equal(protocol.ImageOrderImageFirstWorker))
			},
		},
		{
			name: "a control plane's image alone: no order to report",
			opts: singleCPImage, policy: mapped, change: cpImageAndVersion[:strings.Index(cpImageAndVersion, "  version:")],
			verdicts: map[string]preview.Verdict{"demo-cp-0": preview.VerdictInPlace},
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").ImageOrder).To(BeEmpty())
			},
		},
		{
			name: "OS image change not in the policy: replaced with the policy's reason", opts: def, change: imageChange,
			verdicts: want(preview.VerdictReplace, workers...),
			check: func(g *WithT, r preview.Report) {
				w := machine(t, r, workers[0])
				g.Expect(w.Reasons).To(HaveExactElements(ContainSubstring("is not mapped to a node-side OS artifact")))
				g.Expect(w.OSImage.Artifact).To(BeEmpty())
			},
		},
		{
			name: "bootstrap-only field: replaced", opts: def,
			change:   "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp}\nspec: {kubeadmConfigSpec: {preKubeadmCommands: [echo hi]}}\n",
			verdicts: want(preview.VerdictReplace, cp...),
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").Reasons).To(HaveExactElements(ContainSubstring("preKubeadmCommands")))
			},
		},
		{
			name: "backend from annotations: MachineDeployment over Cluster over policy", opts: with(func(o *previewtest.Options) {
				o.ClusterAnnotations = map[string]string{inplacev1.BackendAnnotation: "ostree"}
			}),
			policy: "backends: {default: bootc}",
			change: topologyVersion("v1.36.0") + "---\napiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: demo-md-0, annotations: {" +
				inplacev1.BackendAnnotation + ": rauc}}\n",
			verdicts: want(preview.VerdictInPlace, all...),
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").Backend).To(Equal(preview.Backend{Name: "ostree", Source: "Cluster annotation"}))
				g.Expect(machine(t, r, workers[0]).Backend).To(Equal(preview.Backend{Name: "rauc", Source: "MachineDeployment annotation"}))
			},
		},
		{
			name: "policy cluster entry", opts: def, policy: "backends: {default: bootc, clusters: {fleet/demo: ostree}}", change: topologyVersion("v1.36.0"),
			verdicts: want(preview.VerdictInPlace, all...),
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, "demo-cp-0").Backend).To(Equal(preview.Backend{Name: "ostree", Source: "policy cluster entry"}))
			},
		},
		{
			name: "a template the MachineDeployment points at does not exist: replaced", opts: def,
			change:   "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: demo-md-0}\nspec: {template: {spec: {infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DevMachineTemplate, name: nope}}}}\n",
			verdicts: want(preview.VerdictReplace, workers...),
			check: func(g *WithT, r preview.Report) {
				g.Expect(machine(t, r, workers[0]).Reasons).To(HaveExactElements(ContainSubstring("DevMachineTemplate nope was not found")))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := plan(t, tt.opts, tt.policy, tt.change)
			g.Expect(verdicts(r)).To(Equal(tt.verdicts))
			if tt.check != nil {
				tt.check(g, r)
			}
		})
	}
}

// TestBuildControlPlaneSpecifics covers what only KCP does: comparing the first
// Machine's config as kubeadm init, and rollout.after.
func TestBuildControlPlaneSpecifics(t *testing.T) {
	pl, err := planner.New(policy.Builtin())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("init and join configurations differ: the init Machine is compared as init", func(t *testing.T) {
		g := NewWithT(t)
		o := previewtest.Default()
		o.InitKubeletArg = "memory.available<100Mi"
		live := previewtest.MustSnapshot(t, o)
		r, err := preview.Build(preview.Input{Live: live, Proposed: live, Planner: pl, Policy: policy.Builtin(), Now: now})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Summary.Unchanged).To(Equal(5))

		// A real change to the init configuration is still seen on the init Machine.
		kcp := "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp}\n" +
			"spec: {kubeadmConfigSpec: {initConfiguration: {nodeRegistration: {kubeletExtraArgs: [{name: eviction-hard, value: x}]}}}}\n"
		objs, err := preview.ParseChange([]byte(kcp))
		g.Expect(err).NotTo(HaveOccurred())
		proposed, _, err := preview.Apply(live, objs)
		g.Expect(err).NotTo(HaveOccurred())
		r, err = preview.Build(preview.Input{Live: live, Proposed: proposed, Planner: pl, Policy: policy.Builtin(), Now: now})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(verdicts(r)).To(HaveKeyWithValue("demo-cp-0", preview.VerdictInPlace))
		g.Expect(machine(t, r, "demo-cp-0").Changes).To(ConsistOf(HaveField("Field", "spec.joinConfiguration.nodeRegistration.kubeletExtraArgs")))
	})

	t.Run("a passed rollout.after replaces Machines created before it", func(t *testing.T) {
		g := NewWithT(t)
		live := previewtest.MustSnapshot(t, previewtest.Default())
		for i := range live.Machines {
			live.Machines[i].CreationTimestamp = metav1.NewTime(now.Add(-48 * time.Hour))
		}
		objs, err := preview.ParseChange([]byte(topologyVersion("v1.36.0")))
		g.Expect(err).NotTo(HaveOccurred())
		proposed, _, err := preview.Apply(live, objs)
		g.Expect(err).NotTo(HaveOccurred())
		proposed.ControlPlane.Spec.Rollout.After = metav1.NewTime(now.Add(-time.Hour))
		r, err := preview.Build(preview.Input{Live: live, Proposed: proposed, Planner: pl, Policy: policy.Builtin(), Now: now})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(machine(t, r, "demo-cp-0").Reasons).To(HaveExactElements(ContainSubstring("rollout.after 2026-11-30T08:00:00Z has passed")))

		proposed.ControlPlane.Spec.Rollout.After = metav1.NewTime(now.Add(time.Hour))
		r, err = preview.Build(preview.Input{Live: live, Proposed: proposed, Planner: pl, Policy: policy.Builtin(), Now: now})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(machine(t, r, "demo-cp-0").Verdict).To(Equal(preview.VerdictInPlace))
	})
}

// TestBuildUnhealthyControlPlaneMachine: a control-plane Machine whose control-plane
// component condition is False is replaced when its KubeadmControlPlane changes (KCP
// scales it down instead of updating it in place); healthy ones stay in place, and
// without a change nothing is reported.
func TestBuildUnhealthyControlPlaneMachine(t *testing.T) {
	g := NewWithT(t)
	pl, err := planner.New(policy.Builtin())
	g.Expect(err).NotTo(HaveOccurred())
	live := previewtest.MustSnapshot(t, previewtest.Default())
	for i := range live.Machines {
		if live.Machines[i].Name == "demo-cp-1" {
			live.Machines[i].Status.Conditions = append(live.Machines[i].Status.Conditions, metav1.Condition{
				Type: "EtcdMemberHealthy", Status: metav1.ConditionFalse, Reason: "MemberUnhealthy",
			})
		}
	}
	r, err := preview.Build(preview.Input{Live: live, Proposed: live, Planner: pl, Policy: policy.Builtin(), Now: now})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(machine(t, r, "demo-cp-1").Verdict).To(Equal(preview.VerdictUnchanged))

	objs, err := preview.ParseChange([]byte(topologyVersion("v1.36.0")))
	g.Expect(err).NotTo(HaveOccurred())
	proposed, _, err := preview.Apply(live, objs)
	g.Expect(err).NotTo(HaveOccurred())
	r, err = preview.Build(preview.Input{Live: live, Proposed: proposed, Planner: pl, Policy: policy.Builtin(), Now: now})
	g.Expect(err).NotTo(HaveOccurred())
	m := machine(t, r, "demo-cp-1")
	g.Expect(m.Verdict).To(Equal(preview.VerdictReplace))
	g.Expect(m.Causes).To(HaveExactElements(And(
		HaveField("Kind", preview.CauseUnhealthyControlPlane),
		HaveField("Message", ContainSubstring("demo-cp-1 is not healthy (EtcdMemberHealthy MemberUnhealthy)")))))
	g.Expect(m.Reasons).To(HaveExactElements(m.Causes[0].Message))
	g.Expect(machine(t, r, "demo-cp-0").Verdict).To(Equal(preview.VerdictInPlace))
	g.Expect(machine(t, r, "demo-cp-2").Verdict).To(Equal(preview.VerdictInPlace))
}

// TestBuildMachineAnnotations covers the Machine-level reasons for replacement.
func TestBuildMachineAnnotations(t *testing.T) {
	tests := []struct {
		name, annotation, want string
	}{
		{"delete-machine", "cluster.x-k8s.io/delete-machine", "Cluster API deletes it first"},
		{"remediate-machine", "cluster.x-k8s.io/remediate-machine", "remediated by replacement"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			live := previewtest.MustSnapshot(t, previewtest.Default())
			live.Machines[0].Annotations = map[string]string{tt.annotation: ""}
			objs, err := preview.ParseChange([]byte(topologyVersion("v1.36.0")))
			g.Expect(err).NotTo(HaveOccurred())
			proposed, _, err := preview.Apply(live, objs)
			g.Expect(err).NotTo(HaveOccurred())
			pl, _ := planner.New(policy.Builtin())
			r, err := preview.Build(preview.Input{Live: live, Proposed: proposed, Planner: pl, Policy: policy.Builtin(), Now: now})
			g.Expect(err).NotTo(HaveOccurred())
			m := machine(t, r, live.Machines[0].Name)
			g.Expect(m.Verdict).To(Equal(preview.VerdictReplace))
			g.Expect(m.Reasons).To(ContainElement(ContainSubstring(tt.want)))

			// Without a change the annotation alone changes nothing here.
			r, err = preview.Build(preview.Input{Live: live, Proposed: live, Planner: pl, Policy: policy.Builtin(), Now: now})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(machine(t, r, live.Machines[0].Name).Verdict).To(Equal(preview.VerdictUnchanged))
		})
	}
}

// TestApply covers how a change is merged over the live objects.
func TestApply(t *testing.T) {
	tests := []struct {
		name    string
		change  string
		plain   bool // a Cluster without spec.topology
		wantErr string
		check   func(g *WithT, live, proposed preview.Snapshot, notes []string)
	}{
		{
			name:   "merge keeps what the change does not name, replaces lists",
			change: "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp, namespace: fleet, resourceVersion: '9'}\nspec:\n  kubeadmConfigSpec:\n    files: [{path: /etc/new, content: x}]\n",
			check: func(g *WithT, live, proposed preview.Snapshot, _ []string) {
				g.Expect(proposed.ControlPlane.Spec.KubeadmConfigSpec.Files).To(HaveLen(1))
				g.Expect(proposed.ControlPlane.Spec.KubeadmConfigSpec.Files[0].Path).To(Equal("/etc/new"))
				g.Expect(proposed.ControlPlane.Spec.Version).To(Equal("v1.35.0"))
				g.Expect(proposed.ControlPlane.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.CertSANs).To(Equal(live.ControlPlane.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.CertSANs))
				g.Expect(live.ControlPlane.Spec.KubeadmConfigSpec.Files[0].Path).To(Equal("/etc/motd"), "the live snapshot is not modified")
			},
		},
		{
			name:   "topology version moves KCP and topology-owned MachineDeployments",
			change: topologyVersion("v1.36.0"),
			check: func(g *WithT, _, proposed preview.Snapshot, notes []string) {
				g.Expect(proposed.ControlPlane.Spec.Version).To(Equal("v1.36.0"))
				g.Expect(proposed.MachineDeployments[0].Spec.Template.Spec.Version).To(Equal("v1.36.0"))
				g.Expect(notes).To(HaveExactElements(ContainSubstring("KubeadmControlPlane demo-cp, MachineDeployment demo-md-0")))
			},
		},
		{
			name:   "an explicit KCP version wins over the topology version",
			change: "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp}\nspec: {version: v1.35.3}\n---\n" + topologyVersion("v1.36.0"),
			check: func(g *WithT, _, proposed preview.Snapshot, _ []string) {
				g.Expect(proposed.ControlPlane.Spec.Version).To(Equal("v1.35.3"))
			},
		},
		{
			name:   "other topology changes are noted, not previewed",
			change: "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo}\nspec: {topology: {variables: [{name: files, value: []}]}}\n",
			check: func(g *WithT, _, _ preview.Snapshot, notes []string) {
				g.Expect(notes).To(HaveExactElements(ContainSubstring("not previewed")))
			},
		},
		{
			name:   "a template changed under the same name is noted",
			change: "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfigTemplate\nmetadata: {name: demo-md-0-v1}\nspec: {template: {spec: {files: [{path: /etc/x, content: y}]}}}\n",
			check: func(g *WithT, _, _ preview.Snapshot, notes []string) {
				g.Expect(notes).To(HaveExactElements(ContainSubstring("KubeadmConfigTemplate demo-md-0-v1 changes under the same name")))
			},
		},
		{
			name:   "a new MachineDeployment is noted",
			change: "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: md-new}\nspec: {clusterName: demo}\n",
			check: func(g *WithT, _, _ preview.Snapshot, notes []string) {
				g.Expect(notes).To(HaveExactElements(ContainSubstring("MachineDeployment md-new does not exist yet")))
			},
		},
		{
			name:   "a topology version on a Cluster without topology changes nothing",
			change: topologyVersion("v1.36.0"),
			plain:  true,
			check: func(g *WithT, _, proposed preview.Snapshot, notes []string) {
				g.Expect(proposed.ControlPlane.Spec.Version).To(Equal("v1.35.0"))
				g.Expect(notes).To(HaveExactElements(ContainSubstring("not a ClusterClass cluster")))
			},
		},
		{name: "another namespace", change: "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo, namespace: other}\n", wantErr: "namespace other"},
		{name: "another cluster", change: "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: other}\n", wantErr: "names Cluster other"},
		{name: "another control plane", change: "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: other}\n", wantErr: "is not the control plane"},
		{name: "an older apiVersion", change: "apiVersion: cluster.x-k8s.io/v1beta1\nkind: MachineDeployment\nmetadata: {name: demo-md-0}\n", wantErr: "apiVersion cluster.x-k8s.io/v1beta1"},
		{name: "a Machine", change: "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Machine\nmetadata: {name: demo-cp-0}\n", wantErr: "follow their owner"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			o := previewtest.Default()
			o.Topology = !tt.plain
			live := previewtest.MustSnapshot(t, o)
			objs, err := preview.ParseChange([]byte(tt.change))
			g.Expect(err).NotTo(HaveOccurred())
			proposed, notes, err := preview.Apply(live, objs)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(preview.ErrInvalidChange))
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			tt.check(g, live, proposed, notes)
		})
	}
}

func TestParseChange(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{name: "documents, empty ones skipped", in: "---\n" + topologyVersion("v1") + "---\n---\n" + filesChange, want: []string{"Cluster", "KubeadmConfigTemplate", "MachineDeployment"}},
		{name: "JSON", in: `{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Cluster","metadata":{"name":"demo"}}`, want: []string{"Cluster"}},
		{name: "no name", in: "apiVersion: v1\nkind: ConfigMap\n", wantErr: "needs apiVersion, kind and metadata.name"},
		{name: "nothing", in: "---\n", wantErr: "no objects"},
		{name: "not YAML", in: "kind: [", wantErr: "document 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			objs, err := preview.ParseChange([]byte(tt.in))
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			g.Expect(kinds).To(Equal(tt.want))
		})
	}
}

func TestClusterNameOf(t *testing.T) {
	tests := []struct {
		name string
		objs []map[string]any
		want string
	}{
		{"cluster", []map[string]any{{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": map[string]any{"name": "a"}}}, "a"},
		{"md clusterName", []map[string]any{{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment", "metadata": map[string]any{"name": "x"}, "spec": map[string]any{"clusterName": "b"}}}, "b"},
		{"label", []map[string]any{{"apiVersion": "v1", "kind": "T", "metadata": map[string]any{"name": "x", "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "c"}}}}, "c"},
		{"none", []map[string]any{{"apiVersion": "v1", "kind": "T", "metadata": map[string]any{"name": "x"}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []*unstructured.Unstructured
			for _, o := range tt.objs {
				objs = append(objs, &unstructured.Unstructured{Object: o})
			}
			NewWithT(t).Expect(preview.ClusterNameOf(objs)).To(Equal(tt.want))
		})
	}
}
