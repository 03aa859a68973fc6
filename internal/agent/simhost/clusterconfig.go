package simhost

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// clusterConfiguration is the part of kubeadm's ClusterConfiguration (kube-system/
// kubeadm-config, key ClusterConfiguration) that the simulated kubeadm renders into
// the static pod manifests, as the real one does on `kubeadm upgrade apply` and
// `kubeadm upgrade node`: the components' extraArgs and extraVolumes, and local
// etcd's extraArgs. Both kubeadm API versions are read: v1beta3 (extraArgs a map)
// and v1beta4 (a list of name/value).
type clusterConfiguration struct {
	APIServer         componentConfig `json:"apiServer"`
	ControllerManager componentConfig `json:"controllerManager"`
	Scheduler         componentConfig `json:"scheduler"`
	Etcd              struct {
		Local *struct {
			ExtraArgs extraArgs `json:"extraArgs"`
		} `json:"local"`
	} `json:"etcd"`
}

type componentConfig struct {
	ExtraArgs    extraArgs     `json:"extraArgs"`
	ExtraVolumes []extraVolume `json:"extraVolumes"`
}

type extraVolume struct {
	Name      string `json:"name"`
	HostPath  string `json:"hostPath"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly"`
}

type extraArg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// extraArgs reads both the v1beta3 map and the v1beta4 list.
type extraArgs []extraArg

func (a *extraArgs) UnmarshalJSON(b []byte) error {
	var list []extraArg
	if err := json.Unmarshal(b, &list); err == nil {
		*a = list
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("extraArgs is neither a list of name/value nor a map: %w", err)
	}
	*a = nil
	for k, v := range m {
		*a = append(*a, extraArg{Name: k, Value: v})
	}
	sort.Slice(*a, func(i, j int) bool { return (*a)[i].Name < (*a)[j].Name })
	return nil
}

// component returns the configuration of one static pod.
func (c *clusterConfiguration) component(name string) componentConfig {
	switch name {
	case "kube-apiserver":
		return c.APIServer
	case "kube-controller-manager":
		return c.ControllerManager
	case "kube-scheduler":
		return c.Scheduler
	}
	return componentConfig{}
}

// readClusterConfiguration reads the cluster's ClusterConfiguration as kubeadm upgrade
// does ("[upgrade/config] Reading configuration from the kubeadm-config ConfigMap").
// A cluster without the ConfigMap (a workload cluster that was never kubeadm-initialised,
// as in some of our tests) renders kubeadm's defaults; any other failure fails the
// upgrade, as it does on a real node.
func (h *Host) readClusterConfiguration(ctx context.Context) (*clusterConfiguration, error) {
	cc := &clusterConfiguration{}
	if h.Client == nil {
		return cc, nil
	}
	cm, err := h.Client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return cc, nil
	case err != nil:
		return nil, fmt.Errorf("[upgrade/config] FATAL: failed to get config map kubeadm-config: %w", err)
	}
	data, ok := cm.Data["ClusterConfiguration"]
	if !ok {
		return nil, fmt.Errorf("[upgrade/config] FATAL: unexpected error when reading kubeadm-config ConfigMap: ClusterConfiguration key value pair missing")
	}
	if err := yaml.Unmarshal([]byte(data), cc); err != nil {
		return nil, fmt.Errorf("[upgrade/config] FATAL: decode ClusterConfiguration: %w", err)
	}
	return cc, nil
}

// renderManifest writes a static pod manifest the way kubeadm renders it: the
// component's command with its flags (kubeadm's own defaults overridden by extraArgs,
// sorted by name) and its extra host-path volumes.
func renderManifest(name, image string, c componentConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: kube-system\nspec:\n  containers:\n  - name: %s\n    image: %s\n    command:\n    - %s\n", name, name, image, name)
	args := map[string]string{}
	for _, a := range c.ExtraArgs {
		args[a.Name] = a.Value
	}
	names := make([]string, 0, len(args))
	for n := range args {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "    - --%s=%s\n", n, args[n])
	}
	if len(c.ExtraVolumes) > 0 {
		b.WriteString("    volumeMounts:\n")
		for _, v := range c.ExtraVolumes {
			fmt.Fprintf(&b, "    - name: %s\n      mountPath: %s\n      readOnly: %t\n", v.Name, v.MountPath, v.ReadOnly)
		}
		b.WriteString("  volumes:\n")
		for _, v := range c.ExtraVolumes {
			fmt.Fprintf(&b, "  - name: %s\n    hostPath:\n      path: %s\n", v.Name, v.HostPath)
		}
	}
	return b.String()
}
