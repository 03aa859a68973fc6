package etcd

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// DefaultInitialClusterToken is etcd's default --initial-cluster-token, which
// kubeadm leaves unset.
const DefaultInitialClusterToken = "etcd-cluster"

// MemberConfig is the local member's identity as its static pod manifest starts it.
type MemberConfig struct {
	Name                string
	DataDir             string
	PeerURLs            []string
	InitialCluster      string
	InitialClusterToken string
	// Flags are all --name=value flags of the etcd command, in order.
	Flags []Flag
}

// Flag is one --name=value flag.
type Flag struct{ Name, Value string }

// ParseManifest reads the etcd container's flags from a static pod manifest
// (kubeadm writes --name, --data-dir, --initial-advertise-peer-urls and
// --initial-cluster, and no token, which leaves etcd's default).
func ParseManifest(raw []byte) (MemberConfig, error) {
	var pod corev1.Pod
	if err := yaml.Unmarshal(raw, &pod); err != nil {
		return MemberConfig{}, fmt.Errorf("etcd manifest: %w", err)
	}
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "etcd" {
			c = &pod.Spec.Containers[i]
		}
	}
	if c == nil {
		return MemberConfig{}, errors.New("etcd manifest: no container named etcd")
	}
	m := MemberConfig{InitialClusterToken: DefaultInitialClusterToken}
	args := append(append([]string{}, c.Command...), c.Args...)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			value = args[i+1]
			i++
		}
		m.Flags = append(m.Flags, Flag{name, value})
		switch name {
		case "name":
			m.Name = value
		case "data-dir":
			m.DataDir = value
		case "initial-advertise-peer-urls":
			m.PeerURLs = splitList(value)
		case "initial-cluster":
			m.InitialCluster = value
		case "initial-cluster-token":
			m.InitialClusterToken = value
		}
	}
	switch {
	case m.Name == "":
		return MemberConfig{}, errors.New("etcd manifest: no --name")
	case m.DataDir == "":
		return MemberConfig{}, errors.New("etcd manifest: no --data-dir")
	case len(m.PeerURLs) == 0:
		return MemberConfig{}, errors.New("etcd manifest: no --initial-advertise-peer-urls")
	}
	return m, nil
}

// SingleMemberCluster is the --initial-cluster of a one-member cluster of this
// member: its own entries of the manifest's initial cluster, or its peer URLs when
// the manifest does not list it (a member that joined lists its peers too).
func (m MemberConfig) SingleMemberCluster() string {
	var own []string
	for _, e := range splitList(m.InitialCluster) {
		if name, _, ok := strings.Cut(e, "="); ok && name == m.Name {
			own = append(own, e)
		}
	}
	if len(own) == 0 {
		for _, u := range m.PeerURLs {
			own = append(own, m.Name+"="+u)
		}
	}
	return strings.Join(own, ",")
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
