package gate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

type fakeNodes struct {
	mu    sync.Mutex
	node  *corev1.Node
	pods  map[string]*corev1.Pod
	err   error
	calls int
}

func (f *fakeNodes) Node(context.Context) (*corev1.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.node, f.err
}

func (f *fakeNodes) Pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	if p, ok := f.pods[ns+"/"+name]; ok {
		return p, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
}

// etcd answers its errors after delay, or the context's error if that ends first.
type etcd struct {
	err, quorum error
	delay       time.Duration
}

func (e etcd) EtcdHealthy(ctx context.Context) error { return e.answer(ctx, e.err) }
func (e etcd) EtcdQuorum(ctx context.Context) error  { return e.answer(ctx, e.quorum) }

func (e etcd) answer(ctx context.Context, err error) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(e.delay):
		return err
	}
}

func node(version string, ready corev1.ConditionStatus) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-1"},
		Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: version},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady"}},
		},
	}
}

func pods(tag string, phase corev1.PodPhase) map[string]*corev1.Pod {
	out := map[string]*corev1.Pod{}
	for _, c := range ControlPlanePods() {
		out["kube-system/"+c+"-cp-1"] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: c + "-cp-1", Namespace: "kube-system"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: c, Image: "registry.k8s.io/" + c + ":" + tag}}},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	return out
}

func TestGates(t *testing.T) {
	cp := protocol.NewPlan("cp-1")
	cp.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply}
	withUser := *cp
	withUser.Gates = []protocol.Gate{{Name: "app-health", Command: []string{"curl", "-f", "http://localhost/healthz"}}}
	worker := protocol.NewPlan("cp-1")
	worker.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}

	tests := []struct {
		name     string
		plan     *protocol.NodePlan
		nodes    *fakeNodes
		etcd     error
		user     error
		wantGate string
		wantMsg  string
	}{
		{"control plane passes", cp, &fakeNodes{node: node("v1.36.0", "True"), pods: pods("v1.36.0", corev1.PodRunning)}, nil, nil, "", ""},
		{"worker needs no static pods", worker, &fakeNodes{node: node("v1.36.0", "True")}, errors.New("no etcd"), nil, "", ""},
		{"old kubelet", cp, &fakeNodes{node: node("v1.35.2", "True"), pods: pods("v1.36.0", corev1.PodRunning)}, nil, nil, KubeletVersion, "kubelet reports v1.35.2, want v1.36.0"},
		{"not ready", cp, &fakeNodes{node: node("v1.36.0", "False"), pods: pods("v1.36.0", corev1.PodRunning)}, nil, nil, NodeReady, "node is not Ready"},
		{"old static pods", cp, &fakeNodes{node: node("v1.36.0", "True"), pods: pods("v1.35.2", corev1.PodRunning)}, nil, nil, StaticPods, "runs registry.k8s.io/kube-apiserver:v1.35.2, want tag v1.36.0"},
		{"static pods pending", cp, &fakeNodes{node: node("v1.36.0", "True"), pods: pods("v1.36.0", corev1.PodPending)}, nil, nil, StaticPods, "is Pending, not Running"},
		{"static pod without its container", cp, &fakeNodes{node: node("v1.36.0", "True"), pods: func() map[string]*corev1.Pod {
			ps := pods("v1.36.0", corev1.PodRunning)
			ps["kube-system/kube-scheduler-cp-1"].Spec.Containers = nil
			return ps
		}()}, nil, nil, StaticPods, "has no container kube-scheduler"},
		{"missing static pods", cp, &fakeNodes{node: node("v1.36.0", "True")}, nil, nil, StaticPods, "not found"},
		{"etcd unhealthy", cp, &fakeNodes{node: node("v1.36.0", "True"), pods: pods("v1.36.0", corev1.PodRunning)}, errors.New("etcd member health: unhealthy"), nil, EtcdHealth, "unhealthy"},
		{"user gate fails", &withUser, &fakeNodes{node: node("v1.36.0", "True"), pods: pods("v1.36.0", corev1.PodRunning)}, nil, errors.New("connection refused"), "app-health", "connection refused"},
		{"API unreachable", worker, &fakeNodes{err: errors.New("dial tcp: connection refused")}, nil, nil, KubeletVersion, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &backendtest.Runner{}
			r.On("curl", "ok", tt.user)
			c := &Checker{Nodes: tt.nodes, Etcd: etcd{err: tt.etcd}, Runner: r, Timeout: 30 * time.Millisecond, Interval: 5 * time.Millisecond, CommandTimeout: time.Second}
			err := c.Run(context.Background(), tt.plan)
			if tt.wantGate == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var ge *Error
			g.Expect(errors.As(err, &ge)).To(BeTrue(), "error %v", err)
			g.Expect(ge.Gate).To(Equal(tt.wantGate))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantMsg))
		})
	}
}

func TestGatePollsUntilItPasses(t *testing.T) {
	g := NewWithT(t)
	f := &fakeNodes{node: node("v1.35.2", "True")}
	worker := protocol.NewPlan("cp-1")
	worker.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	c := &Checker{Nodes: f, Timeout: 5 * time.Second, Interval: 5 * time.Millisecond}
	done := make(chan error)
	go func() { done <- c.Run(context.Background(), worker) }()
	g.Eventually(func() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }).Should(BeNumerically(">", 2))
	g.Consistently(done, 50*time.Millisecond).ShouldNot(Receive())
	// The kubelet catches up: the next poll passes.
	f.mu.Lock()
	f.node = node("v1.36.0", "True")
	f.mu.Unlock()
	g.Eventually(done).Should(Receive(BeNil()))
}
