// Package previewtest builds a realistic Cluster API cluster as objects — a Cluster
// with a KubeadmControlPlane, a MachineDeployment with its MachineSet, Machines,
// KubeadmConfigs made by KCP's own desired-state code, DevMachines and templates
// (unstructured) — for the preview package's pure tests and for `capi-inplace plan`'s
// envtest test, which creates the same objects in a real API server.
//
// Imports: Cluster API API types and KCP's desired-state package, apimachinery. Test
// support only.
package previewtest

import (
	"cmp"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/desiredstate"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InfraGroup is the API group of the Dev provider's kinds.
const InfraGroup = "infrastructure.cluster.x-k8s.io"

// Options shape the cluster.
type Options struct {
	Namespace string
	Cluster   string
	// Version is the Kubernetes version of the KCP, the MachineDeployment and every
	// Machine.
	Version string
	// CPReplicas control-plane Machines (KCP replicas); Workers worker Machines.
	CPReplicas int32
	Workers    int
	// KCPMaxSurge is KCP's rollout maxSurge.
	KCPMaxSurge int32
	// MDMaxUnavailable is the MachineDeployment's rollout maxUnavailable.
	MDMaxUnavailable int32
	// WorkerImage is the workers' DevMachine docker customImage (the OS image field
	// of the DevMachine kind).
	WorkerImage string
	// CPImage, when set, makes the control-plane DevMachines docker ones with this
	// customImage (in-memory ones otherwise).
	CPImage string
	// Topology makes the Cluster a ClusterClass cluster at Version, and the
	// MachineDeployment topology-owned.
	Topology bool
	// ClusterAnnotations are set on the Cluster; KCPAnnotations on the
	// KubeadmControlPlane.
	ClusterAnnotations map[string]string
	KCPAnnotations     map[string]string
	// InitKubeletArg, when set, is the init configuration's eviction-hard kubelet
	// argument, so that KCP's init and join configurations differ.
	InitKubeletArg string
}

// Default returns the cluster of the brief: 3 control-plane Machines (KCP maxSurge
// 0), 2 workers (MachineDeployment maxUnavailable 1), ClusterClass, v1.35.0.
func Default() Options {
	return Options{
		Namespace: "fleet", Cluster: "demo", Version: "v1.35.0",
		CPReplicas: 3, Workers: 2, KCPMaxSurge: 0, MDMaxUnavailable: 1,
		WorkerImage: "registry.example/node-os:1.0", Topology: true,
	}
}

// Names of the fixture's objects.
func (o Options) KCPName() string            { return o.Cluster + "-cp" }
func (o Options) CPTemplate() string         { return o.Cluster + "-cp-v1" }
func (o Options) MDName() string             { return o.Cluster + "-md-0" }
func (o Options) MSName() string             { return o.Cluster + "-md-0-v1" }
func (o Options) WorkerTemplate() string     { return o.Cluster + "-md-0-v1" }
func (o Options) CPMachine(i int) string     { return fmt.Sprintf("%s-cp-%d", o.Cluster, i) }
func (o Options) WorkerMachine(i int) string { return fmt.Sprintf("%s-md-0-v1-%d", o.Cluster, i) }

func uid(kind, name string) types.UID { return types.UID(fmt.Sprintf("uid-%s-%s", kind, name)) }

// Objects are the cluster's objects, owners first. Typed objects have their TypeMeta
// set. Machine status (nodeRef) is set; a caller creating them in an API server must
// write it through the status subresource.
func (o Options) Objects() ([]client.Object, error) {
	var out []client.Object
	labels := func() map[string]string { return map[string]string{clusterv1.ClusterNameLabel: o.Cluster} }

	cluster := &clusterv1.Cluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster"},
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Cluster, UID: uid("Cluster", o.Cluster), Annotations: o.ClusterAnnotations},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: o.KCPName()},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: "DevCluster", Name: o.Cluster},
		},
	}
	if o.Topology {
		cluster.Spec.Topology = clusterv1.Topology{
			ClassRef:     clusterv1.ClusterClassRef{Name: "in-place"},
			Version:      o.Version,
			ControlPlane: clusterv1.ControlPlaneTopology{Replicas: ptr.To(o.CPReplicas)},
			Workers: clusterv1.WorkersTopology{MachineDeployments: []clusterv1.MachineDeploymentTopology{{
				Class: "default-worker", Name: "md-0", Replicas: ptr.To(int32(o.Workers)),
			}}},
		}
	}
	out = append(out, cluster)

	kcp := &controlplanev1.KubeadmControlPlane{
		TypeMeta:   metav1.TypeMeta{APIVersion: controlplanev1.GroupVersion.String(), Kind: "KubeadmControlPlane"},
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.KCPName(), UID: uid("KubeadmControlPlane", o.KCPName()), Labels: labels(), Annotations: o.KCPAnnotations},
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Replicas: ptr.To(o.CPReplicas),
			Version:  o.Version,
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: "DevMachineTemplate", Name: o.CPTemplate()},
			}},
			KubeadmConfigSpec: bootstrapv1.KubeadmConfigSpec{
				ClusterConfiguration: bootstrapv1.ClusterConfiguration{
					APIServer: bootstrapv1.APIServer{CertSANs: []string{"localhost", "127.0.0.1"}},
				},
				InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
					KubeletExtraArgs: []bootstrapv1.Arg{{Name: "eviction-hard", Value: ptr.To(cmp.Or(o.InitKubeletArg, "nodefs.available<0%"))}},
				}},
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
					KubeletExtraArgs: []bootstrapv1.Arg{{Name: "eviction-hard", Value: ptr.To("nodefs.available<0%")}},
				}},
				Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "control plane\n"}},
			},
			Rollout: controlplanev1.KubeadmControlPlaneRolloutSpec{Strategy: controlplanev1.KubeadmControlPlaneRolloutStrategy{
				Type:          controlplanev1.RollingUpdateStrategyType,
				RollingUpdate: controlplanev1.KubeadmControlPlaneRolloutStrategyRollingUpdate{MaxSurge: ptr.To(intstr.FromInt32(o.KCPMaxSurge))},
			}},
		},
	}
	out = append(out, kcp)
	cpBackend := inMemoryBackend()
	if o.CPImage != "" {
		cpBackend = dockerBackend(o.CPImage)
	}
	out = append(out, devMachineTemplate(o, o.CPTemplate(), cpBackend))
	for i := range int(o.CPReplicas) {
		name := o.CPMachine(i)
		m := machine(o, name, kcp.Name, "KubeadmControlPlane", controlplanev1.GroupVersion.String(), "KubeadmConfig", "DevMachine")
		m.Labels[clusterv1.MachineControlPlaneLabel] = ""
		out = append(out, m)
		// The first Machine ran kubeadm init, the others joined: KCP computes both.
		kc, err := desiredstate.ComputeDesiredKubeadmConfig(kcp, cluster, i > 0, name, nil)
		if err != nil {
			return nil, fmt.Errorf("compute KubeadmConfig %s: %w", name, err)
		}
		kc.TypeMeta = metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"}
		kc.UID = uid("KubeadmConfig", name)
		kc.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: name, UID: uid("Machine", name)}}
		// CABPK adds the endpoint; KCP ignores it when it compares.
		kc.Spec.ClusterConfiguration.ControlPlaneEndpoint = "10.0.0.1:6443"
		out = append(out, kc)
		out = append(out, devMachine(o, name, o.CPTemplate(), cpBackend))
	}

	md := &clusterv1.MachineDeployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.MDName(), UID: uid("MachineDeployment", o.MDName()), Labels: labels()},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: o.Cluster,
			Replicas:    ptr.To(int32(o.Workers)),
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: o.MDName()}},
			Template:    workerTemplate(o),
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
					MaxUnavailable: ptr.To(intstr.FromInt32(o.MDMaxUnavailable)), MaxSurge: ptr.To(intstr.FromInt32(0)),
				},
			}},
		},
	}
	if o.MDMaxUnavailable == 0 {
		md.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(1))
	}
	if o.Topology {
		md.Labels["topology.cluster.x-k8s.io/owned"] = ""
	}
	out = append(out, md)
	out = append(out, &bootstrapv1.KubeadmConfigTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfigTemplate"},
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.WorkerTemplate(), Labels: labels()},
		Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{Spec: bootstrapv1.KubeadmConfigSpec{
			JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
				KubeletExtraArgs: []bootstrapv1.Arg{{Name: "eviction-hard", Value: ptr.To("nodefs.available<0%")}},
			}},
			Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "worker\n"}},
		}}},
	})
	out = append(out, devMachineTemplate(o, o.WorkerTemplate(), dockerBackend(o.WorkerImage)))

	ms := &clusterv1.MachineSet{
		TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.MSName(), UID: uid("MachineSet", o.MSName()),
			Labels:          map[string]string{clusterv1.ClusterNameLabel: o.Cluster, clusterv1.MachineDeploymentNameLabel: o.MDName()},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(md, clusterv1.GroupVersion.WithKind("MachineDeployment"))},
		},
		Spec: clusterv1.MachineSetSpec{
			ClusterName: o.Cluster,
			Replicas:    ptr.To(int32(o.Workers)),
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: o.MDName()}},
			Template:    workerTemplate(o),
		},
	}
	out = append(out, ms)
	for i := range o.Workers {
		name := o.WorkerMachine(i)
		m := machine(o, name, ms.Name, "MachineSet", clusterv1.GroupVersion.String(), "KubeadmConfig", "DevMachine")
		m.Labels[clusterv1.MachineDeploymentNameLabel] = o.MDName()
		m.Labels[clusterv1.MachineSetNameLabel] = ms.Name
		out = append(out, m)
		out = append(out, &bootstrapv1.KubeadmConfig{
			TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
			ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: name, Labels: labels(),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: name, UID: uid("Machine", name)}}},
			Spec: bootstrapv1.KubeadmConfigSpec{
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
					KubeletExtraArgs: []bootstrapv1.Arg{{Name: "eviction-hard", Value: ptr.To("nodefs.available<0%")}},
				}},
				Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "worker\n"}},
			},
		})
		out = append(out, devMachine(o, name, o.WorkerTemplate(), dockerBackend(o.WorkerImage)))
	}
	return out, nil
}

func workerTemplate(o Options) clusterv1.MachineTemplateSpec {
	return clusterv1.MachineTemplateSpec{
		ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{clusterv1.MachineDeploymentNameLabel: o.MDName()}},
		Spec: clusterv1.MachineSpec{
			ClusterName: o.Cluster,
			Version:     o.Version,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: o.WorkerTemplate(),
			}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: "DevMachineTemplate", Name: o.WorkerTemplate()},
		},
	}
}

func machine(o Options, name, owner, ownerKind, ownerAPIVersion, bootstrapKind, infraKind string) *clusterv1.Machine {
	return &clusterv1.Machine{
		TypeMeta: metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: name, UID: uid("Machine", name),
			Labels: map[string]string{clusterv1.ClusterNameLabel: o.Cluster},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: ownerAPIVersion, Kind: ownerKind, Name: owner,
				UID: uid(ownerKind, owner), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: clusterv1.MachineSpec{
			ClusterName: o.Cluster,
			Version:     o.Version,
			Bootstrap: clusterv1.Bootstrap{
				ConfigRef:      clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: bootstrapKind, Name: name},
				DataSecretName: ptr.To(name),
			},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: infraKind, Name: name},
			ProviderID:        "dev://" + name,
		},
		Status: clusterv1.MachineStatus{NodeRef: clusterv1.MachineNodeReference{Name: name}},
	}
}

func inMemoryBackend() map[string]any {
	p := func() map[string]any { return map[string]any{"provisioning": map[string]any{"startupDuration": "2s"}} }
	return map[string]any{"inMemory": map[string]any{"vm": p(), "node": p(), "apiServer": p(), "etcd": p()}}
}

func dockerBackend(image string) map[string]any {
	return map[string]any{"docker": map[string]any{"customImage": image}}
}

func devMachineTemplate(o Options, name string, backend map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": InfraGroup + "/v1beta2", "kind": "DevMachineTemplate",
		"metadata": map[string]any{"namespace": o.Namespace, "name": name, "labels": map[string]any{clusterv1.ClusterNameLabel: o.Cluster}},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"backend": runtime.DeepCopyJSONValue(backend)}}},
	}}
	return u
}

func devMachine(o Options, name, template string, backend map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": InfraGroup + "/v1beta2", "kind": "DevMachine",
		"metadata": map[string]any{"namespace": o.Namespace, "name": name,
			"labels": map[string]any{clusterv1.ClusterNameLabel: o.Cluster},
			"annotations": map[string]any{
				clusterv1.TemplateClonedFromNameAnnotation:      template,
				clusterv1.TemplateClonedFromGroupKindAnnotation: "DevMachineTemplate." + InfraGroup,
			}},
		"spec": map[string]any{"providerID": "dev://" + name, "backend": runtime.DeepCopyJSONValue(backend)},
	}}
}
