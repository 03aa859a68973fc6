package kube

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// configRunner stands in for `kubeadm config images pull`: it keeps the
// configuration file kubeadm would read when it runs (the pull removes it after).
type configRunner struct {
	root string
	cmds []string
	cfg  string
}

func (r *configRunner) Run(_ context.Context, c backend.Command) (backend.Result, error) {
	r.cmds = append(r.cmds, c.String())
	b, _ := os.ReadFile(filepath.Join(r.root, ImagesConfig))
	r.cfg = string(b)
	return backend.Result{Stdout: []byte("[config/images] Pulled mirror.example.com/etcd:3.5.21-0\n")}, nil
}

// pullClusterConfiguration is the part of the pre-pull's kubeadm
// ClusterConfiguration that names images, decoded from the file kubeadm reads.
type pullClusterConfiguration struct {
	APIVersion        string `json:"apiVersion"`
	Kind              string `json:"kind"`
	KubernetesVersion string `json:"kubernetesVersion"`
	ImageRepository   string `json:"imageRepository"`
	DNS               struct {
		Disabled bool `json:"disabled"`
	} `json:"dns"`
	Proxy struct {
		Disabled bool `json:"disabled"`
	} `json:"proxy"`
	Etcd struct {
		Local *struct {
			ImageRepository string `json:"imageRepository"`
			ImageTag        string `json:"imageTag"`
		} `json:"local"`
		External *struct {
			Endpoints []string `json:"endpoints"`
		} `json:"external"`
	} `json:"etcd"`
}

// TestPullControlPlaneImagesOverrides: the pre-pull names the images `kubeadm
// upgrade` will run: the plan's ClusterConfiguration imageRepository (over the
// repository the node's kube-apiserver runs from, which is used only when the
// plan sets none) and its etcd.local imageRepository and imageTag (a pinned etcd
// keeps its tag through kubeadm upgrade). Before, the pull used the manifest's
// repository and kubeadm's default etcd image whatever the plan said, so a
// cluster with an etcd override pulled an image the upgrade never ran and the
// real one after the cordon.
func TestPullControlPlaneImagesOverrides(t *testing.T) {
	const manifest = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-apiserver\n    image: registry.example.com/k8s/kube-apiserver:v1.35.4\n"
	type etcdLocal struct{ repo, tag string }
	tests := []struct {
		name         string
		clusterCfg   string
		noManifest   bool
		externalEtcd bool
		wantRepo     string
		wantEtcd     *etcdLocal // nil: no etcd.local section (kubeadm's defaults)
		wantExternal bool
		wantErr      string
	}{
		{name: "no ClusterConfiguration: the node's repository, kubeadm's etcd", wantRepo: "registry.example.com/k8s"},
		{name: "ClusterConfiguration without image settings", clusterCfg: `{"apiServer":{"extraArgs":[{"name":"v","value":"2"}]}}`,
			wantRepo: "registry.example.com/k8s"},
		{name: "imageRepository overrides the node's", clusterCfg: `{"imageRepository":"mirror.example.com/k8s"}`,
			wantRepo: "mirror.example.com/k8s"},
		{name: "imageRepository without a readable manifest", clusterCfg: `{"imageRepository":"mirror.example.com/k8s"}`, noManifest: true,
			wantRepo: "mirror.example.com/k8s"},
		{name: "etcd repository and tag pinned", clusterCfg: `{"etcd":{"local":{"imageRepository":"etcd.example.com/etcd-io","imageTag":"3.5.21-0","dataDir":"/var/lib/etcd"}}}`,
			wantRepo: "registry.example.com/k8s", wantEtcd: &etcdLocal{"etcd.example.com/etcd-io", "3.5.21-0"}},
		{name: "etcd tag only", clusterCfg: `{"imageRepository":"mirror.example.com/k8s","etcd":{"local":{"imageTag":"3.6.8-0"}}}`,
			wantRepo: "mirror.example.com/k8s", wantEtcd: &etcdLocal{"", "3.6.8-0"}},
		{name: "etcd repository only", clusterCfg: `{"etcd":{"local":{"imageRepository":"etcd.example.com/etcd-io"}}}`,
			wantRepo: "registry.example.com/k8s", wantEtcd: &etcdLocal{"etcd.example.com/etcd-io", ""}},
		{name: "external etcd: no etcd image", clusterCfg: `{"imageRepository":"mirror.example.com/k8s","etcd":{"external":{"endpoints":["https://etcd:2379"]}}}`,
			externalEtcd: true, wantRepo: "mirror.example.com/k8s", wantExternal: true},
		{name: "no manifest and no imageRepository", noManifest: true, wantErr: APIServerManifest},
		{name: "a ClusterConfiguration of the wrong shape", clusterCfg: `{"imageRepository":5}`, wantErr: "clusterConfiguration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root := t.TempDir()
			if !tt.noManifest {
				write(t, root, APIServerManifest, manifest, 0o600)
			}
			write(t, root, KubeletInstanceConfig, "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n", 0o600)
			p := protocol.NewPlan("cp1")
			p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.3", Action: protocol.KubeadmUpgradeApply, ExternalEtcd: tt.externalEtcd}
			if tt.clusterCfg != "" {
				p.ClusterConfiguration = json.RawMessage(tt.clusterCfg)
			}
			r := &configRunner{root: root}
			h := &Host{Root: root, Runner: r}

			pulled, err := h.PullControlPlaneImages(context.Background(), "/staged/kubeadm", p)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ErrImagePull))
				g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
				g.Expect(r.cmds).To(BeEmpty(), "nothing pulled")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pulled).To(Equal([]string{"mirror.example.com/etcd:3.5.21-0"}))
			g.Expect(r.cmds).To(Equal([]string{"/staged/kubeadm config images pull --config " + ImagesConfig}))
			g.Expect(filepath.Join(root, ImagesConfig)).NotTo(BeAnExistingFile())

			docs := strings.Split(r.cfg, "---\n")
			g.Expect(docs).To(HaveLen(2), r.cfg)
			g.Expect(docs[0]).To(ContainSubstring(`criSocket: "unix:///run/containerd/containerd.sock"`))
			var cc pullClusterConfiguration
			g.Expect(yaml.UnmarshalStrict([]byte(docs[1]), &cc)).To(Succeed(), "only the fields the pull needs: %s", docs[1])
			g.Expect(cc.APIVersion + " " + cc.Kind).To(Equal("kubeadm.k8s.io/v1beta4 ClusterConfiguration"))
			g.Expect(cc.KubernetesVersion).To(Equal("v1.36.3"))
			g.Expect(cc.ImageRepository).To(Equal(tt.wantRepo))
			g.Expect(cc.DNS.Disabled && cc.Proxy.Disabled).To(BeTrue())
			if tt.wantEtcd == nil {
				g.Expect(cc.Etcd.Local).To(BeNil(), r.cfg)
			} else {
				g.Expect(cc.Etcd.Local).NotTo(BeNil(), r.cfg)
				g.Expect(cc.Etcd.Local.ImageRepository).To(Equal(tt.wantEtcd.repo))
				g.Expect(cc.Etcd.Local.ImageTag).To(Equal(tt.wantEtcd.tag))
			}
			g.Expect(cc.Etcd.External != nil).To(Equal(tt.wantExternal), r.cfg)
		})
	}
}
