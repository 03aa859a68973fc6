package gate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-inplace/capi-inplace/internal/agent/helperbin/helperbintest"
	"github.com/capi-inplace/capi-inplace/internal/celgate/celproto"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// tlsServer is a real HTTPS server on loopback answering status (after delay),
// and its certificate as a PEM CA bundle.
func tlsServer(t *testing.T, status *atomic.Int32, delay time.Duration) (*httptest.Server, string) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != "" && r.URL.Path != "/readyz" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write(make([]byte, 1<<20)) // more than the probe reads
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point of some rows
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return srv, ca
}

// TestHTTPGetGate runs httpGet gates against a real TLS server on loopback.
func TestHTTPGetGate(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv, ca := tlsServer(t, &status, 0)
	var slowStatus atomic.Int32
	slowStatus.Store(http.StatusOK)
	slow, slowCA := tlsServer(t, &slowStatus, 5*time.Second)
	otherCA := selfSigned(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(plain.Close)
	redirect := httptest.NewServer(http.RedirectHandler("http://192.0.2.1/elsewhere", http.StatusFound))
	t.Cleanup(redirect.Close)

	tests := []struct {
		name    string
		probe   protocol.HTTPGetGate
		timeout int32
		wantErr string // "" passes
		maxTook time.Duration
	}{
		{name: "https with the server's CA passes", probe: protocol.HTTPGetGate{URL: srv.URL + "/readyz?token=s3cret", CABundle: ca}},
		{name: "https without its CA is refused", probe: protocol.HTTPGetGate{URL: srv.URL + "/readyz"}, wantErr: "certificate signed by unknown authority"},
		{name: "https with another CA is refused", probe: protocol.HTTPGetGate{URL: srv.URL + "/readyz", CABundle: otherCA}, wantErr: "certificate signed by unknown authority"},
		{name: "insecureSkipVerify accepts any certificate", probe: protocol.HTTPGetGate{URL: srv.URL + "/readyz", InsecureSkipVerify: true}},
		{name: "plain http in the default range", probe: protocol.HTTPGetGate{URL: plain.URL + "/healthz"}},
		{name: "outside the expected range", probe: protocol.HTTPGetGate{URL: plain.URL + "/healthz", ExpectedStatusMin: 200, ExpectedStatusMax: 200}, wantErr: "status 204, want 200-200"},
		{name: "a redirect is judged by its own status", probe: protocol.HTTPGetGate{URL: redirect.URL + "/", ExpectedStatusMax: 299}, wantErr: "status 302, want 200-299"},
		{name: "a redirect in range passes without being followed", probe: protocol.HTTPGetGate{URL: redirect.URL + "/"}},
		{name: "a hanging server is cut at the gate's timeout", probe: protocol.HTTPGetGate{URL: slow.URL + "/readyz", CABundle: slowCA}, timeout: 1,
			wantErr: "context deadline exceeded", maxTook: 3 * time.Second},
		{name: "nothing listening", probe: protocol.HTTPGetGate{URL: "http://127.0.0.1:1/healthz"}, wantErr: "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gate := protocol.Gate{Name: "probe", HTTPGet: &tt.probe, TimeoutSeconds: tt.timeout, PassWithinSeconds: 1}
			g.Expect(protocol.ValidateGates([]protocol.Gate{gate})).To(Succeed())
			start := time.Now()
			err := realChecker().Run(context.Background(), userGatePlan(gate))
			if tt.maxTook > 0 {
				g.Expect(time.Since(start)).To(BeNumerically("<", tt.maxTook))
			}
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var ge *Error
			g.Expect(errors.As(err, &ge)).To(BeTrue(), "error %v", err)
			g.Expect(ge.Gate).To(Equal("probe"))
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(err.Error()).NotTo(ContainSubstring("s3cret"), "the query is never in the message")
		})
	}

	t.Run("a failing status fails the gate, then a healthy one passes within its time", func(t *testing.T) {
		g := NewWithT(t)
		status.Store(http.StatusServiceUnavailable)
		gate := protocol.Gate{Name: "probe", HTTPGet: &protocol.HTTPGetGate{URL: srv.URL + "/readyz", CABundle: ca}, PassWithinSeconds: 1}
		err := realChecker().Run(context.Background(), userGatePlan(gate))
		g.Expect(err).To(MatchError(ContainSubstring("gate probe did not pass within 1s")))
		g.Expect(err).To(MatchError(ContainSubstring("status 503, want 200-399")))

		gate.PassWithinSeconds = 20
		done := make(chan error, 1)
		go func() { done <- realChecker().Run(context.Background(), userGatePlan(gate)) }()
		g.Consistently(done, 300*time.Millisecond).ShouldNot(Receive())
		status.Store(http.StatusOK)
		g.Eventually(done, 5*time.Second).Should(Receive(BeNil()))
	})
}

// selfSigned is a CA certificate (PEM) that signed no server here.
func selfSigned(t *testing.T) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

type fakePods struct {
	pods []corev1.Pod
	err  error
}

func (f fakePods) PodsOnNode(context.Context) ([]corev1.Pod, error) { return f.pods, f.err }

func podReady(name string, ready corev1.ConditionStatus) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app"}, Spec: corev1.PodSpec{NodeName: "cp-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}}}
}

// TestCELGate evaluates CEL gates over the Node and its pods as typed objects
// turn into JSON, in the real CEL helper binary.
func TestCELGate(t *testing.T) {
	helper := helperbintest.Build(t, celproto.HelperName)
	allReady := `pods.all(p, p.status.conditions.exists(c, c.type == "Ready" && c.status == "True"))`
	tests := []struct {
		name    string
		expr    string
		pods    PodLister
		wantErr string
	}{
		{"all pods ready", allReady, fakePods{pods: []corev1.Pod{podReady("a", "True"), podReady("b", "True")}}, ""},
		{"a pod not ready", allReady, fakePods{pods: []corev1.Pod{podReady("a", "True"), podReady("b", "False")}}, "CEL expression is false over node cp-1 and its 2 pods"},
		{"node fields", `node.status.nodeInfo.kubeletVersion == "v1.36.0" && node.metadata.name == "cp-1"`, fakePods{}, ""},
		{"a field that is not there", `node.metadata.labels.zone == "a"`, fakePods{}, "no such key"},
		{"int fields are ints", `pods.all(p, p.spec.containers.all(c, c.ports.all(x, x.containerPort == 8080 && type(x.containerPort) == int)))`,
			fakePods{pods: []corev1.Pod{withPort(podReady("a", "True"), 8080)}}, ""},
		{"pods cannot be listed", allReady, fakePods{err: errors.New("pods is forbidden")}, "pods is forbidden"},
		{"no pod lister", allReady, nil, "cannot list its node's pods"},
		{"an expression this agent cannot compile", `size(pods)`, fakePods{}, "want bool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := &Checker{Nodes: &fakeNodes{node: node("v1.36.0", "True")}, Pods: tt.pods, CELHelper: helper, Timeout: 30 * time.Millisecond, Interval: 5 * time.Millisecond}
			var started []string
			c.Progress = func(name string) { started = append(started, name) }
			err := c.Run(context.Background(), userGatePlan(protocol.Gate{Name: "pods-ready", CEL: &protocol.CELGate{Expression: tt.expr}}))
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(started).To(Equal([]string{KubeletVersion, NodeReady, "pods-ready"}), "Progress names every gate as it starts")
				return
			}
			var ge *Error
			g.Expect(errors.As(err, &ge)).To(BeTrue(), "error %v", err)
			g.Expect(ge.Gate).To(Equal("pods-ready"))
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(started[len(started)-1]).To(Equal("pods-ready"))
			if strings.Contains(tt.wantErr, "is false") {
				g.Expect(errors.Is(err, celproto.ErrFalse)).To(BeTrue(), "a false expression is ErrFalse")
			} else {
				g.Expect(errors.Is(err, celproto.ErrFalse)).To(BeFalse())
			}
		})
	}

	t.Run("the gate's timeout kills a helper that hangs", func(t *testing.T) {
		g := NewWithT(t)
		hang := filepath.Join(t.TempDir(), celproto.HelperName)
		g.Expect(os.WriteFile(hang, []byte("#!/bin/sh\ncat >/dev/null\nexec sleep 60\n"), 0o755)).To(Succeed())
		c := &Checker{Nodes: &fakeNodes{node: node("v1.36.0", "True")}, Pods: fakePods{}, CELHelper: hang, Timeout: 30 * time.Millisecond, Interval: 5 * time.Millisecond}
		start := time.Now()
		err := c.Run(context.Background(), userGatePlan(protocol.Gate{Name: "pods-ready", CEL: &protocol.CELGate{Expression: "true"}, TimeoutSeconds: 1}))
		g.Expect(err).To(MatchError(ContainSubstring("gate pods-ready did not pass")))
		g.Expect(err).To(MatchError(context.DeadlineExceeded))
		g.Expect(time.Since(start)).To(BeNumerically("<", 4*time.Second))
	})
}

func withPort(p corev1.Pod, port int32) corev1.Pod {
	p.Spec.Containers = []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: port}}}}
	return p
}
