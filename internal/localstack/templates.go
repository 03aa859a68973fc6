package localstack

// clusterClassTemplate is our ClusterClass for the in-memory DevCluster/DevMachine
// provider. Unlike upstream's clusterclass-in-memory.yaml it has INLINE patches and no
// external upgrade plan, so no other extension is needed in its namespace: CAPI allows
// only one in-place extension per namespace, and upstream's test extension always
// answers the in-place hooks.
//
// Variables: files ([{path, content}]) goes into every KubeadmConfig (control plane and
// workers), so that a files change is a KubeadmConfig change that must be applied on
// the node; apiServerExtraArgs (optional, [{name, value}]) becomes the control plane's
// clusterConfiguration.apiServer.extraArgs. KCP rolls out with maxSurge 0 (no new control-plane machine).
const clusterClassTemplate = `
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevClusterTemplate
metadata:
  name: {{.Class}}-cluster
spec:
  template:
    spec:
      backend:
        inMemory: {}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlaneTemplate
metadata:
  name: {{.Class}}-control-plane
spec:
  template:
    spec:
      rollout:
        strategy:
          type: RollingUpdate
          rollingUpdate:
            maxSurge: 0
      kubeadmConfigSpec:
        clusterConfiguration:
          apiServer:
            certSANs: [localhost, 127.0.0.1]
        files:
        - path: /etc/capi-inplace-e2e/placeholder
          content: replaced by the files variable
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevMachineTemplate
metadata:
  name: {{.Class}}-control-plane
spec:
  template:
    spec:
{{ inMemoryMachine | indent 6 }}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevMachineTemplate
metadata:
  name: {{.Class}}-worker
spec:
  template:
    spec:
{{ inMemoryMachine | indent 6 }}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata:
  name: {{.Class}}-worker
spec:
  template:
    spec:
      files:
      - path: /etc/capi-inplace-e2e/placeholder
        content: replaced by the files variable
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: ClusterClass
metadata:
  name: {{.Class}}
spec:
  controlPlane:
    machineInfrastructure:
      templateRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
        kind: DevMachineTemplate
        name: {{.Class}}-control-plane
    templateRef:
      apiVersion: controlplane.cluster.x-k8s.io/v1beta2
      kind: KubeadmControlPlaneTemplate
      name: {{.Class}}-control-plane
  infrastructure:
    templateRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
      kind: DevClusterTemplate
      name: {{.Class}}-cluster
  workers:
    machineDeployments:
    - class: default-worker
      bootstrap:
        templateRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
          kind: KubeadmConfigTemplate
          name: {{.Class}}-worker
      infrastructure:
        templateRef:
          apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
          kind: DevMachineTemplate
          name: {{.Class}}-worker
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
  - name: apiServerExtraArgs
    required: false
    schema:
      openAPIV3Schema:
        type: array
        items:
          type: object
          required: [name, value]
          properties:
            name:
              type: string
            value:
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
            names: [default-worker]
      jsonPatches:
      - op: replace
        path: /spec/template/spec/files
        valueFrom:
          variable: files
  - name: apiServerExtraArgs
    enabledIf: '{{ "{{" }} if .apiServerExtraArgs {{ "}}" }}true{{ "{{" }} end {{ "}}" }}'
    definitions:
    - selector:
        apiVersion: controlplane.cluster.x-k8s.io/v1beta2
        kind: KubeadmControlPlaneTemplate
        matchResources:
          controlPlane: true
      jsonPatches:
      - op: add
        path: /spec/template/spec/kubeadmConfigSpec/clusterConfiguration/apiServer/extraArgs
        valueFrom:
          variable: apiServerExtraArgs
`

// inMemoryMachineSpec is the DevMachine spec of an in-memory machine: fast start-up.
const inMemoryMachineSpec = `backend:
  inMemory:
    vm:
      provisioning:
        startupDuration: 3s
        startupJitter: "0.2"
    node:
      provisioning:
        startupDuration: 1s
        startupJitter: "0.2"
    apiServer:
      provisioning:
        startupDuration: 1s
        startupJitter: "0.2"
    etcd:
      provisioning:
        startupDuration: 1s
        startupJitter: "0.2"
`

// topologyClusterTemplate is a ClusterClass-based Cluster.
const topologyClusterTemplate = `
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: {{.Name}}
spec:
{{ clusterNetwork | indent 2 }}
  topology:
    classRef:
      name: {{.Class}}
    version: {{.Version}}
    controlPlane:
      replicas: {{.ControlPlaneReplicas}}
{{- if gt .WorkerReplicas 0 }}
    workers:
      machineDeployments:
      - class: default-worker
        name: md-0
        replicas: {{.WorkerReplicas}}
        rollout:
          strategy:
            type: RollingUpdate
            rollingUpdate:
              maxSurge: {{.MDMaxSurge}}
              maxUnavailable: {{.MDMaxUnavailable}}
{{- end }}
    variables:
    - name: files
      value: {{ toJSON .Files }}
`

// plainClusterTemplate is a Cluster without ClusterClass: KubeadmControlPlane plus one
// MachineDeployment, written by hand like most production clusters.
const plainClusterTemplate = `
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevCluster
metadata:
  name: {{.Name}}
  annotations:
    # Upstream's in-memory DevCluster backend (v1.14.2) writes into metadata.annotations
    # without creating the map, and panics on a DevCluster that has none.
    e2e.capi-inplace.dev/annotations: "non-empty"
spec:
  backend:
    inMemory: {}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: {{.Name}}
spec:
{{ clusterNetwork | indent 2 }}
  infrastructureRef:
    apiGroup: infrastructure.cluster.x-k8s.io
    kind: DevCluster
    name: {{.Name}}
  controlPlaneRef:
    apiGroup: controlplane.cluster.x-k8s.io
    kind: KubeadmControlPlane
    name: {{.Name}}-control-plane
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevMachineTemplate
metadata:
  name: {{.Name}}-control-plane
spec:
  template:
    spec:
{{ inMemoryMachine | indent 6 }}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata:
  name: {{.Name}}-control-plane
spec:
  replicas: {{.ControlPlaneReplicas}}
  version: {{.Version}}
  rollout:
    strategy:
      type: RollingUpdate
      rollingUpdate:
        # KCP's webhook allows maxSurge 0 only from 3 replicas.
        maxSurge: {{ if lt .ControlPlaneReplicas 3 }}1{{ else }}0{{ end }}
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: DevMachineTemplate
        name: {{.Name}}-control-plane
  kubeadmConfigSpec:
    clusterConfiguration:
      apiServer:
        certSANs: [localhost, 127.0.0.1]
{{- if .ExternalEtcd }}
{{ externalEtcd .Name | indent 6 }}
{{- end }}
{{- if .Files }}
    files: {{ toJSON .Files }}
{{- end }}
{{- if gt .WorkerReplicas 0 }}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevMachineTemplate
metadata:
  name: {{.Name}}-worker
spec:
  template:
    spec:
{{ inMemoryMachine | indent 6 }}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata:
  name: {{.Name}}-worker
spec:
  template:
    spec:
{{- if .Files }}
      files: {{ toJSON .Files }}
{{- else }}
      format: cloud-config
{{- end }}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata:
  name: {{.Name}}-md-0
spec:
  clusterName: {{.Name}}
  replicas: {{.WorkerReplicas}}
  rollout:
    strategy:
      type: RollingUpdate
      rollingUpdate:
        maxSurge: {{.MDMaxSurge}}
        maxUnavailable: {{.MDMaxUnavailable}}
  selector:
    matchLabels:
      cluster.x-k8s.io/cluster-name: {{.Name}}
      cluster.x-k8s.io/deployment-name: {{.Name}}-md-0
  template:
    metadata:
      labels:
        cluster.x-k8s.io/cluster-name: {{.Name}}
        cluster.x-k8s.io/deployment-name: {{.Name}}-md-0
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
        name: {{.Name}}-worker
{{- end }}
`

const clusterNetworkSpec = `clusterNetwork:
  pods:
    cidrBlocks: [192.168.0.0/16]
  services:
    cidrBlocks: [10.128.0.0/12]
  serviceDomain: cluster.local
`
