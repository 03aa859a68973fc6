package realcapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LBTemplate is the lane's load balancer configuration: the provider's default but
// for two settings. maxconn: haproxy raises its open-files limit to about twice
// maxconn, and the sandboxes the lane runs in cap it at 20000 (an ordinary machine
// takes the default's 100000 too). on-marked-down shutdown-sessions: a control plane
// updated in place keeps its API server running while kubeadm restarts the local
// etcd member, and clients whose one HTTP/2 connection haproxy pinned to it get
// errors until they reconnect (docs/real-capi.md has both figures).
const LBTemplate = `global
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

// Class is the lane's ClusterClass: nodes of the lane's node image, the load
// balancer of LBTemplate, kubeadm without CoreDNS or kube-proxy (no image of either
// can be built here), one MachineDeployment class (WorkerClass), and a required
// files variable ([{path, content}]) patched into every KubeadmConfig, control plane
// and workers, so that a files change is a change applied on each node.
type Class struct {
	Name      string
	NodeImage string
	// ControlPlaneMaxSurgeZero rolls the control plane out without surge, which
	// KubeadmControlPlane allows from three replicas; below that the single-node
	// path makes sure no Machine is created.
	ControlPlaneMaxSurgeZero bool
}

// WorkerClass is the Class's MachineDeployment class.
const WorkerClass = "default-worker"

// Create creates the class and its templates in namespace.
func (c Class) Create(ctx context.Context, cl client.Client, namespace string) error {
	objs, err := Render(classTemplate, c)
	if err != nil {
		return err
	}
	for _, o := range objs {
		o.SetNamespace(namespace)
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("create %s %s/%s: %w", o.GetKind(), namespace, o.GetName(), err)
		}
	}
	return nil
}

const classTemplate = `
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{.Name}}-lb
data:
  value: |
{{ lbTemplate | indent 4 }}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevClusterTemplate
metadata:
  name: {{.Name}}
spec:
  template:
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
kind: KubeadmControlPlaneTemplate
metadata:
  name: {{.Name}}-control-plane
spec:
  template:
    spec:
{{- if .ControlPlaneMaxSurgeZero }}
      rollout:
        strategy:
          type: RollingUpdate
          rollingUpdate:
            maxSurge: 0
{{- end }}
      kubeadmConfigSpec:
        clusterConfiguration:
          apiServer:
            certSANs: [localhost, 127.0.0.1]
        # Only in initConfiguration: kubeadm join has no addon phases and refuses
        # them. KCP then reads the first node's init configuration as a join
        # configuration with these phases, a difference the planner knows is none.
        initConfiguration:
          skipPhases: [addon/coredns, addon/kube-proxy]
        files:
        - path: /etc/capi-real/placeholder
          content: replaced by the files variable
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata:
  name: {{.Name}}-worker
spec:
  template:
    spec:
      files:
      - path: /etc/capi-real/placeholder
        content: replaced by the files variable
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: ClusterClass
metadata:
  name: {{.Name}}
spec:
  controlPlane:
    templateRef:
      apiVersion: controlplane.cluster.x-k8s.io/v1beta2
      kind: KubeadmControlPlaneTemplate
      name: {{.Name}}-control-plane
    machineInfrastructure:
      templateRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
        kind: DevMachineTemplate
        name: {{.Name}}-node
  infrastructure:
    templateRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
      kind: DevClusterTemplate
      name: {{.Name}}
  workers:
    machineDeployments:
    - class: ` + WorkerClass + `
      bootstrap:
        templateRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
          kind: KubeadmConfigTemplate
          name: {{.Name}}-worker
      infrastructure:
        templateRef:
          apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
          kind: DevMachineTemplate
          name: {{.Name}}-node
  variables:
  - name: files
    required: true
    schema:
      openAPIV3Schema:
        type: array
        minItems: 1
        items:
          type: object
          required: [path, content]
          properties:
            path:
              type: string
            content:
              type: string
  patches:
  - name: files
    definitions:
    - selector:
        apiVersion: controlplane.cluster.x-k8s.io/v1beta2
        kind: KubeadmControlPlaneTemplate
        matchResources:
          controlPlane: true
      jsonPatches:
      - op: replace
        path: /spec/template/spec/kubeadmConfigSpec/files
        valueFrom:
          variable: files
    - selector:
        apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
        kind: KubeadmConfigTemplate
        matchResources:
          machineDeploymentClass:
            names: [` + WorkerClass + `]
      jsonPatches:
      - op: replace
        path: /spec/template/spec/files
        valueFrom:
          variable: files
`

// Render executes a template of YAML documents (functions: indent, lbTemplate) and
// decodes the objects.
func Render(tmpl string, data any) ([]*unstructured.Unstructured, error) {
	t, err := template.New("objects").Funcs(template.FuncMap{
		"indent":     indent,
		"lbTemplate": func() string { return LBTemplate },
	}).Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("render template: %w", err)
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
	pad := strings.Repeat(" ", n)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "\n")
}
