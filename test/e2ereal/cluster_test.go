//go:build e2ereal

package e2ereal

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/test/realcapi"
)

// clusterSpec is a workload cluster of the Dev provider's Docker backend: a
// KubeadmControlPlane and, with Workers > 0, a MachineDeployment, written as plain
// objects or, with Class set, made by Cluster API's topology controller from a
// ClusterClass of that name.
type clusterSpec struct {
	Namespace, Name string
	Class           string
	Version         string
	ControlPlanes   int
	Workers         int
	// SingleNode opts the KubeadmControlPlane into capi-inplace's single-node path.
	SingleNode bool
	NodeImage  string
	// Annotation keys, filled in by createCluster.
	SingleNodeKey string
}

// haHeadStart lets the HA scenario, the lane's long pole, create its cluster before
// the others create theirs: with six clusters created at once its five Machines
// took 6m20s to be Ready, against about 3 minutes alone, and that wait is on the
// lane's critical path, while the other scenarios end long before it. HA marks
// itself running before it goes parallel (every top-level test's code before
// t.Parallel runs before any parallel one resumes), and releases the others once
// its Machines are Ready, when it fails, or at the latest after haHeadStartMax.
var haHeadStart = struct {
	running atomic.Bool
	once    sync.Once
	done    chan struct{}
}{done: make(chan struct{})}

const haHeadStartMax = 8 * time.Minute

func releaseHAHeadStart() { haHeadStart.once.Do(func() { close(haHeadStart.done) }) }

// waitForHAHeadStart holds a scenario's cluster creation while the HA scenario
// creates its own.
func waitForHAHeadStart(t *testing.T) {
	if !haHeadStart.running.Load() {
		return
	}
	t0 := time.Now()
	select {
	case <-haHeadStart.done:
	case <-time.After(haHeadStartMax):
	case <-suite.ctx.Done():
	}
	t.Logf("created after the HA scenario's head start of %s", time.Since(t0).Round(time.Second))
}

// The kubeadm settings every lane cluster has: no CoreDNS or kube-proxy (no image of
// either can be built here), and a file the scenarios change.
const clusterTemplate = `
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{.Name}}-lb
data:
  value: |
{{ lbTemplate | indent 4 }}
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

// topologyTemplate is a Cluster of the lane's ClusterClass (realcapi.Class).
const topologyTemplate = `
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
  topology:
    classRef:
      name: {{.Class}}
    version: {{.Version}}
    controlPlane:
      replicas: {{.ControlPlanes}}
{{- if gt .Workers 0 }}
    workers:
      machineDeployments:
      - class: {{.WorkerClass}}
        name: md
        replicas: {{.Workers}}
        # No surge: Cluster API moves a Machine to the new MachineSet and updates
        # it in place instead of creating one first.
        rollout:
          strategy:
            type: RollingUpdate
            rollingUpdate:
              maxSurge: 0
              maxUnavailable: 1
{{- end }}
    variables:
    - name: files
      value:
      - path: /etc/capi-real/cluster.conf
        content: "generation 1\n"
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
	// Cleanups run last registered first: this one, registered before the scenario
	// starts its watchers, runs once they have stopped.
	if spec.Name != haCluster {
		waitForHAHeadStart(t)
	}
	t.Cleanup(func() { saveNodeLogs(t, spec.Name) })
	if err := suite.stack.CreateNamespace(ctx, spec.Namespace, map[string]string{
		extensionLabel: "true", inplacev1.NamespaceEnabledLabel: "true",
	}); err != nil {
		t.Fatal(err)
	}
	tmpl := clusterTemplate
	if spec.Class != "" {
		if spec.SingleNode {
			t.Fatal("the lane's ClusterClass clusters have no single-node opt-in")
		}
		class := realcapi.Class{Name: spec.Class, NodeImage: spec.NodeImage, ControlPlaneMaxSurgeZero: spec.ControlPlanes >= 3}
		if err := class.Create(ctx, suite.stack.Client, spec.Namespace); err != nil {
			t.Fatal(err)
		}
		tmpl = topologyTemplate
	}
	objs, err := realcapi.Render(tmpl, struct {
		clusterSpec
		WorkerClass string
	}{spec, realcapi.WorkerClass})
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
