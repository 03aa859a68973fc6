package protocol

import "testing"

func TestOrderImageAndKubernetes(t *testing.T) {
	tests := []struct {
		name                            string
		controlPlane, binariesDelivered bool
		want                            ImageOrder
	}{
		{"control plane, kubeadm delivered", true, true, ImageOrderKubernetesFirst},
		{"control plane, kubeadm only in the image", true, false, ImageOrderImageFirstKubeletAhead},
		{"worker, kubeadm delivered", false, true, ImageOrderImageFirstWorker},
		{"worker, kubeadm only in the image", false, false, ImageOrderImageFirstWorker},
	}
	for _, tt := range tests {
		if got := OrderImageAndKubernetes(tt.controlPlane, tt.binariesDelivered); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
}
