package agent_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
	"github.com/capi-inplace/capi-inplace/internal/backend/registry"
	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestStagerOSBundleAndPoolConfig: a plan that switches the OS image to a bundle
// served over HTTP, for a pool whose OS backend configuration the node does not
// have yet. The Stager first writes the pool's configuration to the host (and asks
// for a restart to load it), then downloads the bundle into the artifact store and
// lets the OS backend stage it from there, and reports Staged on the Node; the
// node's running image is unchanged.
func TestStagerOSBundleAndPoolConfig(t *testing.T) {
	if client == nil {
		t.Skip("no envtest: KUBEBUILDER_ASSETS is not set")
	}
	g := NewWithT(t)
	ctx := context.Background()
	bundle := []byte("simulated OS image v2\n")
	sum := sha256.Sum256(bundle)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(bundle) }))
	defer srv.Close()

	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	const name = "stager-os"
	p := protocol.NewPlan(name)
	p.Machine = protocol.MachineRef{Namespace: "default", Name: "m", Cluster: "c"}
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmNone}
	p.OS = &protocol.OSImage{Backend: simulated.Name, Ref: protocol.ArtifactPath(digest), Digest: digest,
		Download: &protocol.BinaryArtifact{URL: srv.URL + "/os/v2.swu", Digest: digest}}
	p.OSBackends = json.RawMessage(`{"packages":{"manager":"apt"}}`)
	g.Expect(p.Validate()).To(Succeed())
	hash, err := p.Hash()
	g.Expect(err).NotTo(HaveOccurred())
	sealed, err := nodeplan.Seal(p, key.PublicKey())
	g.Expect(err).NotTo(HaveOccurred())
	sec, err := client.CoreV1().Secrets(inplacev1.AgentNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: inplacev1.PlanSecretName(name), Namespace: inplacev1.AgentNamespace},
		Data:       map[string][]byte{inplacev1.PlanSecretDataKey: sealed}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{inplacev1.StagePlanAnnotation: hash}}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	getNode := func() *corev1.Node {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return n
	}

	root := t.TempDir()
	sim := simulated.New(root)
	bootedBefore, err := sim.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	s := &agent.Stager{Store: &artifact.Store{Root: root}, Client: client, NodeName: name, Log: logr.Discard(),
		Backends: func(string) (backend.Backend, error) { return sim, nil }}

	// The pool's configuration first: written, then the agent restarts.
	err = s.Reconcile(ctx, getNode(), sec, key)
	g.Expect(err).To(MatchError(agent.ErrNodeConfigChanged))
	backends, err := registry.Load(ctx, registry.Env{HostRoot: root, Runner: backend.ExecRunner{}}, (&kube.Host{Root: root}).ReadFile)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(backends).To(HaveKey("packages"), "the restarted agent has the pool's backend")
	g.Expect(getNode().Annotations).NotTo(HaveKey(inplacev1.StagingStatusAnnotation))

	// After the restart: the configuration is in place, the bundle is staged.
	g.Expect(s.Reconcile(ctx, getNode(), sec, key)).To(Succeed())
	st, err := protocol.DecodeStagingStatus(getNode().Annotations[inplacev1.StagingStatusAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.StagePhaseStaged), "%+v", st)
	g.Expect(st.PlanHash).To(Equal(hash))
	g.Expect(st.Done).To(Equal(2)) // the bundle's download and the backend's stage
	staged, err := os.ReadFile(filepath.Join(root, protocol.ArtifactPath(digest)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(staged).To(Equal(bundle))
	bootedAfter, err := sim.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bootedAfter.Booted).To(Equal(bootedBefore.Booted), "staging does not switch the running image")

	// Staged is staged: a repeat changes nothing.
	before := getNode().ResourceVersion
	g.Expect(s.Reconcile(ctx, getNode(), sec, key)).To(Succeed())
	g.Expect(getNode().ResourceVersion).To(Equal(before))
}
