package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

func TestByName(t *testing.T) {
	tests := []struct {
		name      string
		listErr   error
		wantCalls []string
		wantErr   bool
	}{
		{"field selector honoured", nil, []string{"metadata.name=n1"}, false},
		{"in-memory API server without field selectors", apierrors.NewInternalError(errors.New("support for field selectors on /v1, Kind=Node is not implemented")),
			[]string{"metadata.name=n1", ""}, false},
		{"other errors are not retried", apierrors.NewForbidden(corev1.Resource("nodes"), "", errors.New("no")), []string{"metadata.name=n1"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			client := fake.NewClientset(
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
			)
			var calls []string
			client.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				sel := a.(k8stesting.ListAction).GetListRestrictions().Fields.String()
				calls = append(calls, sel)
				if sel != "" && tt.listErr != nil {
					return true, nil, tt.listErr
				}
				return false, nil, nil
			})
			var watched []string
			client.PrependWatchReactor("nodes", func(a k8stesting.Action) (bool, watch.Interface, error) {
				watched = append(watched, a.(k8stesting.WatchAction).GetWatchRestrictions().Fields.String())
				return true, watch.NewFake(), nil
			})
			lw := byName(client.CoreV1().Nodes(), "n1").(plainListWatch)
			obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
			g.Expect(calls).To(Equal(tt.wantCalls))
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if len(calls) == 2 { // the fake ignores field selectors; the fallback filters itself
				list := obj.(*corev1.NodeList)
				g.Expect(list.Items).To(HaveLen(1))
				g.Expect(list.Items[0].Name).To(Equal("n1"))
			}
			_, err = lw.WatchWithContext(context.Background(), metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			// The watch uses the selector exactly when the list could.
			g.Expect(watched).To(Equal(tt.wantCalls[len(tt.wantCalls)-1:]))
		})
	}
}

// TestInformerListsFirst: the reflector lists, then watches (no streaming list,
// which servers that ignore sendInitialEvents never finish).
func TestInformerListsFirst(t *testing.T) {
	g := NewWithT(t)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	inf := cache.NewSharedIndexInformer(byName(client.CoreV1().Nodes(), "n1"), &corev1.Node{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.Run(ctx.Done())
	// With a streaming list the fake server never ends the initial events, and
	// this sync would hang until the deadline.
	syncCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	g.Expect(cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced)).To(BeTrue())
	actions := client.Actions()
	g.Expect(actions).NotTo(BeEmpty())
	g.Expect(actions[0].GetVerb()).To(Equal("list"))
	_, exists, err := inf.GetIndexer().GetByKey("n1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists).To(BeTrue())
}
