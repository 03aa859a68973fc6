package cachedread

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// countingReader counts the reads that reach the API server.
type countingReader struct {
	client.Reader
	gets, lists atomic.Int32
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.lists.Add(1)
	return c.Reader.List(ctx, list, opts...)
}

// TestOrLiveNeverWaitsForAnInformer: the first read of a kind goes to the API
// server at once and starts the kind's informer; once it has synced, reads of
// that kind, typed or unstructured, come from the cache. Before, the first read
// waited for the informer's initial list, which under load outlasted the API
// server's 10 s admission timeout (the guard's write then failed closed).
func TestOrLiveNeverWaitsForAnInformer(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	env := testenv.StartT(t, testenv.Options{})
	direct, err := client.New(env.Config, client.Options{Scheme: clientgoscheme.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(direct.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cm"}, Data: map[string]string{"k": "v"}})).To(Succeed())
	informers, err := cache.New(env.Config, cache.Options{Scheme: clientgoscheme.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = informers.Start(ctx) }()
	g.Expect(informers.WaitForCacheSync(ctx)).To(BeTrue())
	live := &countingReader{Reader: direct}
	r := OrLive{Cache: informers, Live: live}

	cm := &corev1.ConfigMap{}
	g.Expect(r.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cm"}, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("k", "v"))
	g.Expect(live.gets.Load()).To(Equal(int32(1)), "the first read went live")

	g.Eventually(func() bool { return Synced(ctx, informers, &corev1.ConfigMap{}) }, 30*time.Second, 50*time.Millisecond).Should(BeTrue())
	g.Expect(r.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cm"}, cm)).To(Succeed())
	list := &corev1.ConfigMapList{}
	g.Expect(r.List(ctx, list, client.InNamespace("default"))).To(Succeed())
	g.Expect(list.Items).To(ContainElement(HaveField("Name", "cm")))
	g.Expect(live.gets.Load()).To(Equal(int32(1)), "a synced kind is read from the cache")
	g.Expect(live.lists.Load()).To(BeZero())

	// An unstructured kind has informers of its own: live first, then cached.
	ulist := &unstructured.UnstructuredList{}
	ulist.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMapList"})
	g.Expect(r.List(ctx, ulist, client.InNamespace("default"))).To(Succeed())
	g.Expect(live.lists.Load()).To(Equal(int32(1)))
	g.Expect(ulist.Items).To(ContainElement(HaveField("Object", HaveKeyWithValue("data", map[string]any{"k": "v"}))))
	item, err := ListItem(ulist)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() bool { return Synced(ctx, informers, item) }, 30*time.Second, 50*time.Millisecond).Should(BeTrue())
	g.Expect(r.List(ctx, ulist, client.InNamespace("default"))).To(Succeed())
	g.Expect(live.lists.Load()).To(Equal(int32(1)), "a synced unstructured kind is read from the cache")
}

// TestListItem: the item kind of typed and unstructured lists; a list kind
// without "List" is an error, not a guess.
func TestListItem(t *testing.T) {
	g := NewWithT(t)
	item, err := ListItem(&corev1.NodeList{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(item).To(BeAssignableToTypeOf(&corev1.Node{}))
	ul := &unstructured.UnstructuredList{}
	ul.SetGroupVersionKind(schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineList"})
	item, err = ListItem(ul)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(item.GetObjectKind().GroupVersionKind()).To(Equal(schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Machine"}))
	ul.SetKind("Machines")
	_, err = ListItem(ul)
	g.Expect(err).To(MatchError(ContainSubstring("not a list kind")))
}
