package coordinator

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/secretbudget"
)

// bigSecrets is a namespace of count Secrets of size bytes each, as a reader that
// generates them on demand (live) and as their metadata (meta), counting the bodies
// it serves.
type bigSecrets struct {
	namespace   string
	count, size int
	gets        int
}

func (b *bigSecrets) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	var i int
	if key.Namespace != b.namespace || func() bool { _, err := fmt.Sscanf(key.Name, "s%d", &i); return err != nil }() || i >= b.count {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
	}
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		o.Namespace, o.Name, o.ResourceVersion = key.Namespace, key.Name, "1"
	case *corev1.Secret:
		b.gets++
		*o = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, ResourceVersion: "1"},
			Data: map[string][]byte{"k": []byte(strings.Repeat(string(rune('a'+i%26)), b.size))}}
	}
	return nil
}

func (b *bigSecrets) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// configReferencing is a KubeadmConfig whose files take their content from Secrets
// s0..s<n-1>.
func configReferencing(n int) *bootstrapv1.KubeadmConfig {
	cfg := &bootstrapv1.KubeadmConfig{}
	for i := range n {
		cfg.Spec.Files = append(cfg.Spec.Files, bootstrapv1.File{Path: fmt.Sprintf("/etc/f%d", i),
			ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: fmt.Sprintf("s%d", i), Key: "k"}}})
	}
	return cfg
}

// TestSecretCacheBoundsBytes: reading many large Secrets through the cache keeps
// what it retains under its byte bound, by its own accounting and by the heap
// (runtime.ReadMemStats after a GC, the cache still referenced). Before, the cache
// held up to 1024 bodies whatever their size: here all 200 megabyte-sized ones.
func TestSecretCacheBoundsBytes(t *testing.T) {
	const bound = 8 << 20
	g := NewWithT(t)
	ns := &bigSecrets{namespace: "tenant", count: 200, size: 1 << 20}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	sc := NewSecretCache(ns, ns, bound)
	for i := range ns.count {
		sec := &corev1.Secret{}
		g.Expect(sc.Get(context.Background(), client.ObjectKey{Namespace: "tenant", Name: fmt.Sprintf("s%d", i)}, sec)).To(Succeed())
		g.Expect(sc.Bytes()).To(BeNumerically("<=", bound))
	}
	retained := int64(heap()) - int64(before)
	t.Logf("after reading %d Secrets of %d KiB: the cache holds %d bodies, %d KiB by its accounting, heap grew by %d KiB (bound %d KiB)",
		ns.count, ns.size>>10, sc.Len(), sc.Bytes()>>10, retained>>10, bound>>10)
	g.Expect(sc.Len()).To(BeNumerically(">", 0))
	g.Expect(retained).To(BeNumerically("<", bound+(2<<20)), "the heap retains about the bound, not every body")
	runtime.KeepAlive(sc)

	// A body read again is served from the cache; an evicted one is read again.
	gets := ns.gets
	g.Expect(sc.Get(context.Background(), client.ObjectKey{Namespace: "tenant", Name: fmt.Sprintf("s%d", ns.count-1)}, &corev1.Secret{})).To(Succeed())
	g.Expect(ns.gets).To(Equal(gets))
	g.Expect(sc.Get(context.Background(), client.ObjectKey{Namespace: "tenant", Name: "s0"}, &corev1.Secret{})).To(Succeed())
	g.Expect(ns.gets).To(Equal(gets + 1))
}

// TestReferencedSecretsStopAtTheBudget: a KubeadmConfig referencing 300 Secrets of
// 512 KiB makes one call read only as many as fit secretbudget.MaxBytes (plus the
// one that crosses it), and fail with an input error the Machine shows.
func TestReferencedSecretsStopAtTheBudget(t *testing.T) {
	g := NewWithT(t)
	ns := &bigSecrets{namespace: "tenant", count: 300, size: 512 << 10}
	_, err := referencedSecrets(context.Background(), ns, "tenant", configReferencing(300))
	g.Expect(err).To(MatchError(nodeplan.ErrInput))
	g.Expect(err).To(MatchError(nodeplan.ErrTooLarge))
	g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("hold more than %d bytes", secretbudget.MaxBytes)))
	g.Expect(int64(ns.gets)).To(BeNumerically("<=", secretbudget.MaxBytes/int64(ns.size)+1))

	// Within the budget, every referenced Secret is read.
	ns.gets = 0
	got, err := referencedSecrets(context.Background(), ns, "tenant", configReferencing(3))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(3))
}

// TestManyLargeReferencedSecretsFailTheCall: the same through UpdateMachine against
// a real API server: the call fails as invalid input (typed: CauseInvalidInput) with
// a message naming the bound, which Cluster API shows in the Machine's Updating
// condition, as for every answer of the hook; the node is untouched. Before, the
// call read all 3 MiB of Secrets and failed only at the plan's own size bound.
func TestManyLargeReferencedSecretsFailTheCall(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("w-big", "v1.36.0", false)
	m := f.machine("m-big", "w-big", "v1.36.0", false)
	const count, size = 12, 256 << 10
	for i := range count {
		g.Expect(f.mgmt.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: fmt.Sprintf("s%d", i)},
			Data: map[string][]byte{"k": []byte(strings.Repeat("x", size))}})).To(Succeed())
	}
	out := f.coordinator().Update(f.ctx, f.request(m, configReferencing(count)))
	g.Expect(out.Kind).To(Equal(OutcomeFailedRetryable), out.Message)
	g.Expect(out.Cause).To(Equal(CauseInvalidInput))
	g.Expect(out.Message).To(ContainSubstring(fmt.Sprintf("hold more than %d bytes", secretbudget.MaxBytes)))
	resp := call(f.coordinator(), f.request(m, configReferencing(count)))
	g.Expect(string(resp.Status)).To(Equal("Failure"))
	g.Expect(resp.Message).To(Equal(out.Message))
	g.Expect(f.getNode("w-big").Spec.Unschedulable).To(BeFalse())
}
