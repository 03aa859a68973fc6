package etcd

import (
	"testing"

	. "github.com/onsi/gomega"
)

const kubeadmManifest = `apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
spec:
  containers:
  - command:
    - etcd
    - --advertise-client-urls=https://10.0.0.5:2379
    - --cert-file=/etc/kubernetes/pki/etcd/server.crt
    - --client-cert-auth=true
    - --data-dir=/var/lib/etcd
    - --initial-advertise-peer-urls=https://10.0.0.5:2380
    - --initial-cluster=cp-1=https://10.0.0.5:2380
    - --listen-client-urls=https://127.0.0.1:2379,https://10.0.0.5:2379
    - --name=cp-1
    image: registry.k8s.io/etcd:3.6.8-0
    name: etcd
`

func TestParseManifest(t *testing.T) {
	tests := []struct {
		name        string
		manifest    string
		wantErr     string
		wantName    string
		wantPeers   []string
		wantToken   string
		wantCluster string
	}{
		{name: "kubeadm init", manifest: kubeadmManifest, wantName: "cp-1", wantPeers: []string{"https://10.0.0.5:2380"},
			wantToken: DefaultInitialClusterToken, wantCluster: "cp-1=https://10.0.0.5:2380"},
		{name: "joined member lists its peers; only its own entry is kept", manifest: `spec:
  containers:
  - name: etcd
    command: [etcd, --name=cp-2, --data-dir=/var/lib/etcd, --initial-advertise-peer-urls=https://10.0.0.6:2380,
      "--initial-cluster=cp-1=https://10.0.0.5:2380,cp-2=https://10.0.0.6:2380", --initial-cluster-state=existing,
      --initial-cluster-token=tok]
`, wantName: "cp-2", wantPeers: []string{"https://10.0.0.6:2380"}, wantToken: "tok", wantCluster: "cp-2=https://10.0.0.6:2380"},
		{name: "member not in initial cluster uses its peer URLs", manifest: `spec:
  containers:
  - name: etcd
    command: [etcd, --name, cp-3, --data-dir=/d, "--initial-advertise-peer-urls=https://a:2380,https://b:2380"]
`, wantName: "cp-3", wantPeers: []string{"https://a:2380", "https://b:2380"}, wantToken: DefaultInitialClusterToken,
			wantCluster: "cp-3=https://a:2380,cp-3=https://b:2380"},
		{name: "no name", manifest: "spec:\n  containers:\n  - name: etcd\n    command: [etcd, --data-dir=/d]\n", wantErr: "no --name"},
		{name: "no etcd container", manifest: "spec:\n  containers:\n  - name: x\n", wantErr: "no container named etcd"},
		{name: "not yaml", manifest: "\t{", wantErr: "etcd manifest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			m, err := ParseManifest([]byte(tt.manifest))
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(m.Name).To(Equal(tt.wantName))
			g.Expect(m.PeerURLs).To(Equal(tt.wantPeers))
			g.Expect(m.InitialClusterToken).To(Equal(tt.wantToken))
			g.Expect(m.SingleMemberCluster()).To(Equal(tt.wantCluster))
		})
	}
}
