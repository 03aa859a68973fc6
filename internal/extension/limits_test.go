package extension_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/capi-inplace/capi-inplace/internal/extension"
	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// canUpdateMachineBody is the handler tests' CanUpdateMachine request, with the
// infrastructure machine of each side padded by padBytes of small JSON objects,
// the shape that costs the most heap per body byte once decoded.
func canUpdateMachineBody(t testing.TB, padBytes int) (string, []byte) {
	t.Helper()
	infra := func() json.RawMessage {
		obj := pt.DevMachine("cp-1", pt.DevMachineSpec("")).Object
		if padBytes > 0 {
			pad := strings.TrimSuffix(strings.Repeat(`{"a":1},`, padBytes/8), ",")
			obj["spec"].(map[string]any)["pad"] = json.RawMessage("[" + pad + "]")
		}
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	boot, err := json.Marshal(pt.KubeadmConfig("cp-1", pt.KubeadmConfigSpec()))
	if err != nil {
		t.Fatal(err)
	}
	req := &runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *pt.Machine("cp-1", "v1.35.4")},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *pt.Machine("cp-1", "v1.36.0")},
	}
	req.Current.InfrastructureMachine.Raw, req.Desired.InfrastructureMachine.Raw = infra(), infra()
	req.Current.BootstrapConfig.Raw, req.Desired.BootstrapConfig.Raw = boot, boot
	req.SetGroupVersionKind(runtimehooksv1.GroupVersion.WithKind("CanUpdateMachineRequest"))
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	gvh := runtimecatalog.GroupVersionHook{Group: runtimehooksv1.GroupVersion.Group, Version: runtimehooksv1.GroupVersion.Version,
		Hook: "CanUpdateMachine"}
	return runtimecatalog.GVHToPath(gvh, extension.HandlerCanUpdateMachine), body
}

func post(ctx context.Context, c *http.Client, url string, body io.Reader, length int64) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return 0, "", err
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestRealHookBodiesAreSmall measures the fixtures' requests against the body limit:
// the limit refuses nothing real.
func TestRealHookBodiesAreSmall(t *testing.T) {
	g := NewWithT(t)
	_, body := canUpdateMachineBody(t, 0)
	t.Logf("CanUpdateMachine request of the handler fixtures: %d bytes (limit %d)", len(body), extension.DefaultMaxRequestBodyBytes)
	g.Expect(len(body)).To(BeNumerically("<", 64<<10))
}

// TestOversizedBodyIsRefused: a body over the limit gets 413 with a message that
// names the limit, whether its length is declared or not; CAPI's server alone
// decoded bodies up to 20 MiB.
func TestOversizedBodyIsRefused(t *testing.T) {
	base, client := startServer(t)
	path, body := canUpdateMachineBody(t, 2<<20)
	for _, tt := range []struct {
		name   string
		length int64
	}{{"declared length", int64(len(body))}, {"chunked", -1}} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			// io.MultiReader hides the length from net/http, so -1 goes out chunked.
			code, msg, err := post(context.Background(), client, base+path, io.MultiReader(bytes.NewReader(body)), tt.length)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusRequestEntityTooLarge), msg)
			g.Expect(msg).To(ContainSubstring(fmt.Sprintf("request body exceeds the extension's limit of %d bytes", extension.DefaultMaxRequestBodyBytes)))
		})
	}
	// The server still answers after refusing.
	g := NewWithT(t)
	path, body = canUpdateMachineBody(t, 0)
	code, msg, err := post(context.Background(), client, base+path, bytes.NewReader(body), int64(len(body)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK), msg)
	g.Expect(msg).To(ContainSubstring(`"status":"Success"`))
}

// peakHeap runs f while sampling the heap and returns the highest HeapAlloc seen
// above the level before f.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > base && ms.HeapAlloc-base > peak.Load() {
				peak.Store(ms.HeapAlloc - base)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-sampled
	return peak.Load()
}

// TestConcurrentLargeRequestsStayBounded: many requests near the body limit at once
// are all answered, and the heap they take together stays within a bound the old
// server (20 MiB bodies, no in-flight budget) exceeds several times over; the
// extension's memory limit is 256 MiB.
func TestConcurrentLargeRequestsStayBounded(t *testing.T) {
	const requests = 6
	const heapBound = 160 << 20 // the old server: 406 MiB for the same six requests
	base, client := startServer(t)
	path, body := canUpdateMachineBody(t, 470<<10) // two sides: just under 1 MiB
	if len(body) > extension.DefaultMaxRequestBodyBytes {
		t.Fatalf("test body %d is over the limit", len(body))
	}
	var (
		mu    sync.Mutex
		codes = map[int]int{}
	)
	peak := peakHeap(func() {
		var wg sync.WaitGroup
		for range requests {
			wg.Go(func() {
				code, msg, err := post(context.Background(), client, base+path, bytes.NewReader(body), int64(len(body)))
				if err != nil {
					code = -1
					t.Error(err)
				} else if code != http.StatusOK {
					t.Errorf("status %d: %s", code, msg)
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			})
		}
		wg.Wait()
	})
	t.Logf("%d concurrent requests of %d bytes: peak heap growth %d MiB, answers %v", requests, len(body), peak>>20, codes)
	g := NewWithT(t)
	g.Expect(codes[http.StatusOK]).To(Equal(requests))
	g.Expect(peak).To(BeNumerically("<", uint64(heapBound)))
}

// TestRegisteredHandlersAreBounded: a handler registered on the hook server after
// it is built (how cmd/capi-inplace serves the single-node hold webhook) gets the
// same limits: an oversized AdmissionReview never reaches it.
func TestRegisteredHandlersAreBounded(t *testing.T) {
	g := NewWithT(t)
	m, err := extension.NewMetrics(prometheus.NewRegistry())
	g.Expect(err).NotTo(HaveOccurred())
	h, err := extension.NewHandlers(extension.Options{Policy: policy.Builtin(), Metrics: m})
	g.Expect(err).NotTo(HaveOccurred())
	srv, err := extension.NewServer(h, extension.ServerOptions{CertDir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	var got []int
	srv.Register("/hold", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, len(b))
		w.WriteHeader(http.StatusOK)
	}))
	serve := func(size int, declared bool) int {
		body := bytes.Repeat([]byte(" "), size)
		var rd io.Reader = bytes.NewReader(body)
		if !declared {
			rd = io.MultiReader(rd)
		}
		req := httptest.NewRequest(http.MethodPost, "/hold", rd)
		if !declared {
			req.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		srv.WebhookMux().ServeHTTP(rec, req)
		return rec.Code
	}
	g.Expect(serve(2<<20, true)).To(Equal(http.StatusRequestEntityTooLarge))
	g.Expect(serve(2<<20, false)).To(Equal(http.StatusRequestEntityTooLarge))
	g.Expect(serve(10<<10, true)).To(Equal(http.StatusOK))
	g.Expect(got).To(Equal([]int{10 << 10}), "only the small request reaches the handler, whole")
}

// TestBothPortsAtOnceStayBounded: maximum-size requests on the hook port and the
// admission port at once cost no more heap than on one port: the ports' budgets are
// bounded together (one port's and a quarter). With two independent budgets the peak
// was 171-185 MiB.
func TestBothPortsAtOnceStayBounded(t *testing.T) {
	const heapBound = 160 << 20
	base, client, admission := startServers(t, func(s webhook.Server) {
		s.Register("/decode", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				w.WriteHeader(http.StatusBadRequest)
			}
		}))
	})
	path, body := canUpdateMachineBody(t, 470<<10)
	var (
		mu    sync.Mutex
		codes = map[int]int{}
	)
	peak := peakHeap(func() {
		var wg sync.WaitGroup
		for range 3 {
			for _, url := range []string{base + path, admission + "/decode"} {
				wg.Go(func() {
					code, _, err := post(context.Background(), client, url, bytes.NewReader(body), int64(len(body)))
					if err != nil {
						code = -1
					}
					mu.Lock()
					codes[code]++
					mu.Unlock()
				})
			}
		}
		wg.Wait()
	})
	t.Logf("3 requests of %d bytes on each port at once: peak heap growth %d MiB, answers %v", len(body), peak>>20, codes)
	g := NewWithT(t)
	g.Expect(codes[http.StatusOK]).To(Equal(6))
	g.Expect(peak).To(BeNumerically("<", uint64(heapBound)))
}
