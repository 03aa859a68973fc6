//go:build e2ereal

package e2ereal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// clusterSpec is a plain workload cluster (no ClusterClass) of the Dev provider's
// Docker backend: a KubeadmControlPlane and, with Workers > 0, a MachineDeployment.
type clusterSpec struct {
	Namespace, Name string
	Version         string
	ControlPlanes   int
	Workers         int
	// SingleNode opts the KubeadmControlPlane into capi-inplace's single-node path.
	SingleNode bool
	NodeImage  string
	// Annotation keys, filled in by createCluster.
	SingleNodeKey string
}

// The lane's load balancer template is the provider's default but for two settings.
// maxconn: haproxy raises its open-files limit to about twice maxconn, and the
// sandboxes the lane runs in cap it at 20000 (an ordinary machine takes the
// default's 100000 too). on-marked-down shutdown-sessions: a control plane updated
// in place keeps its API server running while kubeadm restarts the local etcd
// member, and clients whose one HTTP/2 connection haproxy pinned to it get errors
// until they reconnect (docs/real-capi.md has both figures).
const lbTemplate = `global
  log /dev/log local0
  log /dev/log local1 notice
  daemon
  maxconn 9000

resolvers docker
  nameserver dns 127.0.0.11:53

defaults
  log global
  mode tcp
  option dontlognull
  timeout connect 5000
  timeout client 50000
  timeout server 50000
  default-server init-addr none on-marked-down shutdown-sessions

frontend control-plane
  bind *:{{ .FrontendControlPlanePort }}
  default_backend kube-apiservers

backend kube-apiservers
  option httpchk GET /healthz
  {{range $server, $backend := .BackendServers}}
  server {{ $server }} {{ JoinHostPort $backend.Address $.BackendControlPlanePort }} weight {{ $backend.Weight }} check check-ssl verify none resolvers docker resolve-prefer ipv4
  {{- end}}
`

// The kubeadm settings every lane cluster has: no CoreDNS or kube-proxy (no image of
// either can be built here), and a file the scenarios change.
const clusterTemplate = `
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{.Name}}-lb
data:
  value: |
{{ .LBTemplate | indent 4 }}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevCluster
metadata:
  name: {{.Name}}
spec:
  backend:
    docker:
      loadBalancer:
        imageRepository: capi-real
        imageTag: lane
        customHAProxyConfigTemplateRef:
          name: {{.Name}}-lb
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevMachineTemplate
metadata:
  name: {{.Name}}-node
spec:
  template:
    spec:
      backend:
        docker:
          customImage: {{.NodeImage}}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: {{.Name}}
{{- if .SingleNode }}
  annotations:
    {{.SingleNodeKey}}: "true"
{{- end }}
spec:
  replicas: {{.ControlPlanes}}
  version: {{.Version}}
{{- if ge .ControlPlanes 3 }}
  rollout:
    strategy:
      type: RollingUpdate
      rollingUpdate:
        maxSurge: 0
{{- end }}
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: DevMachineTemplate
        name: {{.Name}}-node
  kubeadmConfigSpec:
    clusterConfiguration:
      apiServer:
        certSANs: [localhost, 127.0.0.1]
    # Only in initConfiguration: kubeadm join has no addon phases and refuses them.
    # KCP then reads the first node's init configuration as a join configuration
    # with these phases, a difference the planner knows is none.
    initConfiguration:
      skipPhases: [addon/coredns, addon/kube-proxy]
    files:
    - path: /etc/capi-real/cluster.conf
      content: "generation 1\n"
---
{{- if gt .Workers 0 }}
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata:
  name: {{.Name}}-worker
spec:
  template:
    spec:
      files:
      - path: /etc/capi-real/cluster.conf
        content: "generation 1\n"
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata:
  name: {{.Name}}-md
spec:
  clusterName: {{.Name}}
  replicas: {{.Workers}}
  # No surge: Cluster API moves a Machine to the new MachineSet and updates it in
  # place instead of creating one first.
  rollout:
    strategy:
      type: RollingUpdate
      rollingUpdate:
        maxSurge: 0
        maxUnavailable: 1
  selector:
    matchLabels: {}
  template:
    spec:
      clusterName: {{.Name}}
      version: {{.Version}}
      bootstrap:
        configRef:
          apiGroup: bootstrap.cluster.x-k8s.io
          kind: KubeadmConfigTemplate
          name: {{.Name}}-worker
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: DevMachineTemplate
        name: {{.Name}}-node
---
{{- end }}
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: {{.Name}}
spec:
  clusterNetwork:
    pods:
      cidrBlocks: [10.244.0.0/16]
    services:
      cidrBlocks: [10.96.0.0/12]
  controlPlaneRef:
    apiGroup: controlplane.cluster.x-k8s.io
    kind: KubeadmControlPlane
    name: {{.Name}}
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: DevCluster
    name: {{.Name}}
`

// createCluster creates the namespace (served by our extension, opted in) and the
// cluster's objects.
func createCluster(t *testing.T, spec clusterSpec) {
	t.Helper()
	ctx := suite.ctx
	spec.SingleNodeKey = inplacev1.SingleNodeControlPlaneAnnotation
	if spec.NodeImage == "" {
		spec.NodeImage = suite.nodeImage
	}
	if err := suite.stack.CreateNamespace(ctx, spec.Namespace, map[string]string{
		extensionLabel: "true", inplacev1.NamespaceEnabledLabel: "true",
	}); err != nil {
		t.Fatal(err)
	}
	objs, err := render(clusterTemplate, struct {
		clusterSpec
		LBTemplate string
	}{spec, lbTemplate})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		o.SetNamespace(spec.Namespace)
		if err := suite.stack.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

func render(tmpl string, data any) ([]*unstructured.Unstructured, error) {
	t, err := template.New("objects").Funcs(template.FuncMap{"indent": indent}).Parse(tmpl)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&buf, 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode objects: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func indent(n int, s string) string {
	pad := bytes.Repeat([]byte(" "), n)
	var out bytes.Buffer
	for i, line := range bytes.Split([]byte(s), []byte("\n")) {
		if i > 0 {
			out.WriteByte('\n')
		}
		if len(line) > 0 {
			out.Write(pad)
			out.Write(line)
		}
	}
	return out.String()
}
