package coordinator

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

func TestKubernetesBinaries(t *testing.T) {
	const digest = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	pol, err := policy.Parse([]byte(`
kubernetesBinaries:
  v1.36.3:
    linux/amd64:
      kubeadm: {url: "http://10.250.0.1:8080/v1.36.3/kubeadm", digest: "` + digest + `"}
      kubelet: {url: "http://10.250.0.1:8080/v1.36.3/kubelet", digest: "` + digest + `"}
`))
	if err != nil {
		t.Fatal(err)
	}
	node := func(os, arch string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{OperatingSystem: os, Architecture: arch}}}
	}
	m := func(version string) *clusterv1.Machine {
		return &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: version}}
	}
	tests := []struct {
		name      string
		resolver  BinariesResolver
		machine   *clusterv1.Machine
		node      *corev1.Node
		wantURL   string
		wantInput bool
	}{
		{name: "listed version, node platform", resolver: pol, machine: m("v1.36.3"), node: node("linux", "amd64"), wantURL: "http://10.250.0.1:8080/v1.36.3/kubelet"},
		{name: "unlisted version: the OS image brings them", resolver: pol, machine: m("v1.35.4"), node: node("linux", "amd64")},
		{name: "no resolver", machine: m("v1.36.3"), node: node("linux", "amd64")},
		{name: "machine without version", resolver: pol, machine: m(""), node: node("linux", "amd64")},
		{name: "listed version, other platform", resolver: pol, machine: m("v1.36.3"), node: node("linux", "arm64"), wantInput: true},
		{name: "node reports no platform", resolver: pol, machine: m("v1.36.3"), node: node("", ""), wantInput: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := kubernetesBinaries(tt.resolver, tt.machine, tt.node)
			if tt.wantInput {
				g.Expect(errors.Is(err, nodeplan.ErrInput)).To(BeTrue(), "%v", err)
				g.Expect(errors.Is(err, policy.ErrNoBinariesForPlatform)).To(BeTrue())
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tt.wantURL == "" {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got.Platform).To(Equal("linux/amd64"))
			g.Expect(got.Kubelet.URL).To(Equal(tt.wantURL))
		})
	}
}
