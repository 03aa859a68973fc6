// Package simhost is a simulated node host inside a directory: it emulates
// kubeadm, the kubelet, systemctl, the local etcd member (through etcd.Member, as
// the agent reaches a real one: the host has no etcdctl/etcdutl) and reboots, so the real agent
// code (state machine, journal, executor, Kubernetes layer, gates, simulated OS
// backend) runs unchanged against it. It is what `capi-inplace-dev agent --simulate`
// uses, in our tests and for anyone attaching simulated nodes to a workload
// cluster such as Cluster API's in-memory one.
//
// The simulated kubelet reports like a real one: after `systemctl restart
// kubelet` (or a reboot) it patches its Node's status.nodeInfo.kubeletVersion to
// the version of the kubelet "binary" (<root>/usr/bin/kubelet holds the version),
// and on a control-plane node it keeps the mirror pods of the static pods in
// kube-system in line with the manifests (image tag, phase Running). It never
// changes the Node's conditions.
//
// Fault injection and observation files, all under <root>/.sim. The action faults
// are injected by wrapping the agent's journal, Kubernetes layer, OS backends, gate
// runner and reboots (intercept.go: Journal, Kube, Backend, Gates, Reboot), as
// controller-runtime's interceptor wraps a client; the executor has no hooks.
//
//	fail-action-<action>   make an action fail (content: the message); rollback
//	                       actions are named rollback-<action>
//	pause-before-<action>  block before the action starts until the file is
//	                       removed; paused-at then holds the action's key
//	fail-gate              make the health gates fail (content: a gate name, or
//	                       empty for every gate)
//	api-outage-seconds     the next kubeadm upgrade makes the API server
//	                       unreachable for this agent for N seconds (one-shot)
//	boot-id, boots         current boot ID and number of boots
//	kubelet-skew           (written) each kubelet start on a control plane newer
//	                       than the node's kube-apiserver, one per line: the skew
//	                       policy broken (Host.KubeletSkew)
//	commands.log           every command the agent ran, one per line
//	etcd-members           the simulated etcd cluster's member count (default 1)
//	preflight-failures     kubeadm preflight checks this node fails, one per line
//	                       (SystemVerification, CoreDNSUnsupportedPlugins,
//	                       CoreDNSMigration, ImagePull on a control plane unless
//	                       the --config file turns the pull off, CreateJob*N):
//	                       kubeadm upgrade apply/node then fail
//	                       as on the real node unless --ignore-preflight-errors
//	                       covers them (opt-in: absent means every check passes)
//
// Like kubeadm 1.35+, the simulated kubeadm writes
// /var/lib/kubelet/instance-config.yaml at init and on every upgrade. Like the real
// one, `kubeadm upgrade apply` and `kubeadm upgrade node` on a control-plane node render
// the static pod manifests from the cluster's kube-system/kubeadm-config
// (ClusterConfiguration, kubeadm v1beta3 or v1beta4): the components' extraArgs become
// command flags, extraVolumes host-path volumes; a cluster without the ConfigMap gets
// kubeadm's defaults, an unreadable one fails the upgrade.
//
// Imports: internal/backend, internal/backend/simulated, internal/agent/etcd, internal/agent/executor
// (ErrRebooted, Host, ActionFrom), internal/agent/journal, internal/agent/kube (binary paths), internal/protocol, client-go, apimachinery,
// sigs.k8s.io/yaml and the standard library.
package simhost
