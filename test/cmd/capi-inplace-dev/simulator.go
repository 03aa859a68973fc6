package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/capi-inplace/capi-inplace/internal/agent/agentcmd"
	"github.com/capi-inplace/capi-inplace/internal/agent/simhost"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
)

// simulator is the agent's --simulate: the host is the directory root, with
// kubeadm, the kubelet, systemctl, etcd, reboots and the OS backend emulated.
func simulator(root, nodeName string, log logr.Logger) (*agentcmd.Simulation, error) {
	sim := simhost.New(root, nodeName, nil, log)
	return &agentcmd.Simulation{
		Runner:        sim.Runner(),
		Rebooter:      sim,
		Journal:       sim.Journal,
		Kube:          sim.Kube,
		Backend:       sim.Backend,
		Gates:         sim.Gates,
		Binaries:      sim,
		Etcd:          sim.Etcd(),
		Backends:      map[string]backend.Backend{simulated.Name: simulated.New(root)},
		WrapTransport: sim.WrapTransport,
		Start: func(ctx context.Context, client kubernetes.Interface) error {
			sim.Client = client
			if err := initSimulatedHost(ctx, sim, client, nodeName, log); err != nil {
				return err
			}
			go sim.RunKubelet(ctx, 2*time.Second)
			return nil
		},
	}, nil
}

// initSimulatedHost lays out a fresh simulated host from its Node: the kubelet
// version from status.nodeInfo, the role from the control-plane label. It waits
// for the Node to exist and to report a version.
func initSimulatedHost(ctx context.Context, sim *simhost.Host, client kubernetes.Interface, nodeName string, log logr.Logger) error {
	if sim.Initialized() {
		return nil
	}
	for {
		node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err == nil && node.Status.NodeInfo.KubeletVersion != "" {
			_, cp := node.Labels["node-role.kubernetes.io/control-plane"]
			log.Info("Initialising simulated host", "node", nodeName, "kubeletVersion", node.Status.NodeInfo.KubeletVersion, "controlPlane", cp)
			return sim.Init(ctx, simhost.Options{KubernetesVersion: node.Status.NodeInfo.KubeletVersion, ControlPlane: cp})
		}
		log.Info("Waiting for the Node and its kubelet version to initialise the simulated host", "node", nodeName, "error", fmt.Sprint(err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
