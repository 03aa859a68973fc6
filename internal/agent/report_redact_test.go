package agent

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestReporterRedactsPasswordHashes: the last line of defence. A status whose
// message was built from an error that still carries a crypt(3) hash reaches
// the Node's annotation with the hash redacted.
func TestReporterRedactsPasswordHashes(t *testing.T) {
	g := NewWithT(t)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	r := &Reporter{Client: client, NodeName: "n1", Log: logr.Discard()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	r.Report(protocol.NodeStatus{PlanHash: "h1", Phase: protocol.PhaseFailed, Step: 1, Steps: 3,
		Message: "user bob: useradd -m -G nope -p $6$rounds=5000$SALT$SECRETHASH bob: exit status 6"})
	g.Eventually(func() string {
		n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		return n.Annotations[inplacev1.StatusAnnotation]
	}, 5*time.Second).ShouldNot(BeEmpty())
	n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	raw := n.Annotations[inplacev1.StatusAnnotation]
	g.Expect(raw).NotTo(ContainSubstring("SECRETHASH"))
	st, err := protocol.DecodeStatus(raw)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Message).To(Equal("user bob: useradd -m -G nope -p <redacted> bob: exit status 6"))
}
