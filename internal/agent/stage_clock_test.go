package agent_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/artifact"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestStagingIgnoresTheCoordinatorsClock: the stage bound is a duration timed on
// the node (protocol.EncodeStageTimeout), so a node whose clock is 31 minutes ahead
// of the coordinator's stages all the same (review F11). Before, the coordinator
// sent the instant "its now + 30m", which such a node found already past: every
// staging failed at once with DeadlineExceeded, asked again, for ever. The node
// here also carries that instant, as a coordinator of the previous release with the
// skewed clock writes it: it is not read. The bound is still applied: a timeout the
// node cannot meet fails staging with DeadlineExceeded.
func TestStagingIgnoresTheCoordinatorsClock(t *testing.T) {
	if client == nil {
		t.Skip("no envtest: KUBEBUILDER_ASSETS is not set")
	}
	ctx := context.Background()
	bundle := []byte("simulated OS image v3\n")
	sum := sha256.Sum256(bundle)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(bundle) }))
	defer srv.Close()
	coordinatorNow := time.Now().Add(-31 * time.Minute) // the node is 31 minutes ahead

	stage := func(t *testing.T, name string, timeout time.Duration) protocol.StagingStatus {
		g := NewWithT(t)
		key, err := ecdh.X25519().GenerateKey(rand.Reader)
		g.Expect(err).NotTo(HaveOccurred())
		p := protocol.NewPlan(name)
		p.Machine = protocol.MachineRef{Namespace: "default", Name: "m", Cluster: "c"}
		p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmNone}
		p.OS = &protocol.OSImage{Backend: simulated.Name, Ref: protocol.ArtifactPath(digest), Digest: digest,
			Download: &protocol.BinaryArtifact{URL: srv.URL + "/os/v3.swu", Digest: digest}}
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
			Annotations: map[string]string{
				inplacev1.StagePlanAnnotation:    hash,
				inplacev1.StageTimeoutAnnotation: protocol.EncodeStageTimeout(timeout),
				staleStageDeadlineAnnotation:     coordinatorNow.Add(30 * time.Minute).UTC().Format(time.RFC3339),
			}}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())

		root := t.TempDir()
		sim := simulated.New(root)
		s := &agent.Stager{Store: &artifact.Store{Root: root}, Client: client, NodeName: name, Log: logr.Discard(),
			Backends: func(string) (backend.Backend, error) { return sim, nil }}
		_ = s.Reconcile(ctx, node, sec, key)
		node, err = client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		st, err := protocol.DecodeStagingStatus(node.Annotations[inplacev1.StagingStatusAnnotation])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.PlanHash).To(Equal(hash))
		return st
	}

	t.Run("a node ahead of the coordinator stages", func(t *testing.T) {
		st := stage(t, "clock-ahead", 30*time.Minute)
		NewWithT(t).Expect(st.Phase).To(Equal(protocol.StagePhaseStaged), "%+v", st)
	})
	t.Run("the bound still applies", func(t *testing.T) {
		st := stage(t, "clock-bound", time.Nanosecond)
		g := NewWithT(t)
		g.Expect(st.Phase).To(Equal(protocol.StagePhaseFailed), "%+v", st)
		g.Expect(st.Reason).To(Equal(protocol.StageReasonDeadline))
	})
}

// staleStageDeadlineAnnotation is the annotation in which the previous release's
// coordinator sent an instant (its clock's now + the staging deadline).
const staleStageDeadlineAnnotation = inplacev1.GroupName + "/stage-deadline"
