package localstack

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestWithContractLabels(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   map[string]string
	}{
		{"adds both contracts", nil, map[string]string{"cluster.x-k8s.io/v1beta1": "v1beta1", "cluster.x-k8s.io/v1beta2": "v1beta2"}},
		{"keeps upstream's value", map[string]string{"cluster.x-k8s.io/v1beta1": "v1beta1_v1beta2", "x": "y"},
			map[string]string{"cluster.x-k8s.io/v1beta1": "v1beta1_v1beta2", "cluster.x-k8s.io/v1beta2": "v1beta2", "x": "y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			in := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels}}
			out := withContractLabels(in)
			g.Expect(out.Labels).To(Equal(tt.want))
			g.Expect(in.Labels).To(Equal(tt.labels), "input must not change")
		})
	}
}

func TestLoadWebhooksRenamesPerProvider(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "manifests.yaml")
	g.Expect(os.WriteFile(path, []byte(`---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks: []
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks: []
`), 0o600)).To(Succeed())
	w, err := loadWebhooks(path, ProviderKCP)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.mutating).To(HaveLen(1))
	g.Expect(w.validating).To(HaveLen(1))
	g.Expect(w.mutating[0].Name).To(Equal("kcp-mutating-webhook-configuration"))
	g.Expect(w.validating[0].Name).To(Equal("kcp-validating-webhook-configuration"))
}

func TestRenderClusters(t *testing.T) {
	files := []File{{Path: "/etc/x", Content: "1"}}
	tests := []struct {
		name      string
		spec      ClusterSpec
		wantKinds []string
		maxSurge  string
	}{
		{"topology", ClusterSpec{Name: "c", Class: "inplace", Version: "v1.35.0", ControlPlaneReplicas: 3, WorkerReplicas: 2, MDMaxUnavailable: 1, Files: files},
			[]string{"Cluster"}, ""},
		{"plain with workers, 3 CP: maxSurge 0", ClusterSpec{Name: "c", Version: "v1.35.0", ControlPlaneReplicas: 3, WorkerReplicas: 3, MDMaxUnavailable: 2, Files: files},
			[]string{"DevCluster", "Cluster", "DevMachineTemplate", "KubeadmControlPlane", "DevMachineTemplate", "KubeadmConfigTemplate", "MachineDeployment"}, "0"},
		{"plain single CP: maxSurge 1 (KCP webhook)", ClusterSpec{Name: "c", Version: "v1.35.0", ControlPlaneReplicas: 1},
			[]string{"DevCluster", "Cluster", "DevMachineTemplate", "KubeadmControlPlane"}, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tmpl := plainClusterTemplate
			if tt.spec.Class != "" {
				tmpl = topologyClusterTemplate
			}
			objs, err := renderObjects(tmpl, tt.spec)
			g.Expect(err).NotTo(HaveOccurred())
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
				if o.GetKind() == "KubeadmControlPlane" {
					v, _, _ := unstructuredString(o.Object, "spec", "rollout", "strategy", "rollingUpdate", "maxSurge")
					g.Expect(v).To(Equal(tt.maxSurge))
				}
				if o.GetKind() == "DevCluster" {
					g.Expect(o.GetAnnotations()).NotTo(BeEmpty(), "upstream's in-memory DevCluster backend panics without annotations")
				}
			}
			g.Expect(kinds).To(Equal(tt.wantKinds))
		})
	}
	t.Run("topology without workers has no spec.topology.workers (the CRD wants at least one property)", func(t *testing.T) {
		g := NewWithT(t)
		objs, err := renderObjects(topologyClusterTemplate, ClusterSpec{Name: "c", Class: "inplace", Version: "v1.35.0", ControlPlaneReplicas: 3, Files: files})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(objs).To(HaveLen(1))
		g.Expect(objs[0].Object["spec"].(map[string]any)["topology"]).NotTo(HaveKey("workers"))
	})
}

func TestRenderClusterClass(t *testing.T) {
	g := NewWithT(t)
	objs, err := renderObjects(clusterClassTemplate, map[string]any{"Class": "inplace"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(HaveLen(6))
	cc := objs[5]
	g.Expect(cc.GetKind()).To(Equal("ClusterClass"))
	patches, _, _ := unstructuredSlice(cc.Object, "spec", "patches")
	g.Expect(patches).To(HaveLen(2))
	for _, p := range patches {
		g.Expect(p).NotTo(HaveKey("external"), "inline patches only: one in-place extension per namespace")
	}
	g.Expect(patches[1]).To(HaveKeyWithValue("enabledIf", "{{ if .apiServerExtraArgs }}true{{ end }}"), "the optional variable patches only when set")
}

func TestRenderExternalEtcd(t *testing.T) {
	g := NewWithT(t)
	objs, err := renderObjects(plainClusterTemplate, ClusterSpec{Name: "c2", Version: "v1.35.0", ControlPlaneReplicas: 2, ExternalEtcd: true})
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		if o.GetKind() != "KubeadmControlPlane" {
			continue
		}
		etcd, _, _ := unstructured.NestedMap(o.Object, "spec", "kubeadmConfigSpec", "clusterConfiguration", "etcd", "external")
		g.Expect(etcd).To(Equal(map[string]any{
			"endpoints": []any{"https://etcd.c2.invalid:2379"},
			"caFile":    externalEtcdCAFile, "certFile": externalEtcdCertFile, "keyFile": externalEtcdKeyFile,
		}))
		sans, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "kubeadmConfigSpec", "clusterConfiguration", "apiServer", "certSANs")
		g.Expect(sans).To(Equal([]string{"localhost", "127.0.0.1"}))
		return
	}
	t.Fatal("no KubeadmControlPlane rendered")
}

func TestNameSelector(t *testing.T) {
	tests := []struct {
		sel  string
		name string
		ok   bool
	}{
		{"metadata.name=n1", "n1", true},
		{"metadata.name==n1", "n1", true},
		{"metadata.name=n1,metadata.namespace=x", "", false},
		{"spec.nodeName=n1", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.sel, func(t *testing.T) {
			g := NewWithT(t)
			name, ok := nameSelector(tt.sel)
			g.Expect(ok).To(Equal(tt.ok))
			g.Expect(name).To(Equal(tt.name))
		})
	}
}

func TestMarkMirror(t *testing.T) {
	pod := func(ns string, labels map[string]any, owners any) map[string]any {
		md := map[string]any{"name": "kube-apiserver-n1", "namespace": ns, "labels": labels}
		if owners != nil {
			md["ownerReferences"] = owners
		}
		return map[string]any{"kind": "Pod", "metadata": md}
	}
	tests := []struct {
		name string
		obj  map[string]any
		want bool
	}{
		{"control-plane static pod", pod("kube-system", map[string]any{"component": "kube-apiserver", "tier": "control-plane"}, nil), true},
		{"owned pod", pod("kube-system", map[string]any{"component": "x"}, []any{map[string]any{"kind": "DaemonSet"}}), false},
		{"other namespace", pod("default", map[string]any{"component": "x"}, nil), false},
		{"no labels", pod("kube-system", nil, nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			markMirror(tt.obj)
			md := tt.obj["metadata"].(map[string]any)
			ann, _ := md["annotations"].(map[string]any)
			_, has := ann["kubernetes.io/config.mirror"]
			g.Expect(has).To(Equal(tt.want))
		})
	}
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[p]
	}
	switch v := cur.(type) {
	case string:
		return v, true, nil
	case int64:
		return fmt.Sprint(v), true, nil
	case float64:
		return fmt.Sprint(v), true, nil
	}
	return fmt.Sprint(cur), cur != nil, nil
}

func unstructuredSlice(obj map[string]any, path ...string) ([]map[string]any, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	items, _ := cur.([]any)
	var out []map[string]any
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out, items != nil, nil
}
