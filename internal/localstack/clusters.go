package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// File is one entry of the files variable (KubeadmConfig spec.files).
type File struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// ClusterSpec describes a workload cluster on the in-memory provider.
type ClusterSpec struct {
	Namespace string
	Name      string
	// Class is the ClusterClass name for topology clusters (see CreateClusterClass);
	// empty for a plain cluster (KubeadmControlPlane plus MachineDeployment).
	Class                string
	Version              string
	ControlPlaneReplicas int
	WorkerReplicas       int
	MDMaxSurge           int
	MDMaxUnavailable     int
	Files                []File
	// ExternalEtcd (plain clusters only) gives the control plane an external etcd
	// (externaletcd.go): KubeadmControlPlane allows an even replica count only then.
	ExternalEtcd bool
}

func renderObjects(tmpl string, data any) ([]*unstructured.Unstructured, error) {
	t, err := template.New("objects").Funcs(template.FuncMap{
		"indent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
			for i := range lines {
				lines[i] = pad + lines[i]
			}
			return strings.Join(lines, "\n")
		},
		"toJSON": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
		"inMemoryMachine": func() string { return inMemoryMachineSpec },
		"clusterNetwork":  func() string { return clusterNetworkSpec },
		"externalEtcd":    externalEtcdSpec,
	}).Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("render template: %w", err)
	}
	docs, err := splitYAML(buf.Bytes())
	if err != nil {
		return nil, err
	}
	objs := make([]*unstructured.Unstructured, 0, len(docs))
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("decode rendered object: %w\n%s", err, doc)
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// ensureNamespace creates (or labels) a namespace.
func (s *Stack) ensureNamespace(ctx context.Context, name string, labels map[string]string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := s.Client.Create(ctx, ns); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", name, err)
		}
		existing := &corev1.Namespace{}
		if err := s.Client.Get(ctx, client.ObjectKey{Name: name}, existing); err != nil {
			return fmt.Errorf("get namespace %s: %w", name, err)
		}
		base := existing.DeepCopy()
		if existing.Labels == nil {
			existing.Labels = map[string]string{}
		}
		for k, v := range labels {
			existing.Labels[k] = v
		}
		if err := s.Client.Patch(ctx, existing, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("label namespace %s: %w", name, err)
		}
	}
	return nil
}

// CreateNamespace creates a namespace with labels (an extension's namespaceSelector
// picks namespaces by label).
func (s *Stack) CreateNamespace(ctx context.Context, name string, labels map[string]string) error {
	return s.ensureNamespace(ctx, name, labels)
}

func (s *Stack) createAll(ctx context.Context, namespace string, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		o.SetNamespace(namespace)
		if err := s.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("create %s %s/%s: %w", o.GetKind(), namespace, o.GetName(), err)
		}
	}
	return nil
}

// CreateClusterClass creates our ClusterClass (inline patches, see templates.go) and
// its templates in namespace.
func (s *Stack) CreateClusterClass(ctx context.Context, namespace, class string) error {
	objs, err := renderObjects(clusterClassTemplate, map[string]any{"Class": class})
	if err != nil {
		return err
	}
	return s.createAll(ctx, namespace, objs)
}

// CreateCluster creates a topology cluster (spec.Class set) or a plain cluster.
func (s *Stack) CreateCluster(ctx context.Context, spec ClusterSpec) error {
	if spec.Files == nil {
		spec.Files = []File{}
	}
	tmpl := plainClusterTemplate
	if spec.Class != "" {
		tmpl = topologyClusterTemplate
	}
	objs, err := renderObjects(tmpl, spec)
	if err != nil {
		return err
	}
	if spec.ExternalEtcd {
		if spec.Class != "" {
			return fmt.Errorf("cluster %s/%s: external etcd is only rendered for plain clusters", spec.Namespace, spec.Name)
		}
		if err := s.createExternalEtcdSecrets(ctx, spec.Namespace, spec.Name); err != nil {
			return err
		}
	}
	s.logf("creating cluster %s/%s (class %q, version %s, %d control plane + %d workers)",
		spec.Namespace, spec.Name, spec.Class, spec.Version, spec.ControlPlaneReplicas, spec.WorkerReplicas)
	return s.createAll(ctx, spec.Namespace, objs)
}

// WorkloadKubeconfig returns the kubeconfig of a workload cluster from its
// <cluster>-kubeconfig Secret (key "value"), as written by KubeadmControlPlane.
func (s *Stack) WorkloadKubeconfig(ctx context.Context, namespace, cluster string) ([]byte, error) {
	sec := &corev1.Secret{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cluster + "-kubeconfig"}, sec); err != nil {
		return nil, fmt.Errorf("get kubeconfig Secret of cluster %s/%s: %w", namespace, cluster, err)
	}
	v := sec.Data["value"]
	if len(v) == 0 {
		return nil, fmt.Errorf("kubeconfig Secret of cluster %s/%s has no value", namespace, cluster)
	}
	return v, nil
}
