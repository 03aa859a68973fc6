package agent_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/artifact"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// pullRunner stands in for the node's kubeadm `config images pull` (the container
// runtime is not here): it records the command and the configuration file kubeadm
// would read at that moment, and fails when told to, as kubeadm does when the
// registry refuses an image.
type pullRunner struct {
	root string
	fail error
	mu   sync.Mutex
	cmds []string
	cfgs []string
}

func (r *pullRunner) Run(_ context.Context, c backend.Command) (backend.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds = append(r.cmds, c.String())
	cfg, _ := os.ReadFile(filepath.Join(r.root, kube.ImagesConfig))
	r.cfgs = append(r.cfgs, string(cfg))
	if r.fail != nil {
		res := backend.Result{ExitCode: 1, Stderr: []byte(r.fail.Error())}
		return res, &backend.CommandError{Command: c, Result: res, Err: errors.New("exit status 1")}
	}
	return backend.Result{Stdout: []byte("[config/images] Pulled registry.example.com/k8s/kube-apiserver:v1.36.3\n" +
		"[config/images] Pulled registry.example.com/k8s/etcd:3.6.8-0\n")}, nil
}

// TestStagerPullsControlPlaneImages: a control-plane node's plan to a new release
// carries the new kubeadm; staging runs that kubeadm from the artifact store to pull
// the control-plane images for the target version, the node's image repository and
// CRI socket, before it reports Staged. An image that cannot be pulled fails the
// staging with ImagePullFailed (the coordinator then answers Failure without
// cordoning, TestStagingVerdict), and nothing on the host changed. A worker's plan
// pulls nothing. Before this, staging reported Staged without any image and
// `kubeadm upgrade` pulled them after the cordon.
func TestStagerPullsControlPlaneImages(t *testing.T) {
	if client == nil {
		t.Skip("no envtest: KUBEBUILDER_ASSETS is not set")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(self) // an ELF file of the node's architecture
	if err != nil {
		t.Fatal(err)
	}
	digest := protocol.DigestOf(exe)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(exe) }))
	defer srv.Close()
	const manifest = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-apiserver\n    image: registry.example.com/k8s/kube-apiserver:v1.35.4\n"

	for _, tt := range []struct {
		name      string
		node      string
		role      protocol.Role
		action    protocol.KubeadmAction
		pullErr   error
		wantPhase protocol.StagePhase
		wantPull  bool
		// clusterConfig is the plan's ClusterConfiguration; wantCfg what the pull's
		// configuration then says besides the version and CRI socket.
		clusterConfig string
		wantCfg       []string
	}{
		{"control plane, images pulled", "si-pulled", protocol.RoleControlPlane, protocol.KubeadmUpgradeApply, nil, protocol.StagePhaseStaged, true,
			"", []string{`imageRepository: "registry.example.com/k8s"`}},
		{"control plane, the plan's image overrides", "si-overrides", protocol.RoleControlPlane, protocol.KubeadmUpgradeApply, nil, protocol.StagePhaseStaged, true,
			`{"imageRepository":"mirror.example.com/k8s","etcd":{"local":{"imageRepository":"etcd.example.com/etcd-io","imageTag":"3.5.21-0"}}}`,
			[]string{`imageRepository: "mirror.example.com/k8s"`, "etcd:\n  local:\n    imageRepository: \"etcd.example.com/etcd-io\"\n    imageTag: \"3.5.21-0\"\n"}},
		{"control plane, an image cannot be pulled", "si-unpullable", protocol.RoleControlPlane, protocol.KubeadmUpgradeNode,
			errors.New(`failed to pull image registry.example.com/k8s/kube-apiserver:v1.36.3: not found`), protocol.StagePhaseFailed, true,
			"", []string{`imageRepository: "registry.example.com/k8s"`}},
		{"worker: no control-plane images", "si-worker", protocol.RoleWorker, protocol.KubeadmUpgradeNode, nil, protocol.StagePhaseStaged, false, "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			name := tt.node
			root := t.TempDir()
			for p, content := range map[string]string{
				kube.APIServerManifest:     manifest,
				kube.KubeletInstanceConfig: "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n",
				kube.KubeadmBinary:         "old kubeadm",
			} {
				g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)).To(Succeed())
				g.Expect(os.WriteFile(filepath.Join(root, p), []byte(content), 0o600)).To(Succeed())
			}
			key, err := ecdh.X25519().GenerateKey(rand.Reader)
			g.Expect(err).NotTo(HaveOccurred())
			p := protocol.NewPlan(name)
			p.Machine = protocol.MachineRef{Namespace: "default", Name: "m", Cluster: "c"}
			p.Kubernetes = protocol.KubernetesPlan{Role: tt.role, Version: "v1.36.3", Action: tt.action,
				Binaries: &protocol.KubernetesBinaries{Platform: runtime.GOOS + "/" + runtime.GOARCH,
					Kubeadm: protocol.BinaryArtifact{URL: srv.URL + "/kubeadm", Digest: digest},
					Kubelet: protocol.BinaryArtifact{URL: srv.URL + "/kubelet", Digest: digest}}}
			if tt.clusterConfig != "" {
				p.ClusterConfiguration = json.RawMessage(tt.clusterConfig)
			}
			g.Expect(p.Validate()).To(Succeed())
			hash, err := p.Hash()
			g.Expect(err).NotTo(HaveOccurred())
			sealed, err := nodeplan.Seal(p, key.PublicKey())
			g.Expect(err).NotTo(HaveOccurred())
			sec, err := client.CoreV1().Secrets(inplacev1.AgentNamespace).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: inplacev1.PlanSecretName(name), Namespace: inplacev1.AgentNamespace},
				Data:       map[string][]byte{inplacev1.PlanSecretDataKey: sealed}}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{inplacev1.StagePlanAnnotation: hash}}}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())

			runner := &pullRunner{root: root, fail: tt.pullErr}
			s := &agent.Stager{Store: &artifact.Store{Root: root}, Client: client, NodeName: name, Log: logr.Discard(),
				Images: &kube.Host{Root: root, Runner: runner}}
			g.Expect(s.Reconcile(ctx, node, sec, key)).To(Succeed())

			node, err = client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			st, err := protocol.DecodeStagingStatus(node.Annotations[inplacev1.StagingStatusAnnotation])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Phase).To(Equal(tt.wantPhase), "%+v", st)
			if !tt.wantPull {
				g.Expect(runner.cmds).To(BeEmpty())
				g.Expect(st.Items).To(Equal(2))
				return
			}
			g.Expect(runner.cmds).To(Equal([]string{protocol.ArtifactPath(digest) + " config images pull --config " + kube.ImagesConfig}),
				"the staged (new) kubeadm pulls, not the node's")
			cfg := runner.cfgs[0]
			g.Expect(cfg).To(ContainSubstring(`kubernetesVersion: "v1.36.3"`))
			for _, want := range tt.wantCfg {
				g.Expect(cfg).To(ContainSubstring(want))
			}
			g.Expect(cfg).To(ContainSubstring(`criSocket: "unix:///run/containerd/containerd.sock"`))
			g.Expect(cfg).To(ContainSubstring("dns:\n  disabled: true\nproxy:\n  disabled: true"))
			g.Expect(st.Items).To(Equal(3), "kubeadm, kubelet, the images")
			fi, err := os.Stat(filepath.Join(root, protocol.ArtifactPath(digest)))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fi.Mode().Perm()&0o100).NotTo(BeZero(), "the staged kubeadm can run")

			// Nothing the node runs changed; the pull's configuration is gone.
			g.Expect(os.ReadFile(filepath.Join(root, kube.KubeadmBinary))).To(Equal([]byte("old kubeadm")))
			g.Expect(os.ReadFile(filepath.Join(root, kube.APIServerManifest))).To(Equal([]byte(manifest)))
			g.Expect(filepath.Join(root, kube.ImagesConfig)).NotTo(BeAnExistingFile())
			if tt.pullErr != nil {
				g.Expect(st.Item).To(Equal(protocol.StageImages))
				g.Expect(st.Reason).To(Equal(protocol.StageReasonImagePull))
				g.Expect(st.Message).To(ContainSubstring("kube-apiserver:v1.36.3: not found"))
				g.Expect(st.Done).To(Equal(2))
				return
			}
			g.Expect(st.Done).To(Equal(3))
			g.Expect(st.Message).To(ContainSubstring("2 control-plane images present"))
		})
	}
}
