package planner_test

import (
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/planner"
	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

const (
	imageOld    = "registry.example.com/edge/node-os:1.35"
	imageNew    = "registry.example.com/edge/node-os:1.36"
	imageNoDig  = "registry.example.com/edge/node-os:nodigest"
	imageUnmapd = "registry.example.com/edge/node-os:unknown"
	digest      = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func testPolicy(t *testing.T, acceptBootstrapOnly bool) *policy.Policy {
	t.Helper()
	p, err := policy.New(policy.Config{
		AcceptBootstrapOnlyFields: acceptBootstrapOnly,
		Backends:                  policy.BackendConfig{Default: "bootc"},
		Artifacts: []policy.ArtifactConfig{
			{Image: imageNew, Ref: "quay.io/edge/node-os:1.36", Digest: digest},
			{Image: imageNoDig, Ref: "quay.io/edge/node-os:nodigest"},
		},
	})
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return p
}

// msObjects are the typed objects of one side of a CanUpdateMachineSet request.
type msObjects struct {
	ms    *clusterv1.MachineSet
	kct   *bootstrapv1.KubeadmConfigTemplate
	infra *unstructured.Unstructured
}

func baseMS(name, version string) msObjects {
	return msObjects{
		ms:    pt.MachineSet(name, version, name+"-infra", name+"-bootstrap"),
		kct:   pt.KubeadmConfigTemplate(name+"-bootstrap", pt.KubeadmConfigSpec()),
		infra: pt.DevMachineTemplate(name+"-infra", pt.DevMachineSpec(imageOld)),
	}
}

func (o msObjects) objects() planner.Objects {
	out := planner.Objects{Machine: pt.ToUnstructured(o.ms), Infrastructure: pt.ToUnstructured(o.infra.Object)}
	if o.kct != nil {
		out.Bootstrap = pt.ToUnstructured(o.kct)
	}
	return out
}

var tmplBase = []string{"spec", "template", "spec"}

func infraSpec(o msObjects) map[string]any {
	return o.infra.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
}

// want is the expected verdict for one field: covered or not, and a word of its reason.
type want struct {
	covered bool
	reason  string
}

func TestCanUpdateMachineSet(t *testing.T) {
	tests := []struct {
		name                string
		acceptBootstrapOnly bool
		settings            map[string]string
		mutate              func(cur, des *msObjects)
		want                map[string]want // field -> verdict; every decision must be listed
	}{
		{
			name:   "nothing changes",
			mutate: func(_, _ *msObjects) {},
			want:   map[string]want{},
		},
		{
			name: "fields CAPI ignores are not decisions",
			mutate: func(_, des *msObjects) {
				des.ms.Spec.Replicas = ptr.To[int32](5)
				des.ms.Spec.Template.Spec.Deletion.NodeDrainTimeoutSeconds = ptr.To[int32](300)
				des.ms.Spec.Template.Spec.MinReadySeconds = ptr.To[int32](10)
			},
			want: map[string]want{},
		},
		{
			name:   "patch release",
			mutate: func(_, des *msObjects) { des.ms.Spec.Template.Spec.Version = "v1.35.3" },
			want:   map[string]want{"spec.template.spec.version": {true, "patch upgrade"}},
		},
		{
			name: "one minor up with a new patch release, the feature gate KCP drops at 1.36, and a files change",
			mutate: func(_, des *msObjects) {
				des.ms.Spec.Template.Spec.Version = "v1.36.1"
				spec := &des.kct.Spec.Template.Spec
				spec.ClusterConfiguration.FeatureGates = nil
				spec.Files = append(spec.Files, bootstrapv1.File{Path: "/etc/edge/site.conf", Content: "site=42\n"})
			},
			want: map[string]want{
				"spec.template.spec.version": {true, "one minor up"},
				"spec.template.spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode": {true, "kubeadm upgrade applies them"},
				"spec.template.spec.files": {true, "written on the node"},
			},
		},
		{
			name: "Cluster API's previous defaults, which its topology dry-runs carry, are no change",
			mutate: func(_, des *msObjects) {
				spec := &des.kct.Spec.Template.Spec
				spec.Format = bootstrapv1.CloudConfig
				spec.InitConfiguration.NodeRegistration.ImagePullPolicy = corev1.PullIfNotPresent
				spec.JoinConfiguration.NodeRegistration.ImagePullPolicy = corev1.PullIfNotPresent
			},
			want: map[string]want{
				"spec.template.spec.format": {true, "previous default"},
				"spec.template.spec.initConfiguration.nodeRegistration.imagePullPolicy": {true, "previous default"},
				"spec.template.spec.joinConfiguration.nodeRegistration.imagePullPolicy": {true, "previous default"},
			},
		},
		{
			name: "a format or pull policy other than the previous default is a change",
			mutate: func(_, des *msObjects) {
				spec := &des.kct.Spec.Template.Spec
				spec.Format = bootstrapv1.Ignition
				spec.JoinConfiguration.NodeRegistration.ImagePullPolicy = corev1.PullAlways
			},
			want: map[string]want{
				"spec.template.spec.format": {false, "acts only while a machine bootstraps"},
				"spec.template.spec.joinConfiguration.nodeRegistration.imagePullPolicy": {false, "cannot be applied"},
			},
		},
		{
			name:   "two minors up",
			mutate: func(_, des *msObjects) { des.ms.Spec.Template.Spec.Version = "v1.37.0" },
			want:   map[string]want{"spec.template.spec.version": {false, "skips a minor version"}},
		},
		{
			name:   "downgrade",
			mutate: func(_, des *msObjects) { des.ms.Spec.Template.Spec.Version = "v1.35.1" },
			want:   map[string]want{"spec.template.spec.version": {false, "downgrade"}},
		},
		{
			name:   "minor downgrade",
			mutate: func(_, des *msObjects) { des.ms.Spec.Template.Spec.Version = "v1.34.9" },
			want:   map[string]want{"spec.template.spec.version": {false, "downgrade"}},
		},
		{
			name:   "major change",
			mutate: func(_, des *msObjects) { des.ms.Spec.Template.Spec.Version = "v2.0.0" },
			want:   map[string]want{"spec.template.spec.version": {false, "major version"}},
		},
		{
			name:   "unparsable version",
			mutate: func(_, des *msObjects) { des.ms.Spec.Template.Spec.Version = "1.36.0" },
			want:   map[string]want{"spec.template.spec.version": {false, `desired version "1.36.0" is not a version`}},
		},
		{
			name:   "build metadata only",
			mutate: func(_, des *msObjects) { des.ms.Spec.Template.Spec.Version = "v1.35.2+k0s" },
			want:   map[string]want{"spec.template.spec.version": {false, "build metadata"}},
		},
		{
			name: "feature gates without a version change",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.ClusterConfiguration.FeatureGates = map[string]bool{"ControlPlaneKubeletLocalMode": true, "NodeLocalCRISocket": true}
			},
			want: map[string]want{"spec.template.spec.clusterConfiguration.featureGates.NodeLocalCRISocket": {false, "only together with a covered Kubernetes version upgrade"}},
		},
		{
			name: "feature gates with a refused version change",
			mutate: func(_, des *msObjects) {
				des.ms.Spec.Template.Spec.Version = "v1.37.0"
				des.kct.Spec.Template.Spec.ClusterConfiguration.FeatureGates = nil
			},
			want: map[string]want{
				"spec.template.spec.version": {false, "skips a minor"},
				"spec.template.spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode": {false, "only together with a covered"},
			},
		},
		{
			name: "every kubeadm field applied on the node",
			mutate: func(_, des *msObjects) {
				s := &des.kct.Spec.Template.Spec
				s.Files[1].ContentFrom.Secret.Key = "policy-v2.yaml"
				s.Users = append(s.Users, bootstrapv1.User{Name: "audit"})
				s.NTP.Servers = []string{"ntp.example.com"}
				s.JoinConfiguration.NodeRegistration.KubeletExtraArgs = append(s.JoinConfiguration.NodeRegistration.KubeletExtraArgs, bootstrapv1.Arg{Name: "max-pods", Value: ptr.To("200")})
				s.InitConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "max-pods", Value: ptr.To("200")}}
				s.ClusterConfiguration.APIServer.ExtraArgs[0].Value = ptr.To("60")
				s.ClusterConfiguration.APIServer.ExtraVolumes = []bootstrapv1.HostPathMount{{Name: "audit", HostPath: "/var/log/audit", MountPath: "/var/log/audit"}}
				s.ClusterConfiguration.APIServer.CertSANs = append(s.ClusterConfiguration.APIServer.CertSANs, "10.0.0.10")
				s.ClusterConfiguration.ControllerManager.ExtraArgs = nil
				s.ClusterConfiguration.ControllerManager.ExtraVolumes = []bootstrapv1.HostPathMount{{Name: "cm", HostPath: "/etc/cm", MountPath: "/etc/cm"}}
				s.ClusterConfiguration.Scheduler.ExtraArgs = []bootstrapv1.Arg{{Name: "v", Value: ptr.To("2")}}
				s.ClusterConfiguration.Scheduler.ExtraVolumes = []bootstrapv1.HostPathMount{{Name: "s", HostPath: "/etc/s", MountPath: "/etc/s"}}
				s.ClusterConfiguration.Etcd.Local.ImageTag = "3.6.5-0"
				s.ClusterConfiguration.Etcd.Local.ExtraArgs = append(s.ClusterConfiguration.Etcd.Local.ExtraArgs, bootstrapv1.Arg{Name: "snapshot-count", Value: ptr.To("10000")})
			},
			want: map[string]want{
				"spec.template.spec.files":       {true, "from Secrets"},
				"spec.template.spec.users":       {true, "users"},
				"spec.template.spec.ntp.servers": {true, "NTP"},
				"spec.template.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs": {true, "kubelet"},
				"spec.template.spec.initConfiguration.nodeRegistration.kubeletExtraArgs": {true, "kubelet"},
				"spec.template.spec.clusterConfiguration.apiServer.extraArgs":            {true, "static pod"},
				"spec.template.spec.clusterConfiguration.apiServer.extraVolumes":         {true, "static pod"},
				"spec.template.spec.clusterConfiguration.apiServer.certSANs":             {false, "--certificate-renewal=false"},
				"spec.template.spec.clusterConfiguration.controllerManager.extraArgs":    {true, "static pod"},
				"spec.template.spec.clusterConfiguration.controllerManager.extraVolumes": {true, "static pod"},
				"spec.template.spec.clusterConfiguration.scheduler.extraArgs":            {true, "static pod"},
				"spec.template.spec.clusterConfiguration.scheduler.extraVolumes":         {true, "static pod"},
				"spec.template.spec.clusterConfiguration.etcd.local.imageTag":            {true, "etcd snapshot"},
				"spec.template.spec.clusterConfiguration.etcd.local.extraArgs":           {true, "etcd"},
			},
		},
		{
			name: "ntp removed entirely",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.NTP = bootstrapv1.NTP{}
			},
			want: map[string]want{
				"spec.template.spec.ntp.servers": {false, "does not turn the host's NTP client off"},
				"spec.template.spec.ntp.enabled": {false, "does not turn the host's NTP client off"},
			},
		},
		{
			name: "bootstrap-only fields refused by default",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.PreKubeadmCommands = []string{"echo new"}
				des.kct.Spec.Template.Spec.Format = bootstrapv1.Ignition
			},
			want: map[string]want{
				"spec.template.spec.preKubeadmCommands": {false, "set acceptBootstrapOnlyFields"},
				"spec.template.spec.format":             {false, "acts only while a machine bootstraps"},
			},
		},
		{
			name:                "bootstrap-only fields accepted as no-ops by policy",
			acceptBootstrapOnly: true,
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.PreKubeadmCommands = nil
				des.kct.Spec.Template.Spec.PostKubeadmCommands = []string{"echo a", "echo b"}
				des.kct.Spec.Template.Spec.Verbosity = ptr.To[int32](5)
			},
			want: map[string]want{
				"spec.template.spec.preKubeadmCommands":  {true, "no-op"},
				"spec.template.spec.postKubeadmCommands": {true, "no-op"},
				"spec.template.spec.verbosity":           {true, "no-op"},
			},
		},
		{
			name: "kubeadm fields we cannot apply",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.ClusterConfiguration.ImageRepository = "registry.example.com/k8s"
				des.kct.Spec.Template.Spec.Mounts = []bootstrapv1.MountPoints{{"/dev/sdb", "/data"}}
				des.kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration.Taints = &[]corev1.Taint{{Key: "dedicated", Value: "edge", Effect: corev1.TaintEffectNoSchedule}}
			},
			want: map[string]want{
				"spec.template.spec.clusterConfiguration.imageRepository":      {false, "KubeadmConfigTemplate field spec.template.spec.clusterConfiguration.imageRepository cannot be applied"},
				"spec.template.spec.mounts":                                    {false, "spec.template.spec.mounts cannot be applied"},
				"spec.template.spec.joinConfiguration.nodeRegistration.taints": {false, "cannot be applied"},
			},
		},
		{
			name:   "mapped OS image with a digest",
			mutate: func(_, des *msObjects) { setImage(infraSpec(*des), imageNew) },
			want: map[string]want{"spec.template.spec.backend.docker.customImage": {true,
				"switches to OS artifact quay.io/edge/node-os:1.36@" + digest + " with backend bootc"}},
		},
		{
			name:   "unmapped OS image",
			mutate: func(_, des *msObjects) { setImage(infraSpec(*des), imageUnmapd) },
			want:   map[string]want{"spec.template.spec.backend.docker.customImage": {false, "is not mapped to a node-side OS artifact"}},
		},
		{
			name:   "mapped OS image without a digest",
			mutate: func(_, des *msObjects) { setImage(infraSpec(*des), imageNoDig) },
			want:   map[string]want{"spec.template.spec.backend.docker.customImage": {false, "has no digest"}},
		},
		{
			name: "OS image removed",
			mutate: func(_, des *msObjects) {
				delete(infraSpec(*des)["backend"].(map[string]any), "docker")
			},
			want: map[string]want{"spec.template.spec.backend.docker.customImage": {false, "is removed"}},
		},
		{
			name: "in-memory backend timings are harmless",
			mutate: func(_, des *msObjects) {
				inMem := infraSpec(*des)["backend"].(map[string]any)["inMemory"].(map[string]any)
				inMem["vm"].(map[string]any)["provisioning"].(map[string]any)["startupDuration"] = "30s"
				delete(inMem, "etcd")
			},
			want: map[string]want{
				"spec.template.spec.backend.inMemory.vm.provisioning.startupDuration":   {true, "does not affect a running node"},
				"spec.template.spec.backend.inMemory.etcd.provisioning.startupDuration": {true, "does not affect"},
				"spec.template.spec.backend.inMemory.etcd.provisioning.startupJitter":   {true, "does not affect"},
			},
		},
		{
			name: "other infrastructure fields are refused",
			mutate: func(_, des *msObjects) {
				infraSpec(*des)["backend"].(map[string]any)["docker"].(map[string]any)["extraMounts"] = []any{map[string]any{"containerPath": "/data", "hostPath": "/mnt"}}
			},
			want: map[string]want{"spec.template.spec.backend.docker.extraMounts": {false, "DevMachineTemplate field spec.template.spec.backend.docker.extraMounts cannot be changed on a running node"}},
		},
		{
			name: "unknown infrastructure kind with a change",
			mutate: func(cur, des *msObjects) {
				cur.infra.SetKind("FooMachineTemplate")
				des.infra.SetKind("FooMachineTemplate")
				setImage(infraSpec(*des), imageNew)
			},
			want: map[string]want{"spec.template.spec.backend.docker.customImage": {false, "infrastructure kind FooMachineTemplate (group infrastructure.cluster.x-k8s.io) is not in the policy's infrastructure table"}},
		},
		{
			name: "unknown infrastructure kind without a change does not block a version upgrade",
			mutate: func(cur, des *msObjects) {
				cur.infra.SetKind("FooMachineTemplate")
				des.infra.SetKind("FooMachineTemplate")
				des.ms.Spec.Template.Spec.Version = "v1.36.0"
				des.kct.Spec.Template.Spec.ClusterConfiguration.FeatureGates = nil
			},
			want: map[string]want{
				"spec.template.spec.version": {true, "one minor up"},
				"spec.template.spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode": {true, "feature gates"},
			},
		},
		{
			name: "infrastructure kind changes",
			mutate: func(_, des *msObjects) {
				des.infra.SetKind("DockerMachineTemplate")
			},
			want: map[string]want{"kind": {false, "cannot change infrastructure in place"}},
		},
		{
			name:   "failure domain",
			mutate: func(_, des *msObjects) { des.ms.Spec.Template.Spec.FailureDomain = "fd-2" },
			want:   map[string]want{"spec.template.spec.failureDomain": {false, "failure domain"}},
		},
		{
			name:   "bootstrap config removed",
			mutate: func(_, des *msObjects) { des.kct = nil },
			want:   map[string]want{"bootstrapConfigTemplate": {false, "re-bootstrapped"}},
		},
		{
			name: "covered and refused together: the covered part is still patched",
			mutate: func(_, des *msObjects) {
				des.ms.Spec.Template.Spec.Version = "v1.37.0"
				des.kct.Spec.Template.Spec.Files[0].Content = "new motd\n"
				setImage(infraSpec(*des), imageUnmapd)
			},
			want: map[string]want{
				"spec.template.spec.version":                    {false, "skips a minor"},
				"spec.template.spec.files":                      {true, "files"},
				"spec.template.spec.backend.docker.customImage": {false, "not mapped"},
			},
		},
		// What the planner covers is what the node gets (issue 12 section 8), and
		// values the agent refuses are not covered (section 7).
		{
			name: "kubelet arg removed",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = nil
			},
			want: map[string]want{"spec.template.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs": {false, "kubelet args eviction-hard are removed"}},
		},
		{
			name: "kubelet arg value changed",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs[0].Value = ptr.To("memory.available<1Gi")
			},
			want: map[string]want{"spec.template.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs": {true, "kubelet"}},
		},
		{
			name: "kubelet arg injecting a line into kubeadm-flags.env",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs[0].Value = ptr.To("x\"\nEVIL=\"1")
			},
			want: map[string]want{"spec.template.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs": {false, "kubeadm-flags.env"}},
		},
		{
			name: "kubelet arg with a space",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs[0].Value = ptr.To("a --anonymous-auth=true")
			},
			want: map[string]want{"spec.template.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs": {false, "white space"}},
		},
		{
			name:   "file removed",
			mutate: func(_, des *msObjects) { des.kct.Spec.Template.Spec.Files = des.kct.Spec.Template.Spec.Files[:1] },
			want:   map[string]want{"spec.template.spec.files": {false, "files /etc/kubernetes/audit-policy.yaml are removed"}},
		},
		{
			name: "file added",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.Files = append(des.kct.Spec.Template.Spec.Files, bootstrapv1.File{Path: "/etc/new.conf", Content: "x"})
			},
			want: map[string]want{"spec.template.spec.files": {true, "files"}},
		},
		{
			name: "append file added",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.Files = append(des.kct.Spec.Template.Spec.Files, bootstrapv1.File{Path: "/etc/hosts", Content: "10.0.0.1 a\n", Append: ptr.To(true)})
			},
			want: map[string]want{"spec.template.spec.files": {false, "file /etc/hosts has append: true"}},
		},
		{
			name: "unchanged append file beside a changed file",
			mutate: func(cur, des *msObjects) {
				for _, o := range []*msObjects{cur, des} {
					o.kct.Spec.Template.Spec.Files = append(o.kct.Spec.Template.Spec.Files, bootstrapv1.File{Path: "/etc/hosts", Content: "10.0.0.1 a\n", Append: ptr.To(true)})
				}
				des.kct.Spec.Template.Spec.Files[0].Content = "new motd\n"
			},
			want: map[string]want{"spec.template.spec.files": {true, "files"}},
		},
		{
			name:   "setuid file",
			mutate: func(_, des *msObjects) { des.kct.Spec.Template.Spec.Files[0].Permissions = "4755" },
			want:   map[string]want{"spec.template.spec.files": {false, "setuid"}},
		},
		{
			name:   "user removed",
			mutate: func(_, des *msObjects) { des.kct.Spec.Template.Spec.Users = nil },
			want:   map[string]want{"spec.template.spec.users": {false, "users ops are removed"}},
		},
		{
			name: "sudo user with a dot in the name",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.Users = append(des.kct.Spec.Template.Spec.Users, bootstrapv1.User{Name: "jane.doe", Sudo: "ALL=(ALL) ALL"})
			},
			want: map[string]want{"spec.template.spec.users": {false, "sudo ignores files in /etc/sudoers.d"}},
		},
		{
			name: "sudo rule with a line break",
			mutate: func(_, des *msObjects) {
				des.kct.Spec.Template.Spec.Users[0].Sudo = "ALL=(ALL) ALL\nALL ALL=(ALL) NOPASSWD:ALL"
			},
			want: map[string]want{"spec.template.spec.users": {false, "line break"}},
		},
		{
			name:   "NTP disabled",
			mutate: func(_, des *msObjects) { des.kct.Spec.Template.Spec.NTP.Enabled = ptr.To(false) },
			want:   map[string]want{"spec.template.spec.ntp.enabled": {false, "does not turn the host's NTP client off"}},
		},
		{
			name:   "NTP server injecting a line",
			mutate: func(_, des *msObjects) { des.kct.Spec.Template.Spec.NTP.Servers = []string{"a.example.com\nallow all"} },
			want:   map[string]want{"spec.template.spec.ntp.servers": {false, "not a host name"}},
		},
		{
			name: "an unchanged unsafe kubelet arg makes the node refuse any plan",
			mutate: func(cur, des *msObjects) {
				for _, o := range []*msObjects{cur, des} {
					o.kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs[0].Value = ptr.To("a b")
				}
				des.kct.Spec.Template.Spec.Files[0].Content = "new motd\n"
			},
			want: map[string]want{
				"spec.template.spec.files": {true, "files"},
				"spec.template.spec.joinConfiguration.nodeRegistration.kubeletExtraArgs": {false, "does not change, but the node plan carries it"},
			},
		},
		{
			name:     "disabled by the ExtensionConfig",
			settings: map[string]string{"disableInPlaceUpdates": "true"},
			mutate: func(_, des *msObjects) {
				des.ms.Spec.Template.Spec.Version = "v1.35.3"
				des.kct.Spec.Template.Spec.Files[0].Content = "new motd\n"
			},
			want: map[string]want{
				"spec.template.spec.version": {false, "disabled by the ExtensionConfig setting disableInPlaceUpdates=true"},
				"spec.template.spec.files":   {false, "disabled"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cur, des := baseMS("md-0-abc", "v1.35.2"), baseMS("md-0-def", "v1.35.2")
			tt.mutate(&cur, &des)
			p, err := planner.New(testPolicy(t, tt.acceptBootstrapOnly))
			g.Expect(err).NotTo(HaveOccurred())

			curObjs, desObjs := cur.objects(), des.objects()
			res, err := p.CanUpdateMachineSet(tt.settings, curObjs, desObjs)
			g.Expect(err).NotTo(HaveOccurred())

			got := map[string]planner.Decision{}
			for _, d := range res.Decisions {
				g.Expect(got).NotTo(HaveKey(d.Field), "one decision per field")
				got[d.Field] = d
			}
			g.Expect(got).To(HaveLen(len(tt.want)), "decisions: %+v", res.Decisions)
			for field, w := range tt.want {
				g.Expect(got).To(HaveKey(field))
				g.Expect(got[field].Covered).To(Equal(w.covered), "%s: %s", field, got[field].Reason)
				g.Expect(got[field].Reason).To(ContainSubstring(w.reason), field)
			}
			if tt.settings["disableInPlaceUpdates"] == "true" {
				g.Expect(res.MachinePatch).To(BeNil())
				g.Expect(res.BootstrapPatch).To(BeNil())
				g.Expect(res.InfrastructurePatch).To(BeNil())
			}
			verifyPatches(g, res, curObjs, desObjs, tmplBase, tmplBase)
		})
	}
}

func setImage(spec map[string]any, image string) {
	backend := spec["backend"].(map[string]any)
	d, ok := backend["docker"].(map[string]any)
	if !ok {
		d = map[string]any{}
		backend["docker"] = d
	}
	d["customImage"] = image
}

// verifyPatches applies the patches the way CAPI does and checks that they change
// exactly the covered fields to their desired value, only under the compared part,
// and that a fully covered answer leaves no difference at all.
func verifyPatches(g Gomega, res *planner.Result, cur, des planner.Objects, machineBase, objectBase []string) {
	type pair struct {
		name        string
		patch       []byte
		cur, des    *unstructured.Unstructured
		base        []string
		machineLike bool
	}
	pairs := []pair{
		{"machine", res.MachinePatch, cur.Machine, des.Machine, machineBase, true},
		{"infrastructure", res.InfrastructurePatch, cur.Infrastructure, des.Infrastructure, objectBase, false},
	}
	if cur.Bootstrap != nil && des.Bootstrap != nil {
		pairs = append(pairs, pair{"bootstrap", res.BootstrapPatch, cur.Bootstrap, des.Bootstrap, objectBase, false})
	} else {
		g.Expect(res.BootstrapPatch).To(BeNil())
	}
	prefix := func(base []string) string { return "/" + strings.Join(base, "/") + "/" }
	for _, p := range pairs {
		if p.patch != nil {
			var ops []map[string]any
			g.Expect(json.Unmarshal(p.patch, &ops)).To(Succeed())
			g.Expect(ops).NotTo(BeEmpty())
			for _, op := range ops {
				g.Expect(op["path"]).To(HavePrefix(prefix(p.base)), "%s patch must use whole-object paths under the compared part", p.name)
			}
		}
		patched, err := pt.Apply(p.cur, p.patch, p.base)
		g.Expect(err).NotTo(HaveOccurred(), p.name)
		gotSpec := pt.Compared(patched, p.base, p.machineLike)
		curSpec := pt.Compared(p.cur, p.base, p.machineLike)
		desSpec := pt.Compared(p.des, p.base, p.machineLike)
		for _, d := range res.Decisions {
			field, ok := strings.CutPrefix(d.Field, strings.Join(p.base, ".")+".")
			if !ok || !belongsTo(d.Object, p.name) {
				continue
			}
			path := strings.Split(field, ".")
			gotV, gotOK, _ := unstructured.NestedFieldNoCopy(gotSpec, path...)
			if d.Covered {
				desV, desOK, _ := unstructured.NestedFieldNoCopy(desSpec, path...)
				g.Expect(gotOK).To(Equal(desOK), "%s: covered field %s presence", p.name, d.Field)
				g.Expect(pt.Equal(gotV, desV)).To(BeTrue(), "%s: covered field %s = %v, want %v", p.name, d.Field, gotV, desV)
			} else {
				curV, curOK, _ := unstructured.NestedFieldNoCopy(curSpec, path...)
				g.Expect(gotOK).To(Equal(curOK), "%s: refused field %s presence", p.name, d.Field)
				g.Expect(pt.Equal(gotV, curV)).To(BeTrue(), "%s: refused field %s was patched", p.name, d.Field)
			}
		}
		if res.FullyCovered() {
			g.Expect(gotSpec).To(Equal(desSpec), "%s: a fully covered answer must leave no difference", p.name)
		}
	}
}

func belongsTo(kind, part string) bool {
	switch part {
	case "machine":
		return kind == "Machine" || kind == "MachineSet"
	case "bootstrap":
		return strings.HasPrefix(kind, "KubeadmConfig")
	default:
		return !strings.HasPrefix(kind, "KubeadmConfig") && kind != "Machine" && kind != "MachineSet"
	}
}
