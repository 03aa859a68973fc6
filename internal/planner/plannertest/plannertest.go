// Package plannertest provides realistic CanUpdate request objects (as CAPI v1.14
// builds them) and a re-implementation of how CAPI applies an extension's patches
// and compares the result, for tests of the planner and of the hook server.
//
// Imports: cluster-api API types, apimachinery, evanphx/json-patch/v5 (the library
// CAPI itself applies patches with). Test code only.
package plannertest

import (
	"encoding/json"
	"fmt"
	"reflect"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// Namespace and ClusterName of every fixture.
const (
	Namespace   = "fleet"
	ClusterName = "edge-1"
)

// MachineSet returns a worker MachineSet as CAPI's cleanupMachineSet sends it.
func MachineSet(name, version, infraTemplate, bootstrapTemplate string) *clusterv1.MachineSet {
	return &clusterv1.MachineSet{
		TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{
			clusterv1.ClusterNameLabel: ClusterName, clusterv1.MachineDeploymentNameLabel: "md-0",
		}},
		Spec: clusterv1.MachineSetSpec{
			ClusterName: ClusterName,
			Replicas:    ptr.To[int32](2),
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: "md-0"}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{clusterv1.MachineDeploymentNameLabel: "md-0"}},
				Spec: clusterv1.MachineSpec{
					ClusterName: ClusterName,
					Version:     version,
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: bootstrapTemplate,
					}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DevMachineTemplate", Name: infraTemplate,
					},
					Deletion: clusterv1.MachineDeletionSpec{NodeDrainTimeoutSeconds: ptr.To[int32](60)},
				},
			},
		},
	}
}

// Machine returns a control-plane Machine as KCP's cleanupMachine sends it.
func Machine(name, version string) *clusterv1.Machine {
	return &clusterv1.Machine{
		TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{
			clusterv1.ClusterNameLabel: ClusterName, clusterv1.MachineControlPlaneLabel: "",
		}},
		Spec: clusterv1.MachineSpec{
			ClusterName: ClusterName,
			Version:     version,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: name,
			}, DataSecretName: ptr.To(name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DevMachine", Name: name,
			},
			ProviderID:    "in-memory://" + name,
			FailureDomain: "fd-1",
			ReadinessGates: []clusterv1.MachineReadinessGate{
				{ConditionType: "APIServerPodHealthy"}, {ConditionType: "EtcdMemberHealthy"},
			},
		},
	}
}

// KubeadmConfigSpec returns a realistic spec: files (inline and from a Secret),
// users, NTP, kubelet args, control-plane component args, etcd settings, and the
// feature gate KCP derives for Kubernetes 1.31 to 1.35.
func KubeadmConfigSpec() bootstrapv1.KubeadmConfigSpec {
	return bootstrapv1.KubeadmConfigSpec{
		ClusterConfiguration: bootstrapv1.ClusterConfiguration{
			APIServer: bootstrapv1.APIServer{
				ExtraArgs: []bootstrapv1.Arg{{Name: "audit-log-maxage", Value: ptr.To("30")}},
				CertSANs:  []string{"edge-1.example.com"},
			},
			ControllerManager: bootstrapv1.ControllerManager{ExtraArgs: []bootstrapv1.Arg{{Name: "bind-address", Value: ptr.To("0.0.0.0")}}},
			Etcd: bootstrapv1.Etcd{Local: bootstrapv1.LocalEtcd{
				ImageTag:  "3.6.4-0",
				ExtraArgs: []bootstrapv1.Arg{{Name: "quota-backend-bytes", Value: ptr.To("8589934592")}},
			}},
			FeatureGates: map[string]bool{"ControlPlaneKubeletLocalMode": true},
		},
		JoinConfiguration: bootstrapv1.JoinConfiguration{
			NodeRegistration: bootstrapv1.NodeRegistrationOptions{
				KubeletExtraArgs: []bootstrapv1.Arg{{Name: "eviction-hard", Value: ptr.To("memory.available<500Mi")}},
			},
		},
		Files: []bootstrapv1.File{
			{Path: "/etc/motd", Content: "edge fleet\n", Permissions: "0644"},
			{Path: "/etc/kubernetes/audit-policy.yaml", Owner: "root:root", Permissions: "0600", ContentFrom: bootstrapv1.FileSource{
				Secret: bootstrapv1.SecretFileSource{Name: "audit-policy", Key: "policy.yaml"},
			}},
		},
		Users:               []bootstrapv1.User{{Name: "ops", Sudo: "ALL=(ALL) NOPASSWD:ALL", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA ops@example.com"}}},
		NTP:                 bootstrapv1.NTP{Servers: []string{"0.pool.ntp.org"}, Enabled: ptr.To(true)},
		PreKubeadmCommands:  []string{"systemctl restart containerd"},
		PostKubeadmCommands: []string{"echo done"},
	}
}

// KubeadmConfigTemplate wraps a spec in a KubeadmConfigTemplate as CAPI sends it.
func KubeadmConfigTemplate(name string, spec bootstrapv1.KubeadmConfigSpec) *bootstrapv1.KubeadmConfigTemplate {
	return &bootstrapv1.KubeadmConfigTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfigTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec:       bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{Spec: spec}},
	}
}

// KubeadmConfig wraps a spec in a KubeadmConfig as KCP sends it.
func KubeadmConfig(name string, spec bootstrapv1.KubeadmConfigSpec) *bootstrapv1.KubeadmConfig {
	return &bootstrapv1.KubeadmConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec:       spec,
	}
}

// DevMachineSpec returns the spec of a DevMachine with CAPI's in-memory backend, as
// in upstream's in-memory e2e templates, plus a docker customImage so that the
// image field can be exercised.
func DevMachineSpec(image string) map[string]any {
	prov := func(d string) map[string]any {
		return map[string]any{"provisioning": map[string]any{"startupDuration": d, "startupJitter": "0.2"}}
	}
	spec := map[string]any{"backend": map[string]any{"inMemory": map[string]any{
		"vm": prov("10s"), "node": prov("2s"), "apiServer": prov("2s"), "etcd": prov("2s"),
	}}}
	if image != "" {
		spec["backend"].(map[string]any)["docker"] = map[string]any{"customImage": image}
	}
	return spec
}

// DevMachineTemplate wraps a DevMachine spec in a DevMachineTemplate.
func DevMachineTemplate(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
		"kind":       "DevMachineTemplate",
		"spec":       map[string]any{"template": map[string]any{"spec": spec}},
	}}
	u.SetName(name)
	u.SetNamespace(Namespace)
	return u
}

// DevMachine wraps a DevMachine spec in a DevMachine.
func DevMachine(name string, spec map[string]any) *unstructured.Unstructured {
	spec = ToUnstructured(spec).Object
	spec["providerID"] = "in-memory://" + name
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
		"kind":       "DevMachine",
		"spec":       spec,
	}}
	u.SetName(name)
	u.SetNamespace(Namespace)
	u.SetLabels(map[string]string{clusterv1.ClusterNameLabel: ClusterName})
	return u
}

// ToUnstructured round-trips any object through JSON, as the hook server's caller
// does: the result holds exactly what travels on the wire.
func ToUnstructured(obj any) *unstructured.Unstructured {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(fmt.Sprintf("marshal fixture: %v", err))
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		panic(fmt.Sprintf("unmarshal fixture: %v", err))
	}
	return &unstructured.Unstructured{Object: m}
}

// Apply applies an RFC 6902 patch the way CAPI's ApplyPatchToObject does: to a copy
// of the whole object, then copying back only the part at base (spec or
// spec.template.spec). A nil patch returns the object unchanged.
func Apply(obj *unstructured.Unstructured, patch []byte, base []string) (*unstructured.Unstructured, error) {
	out := obj.DeepCopy()
	if patch == nil {
		return out, nil
	}
	decoded, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, fmt.Errorf("decode patch: %w", err)
	}
	raw, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, err
	}
	patchedRaw, err := decoded.Apply(raw)
	if err != nil {
		return nil, fmt.Errorf("apply patch: %w", err)
	}
	patched := map[string]any{}
	if err := json.Unmarshal(patchedRaw, &patched); err != nil {
		return nil, err
	}
	v, found, err := unstructured.NestedFieldNoCopy(patched, base...)
	if err != nil {
		return nil, err
	}
	if !found {
		unstructured.RemoveNestedField(out.Object, base...)
		return out, nil
	}
	if err := unstructured.SetNestedField(out.Object, v, base...); err != nil {
		return nil, err
	}
	return out, nil
}

// ignoredMachineFields mirrors CAPI's inplace.CleanupMachineSpecForDiff.
func ignoredMachineFields() [][]string {
	return [][]string{
		{"clusterName"}, {"bootstrap"}, {"infrastructureRef"}, {"providerID"}, {"minReadySeconds"},
		{"readinessGates"}, {"taints"}, {"deletion", "nodeDrainTimeoutSeconds"},
		{"deletion", "nodeVolumeDetachTimeoutSeconds"}, {"deletion", "nodeDeletionTimeoutSeconds"},
	}
}

// Compared returns the part of an object CAPI compares: the map at base, and for a
// Machine or MachineSet without the fields CAPI ignores. Typed decoding of Machines
// drops empty structs, so empty maps left behind are pruned as well.
func Compared(obj *unstructured.Unstructured, base []string, machine bool) map[string]any {
	v, _, _ := unstructured.NestedFieldCopy(obj.Object, base...)
	m, _ := v.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	if machine {
		for _, f := range ignoredMachineFields() {
			unstructured.RemoveNestedField(m, f...)
		}
		if d, ok := m["deletion"].(map[string]any); ok && len(d) == 0 {
			delete(m, "deletion")
		}
	}
	return m
}

// Equal compares two JSON values.
func Equal(a, b any) bool { return reflect.DeepEqual(a, b) }
