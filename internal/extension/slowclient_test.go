package extension_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/capi-inplace/capi-inplace/internal/extension"
)

// slowRequest opens a TLS connection to base from the loopback address from (all
// of 127/8 is local, so one test plays several clients) and posts to path a body
// that never completes: chunked, one byte every 300 ms (declared < 0), or a
// declared length of which all but the last byte is sent at once. It reports on
// the returned channel how long the connection lasted until the server answered or
// closed it.
func slowRequest(t *testing.T, client *http.Client, from, base, path string, declared int64) <-chan time.Duration {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan time.Duration, 1)
	start := time.Now()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", u.Host, client.Transport.(*http.Transport).TLSClientConfig.Clone())
	if err != nil {
		// Refused at accept (over the client's share of connections).
		ended <- time.Since(start)
		return ended
	}
	t.Cleanup(func() { _ = conn.Close() })
	go func() {
		defer func() { ended <- time.Since(start) }()
		go func() { _, _ = io.Copy(io.Discard, conn) }()
		head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n", path, u.Host)
		if declared < 0 {
			head += "Transfer-Encoding: chunked\r\n\r\n"
		} else {
			head += fmt.Sprintf("Content-Length: %d\r\n\r\n", declared)
		}
		if _, err := conn.Write([]byte(head)); err != nil {
			return
		}
		if declared >= 0 {
			if _, err := conn.Write(bytes.Repeat([]byte(" "), int(declared-1))); err != nil {
				return
			}
			// Hold the connection until the server closes it.
			for {
				if _, err := conn.Write(nil); err != nil {
					return
				}
				_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				if _, err := conn.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
					return
				}
			}
		}
		for {
			if _, err := conn.Write([]byte("1\r\n \r\n")); err != nil {
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()
	return ended
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// hookLatency calls CanUpdateMachine on base (from 127.0.0.1) and returns how long
// the answer took; it fails the test unless the answer is a 200 with Success.
func hookLatency(t *testing.T, client *http.Client, base string) time.Duration {
	t.Helper()
	path, body := canUpdateMachineBody(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	code, msg, err := post(ctx, client, base+path, bytes.NewReader(body), int64(len(body)))
	took := time.Since(start)
	g := NewWithT(t)
	g.Expect(err).NotTo(HaveOccurred(), "hook call after %s", took)
	g.Expect(code).To(Equal(http.StatusOK), msg)
	g.Expect(msg).To(ContainSubstring(`"status":"Success"`))
	return took
}

// TestSlowClientsDoNotDelayHookCalls: one client (one address) holding more
// connections than its share, each sending a body it never finishes (chunked, one
// byte at a time, or an announced megabyte short of its last byte), does not delay
// another client's hook call on the same port, and each of its requests ends within
// the body deadline. Before per-client limits, a body of unknown length reserved the
// whole in-flight budget for 10 s and every hook call waited behind it.
func TestSlowClientsDoNotDelayHookCalls(t *testing.T) {
	const latencyBound = 2 * time.Second // about 1 ms unloaded; the previous code held it 10 s
	base, client := startServer(t)
	path, _ := canUpdateMachineBody(t, 0)
	var slow []<-chan time.Duration
	for i := range 70 {
		declared := int64(-1)
		if i%10 == 0 {
			declared = extension.DefaultMaxRequestBodyBytes
		}
		slow = append(slow, slowRequest(t, client, "127.0.0.2", base, path, declared))
	}
	time.Sleep(500 * time.Millisecond)
	for range 5 {
		took := hookLatency(t, client, base)
		t.Logf("hook call answered in %s beside 70 slow requests", took)
		if took > latencyBound {
			t.Errorf("hook call took %s beside slow requests of another client, over %s", took, latencyBound)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var wg sync.WaitGroup
	for _, ended := range slow {
		wg.Go(func() {
			select {
			case d := <-ended:
				if d > 7*time.Second {
					t.Errorf("a slow request lasted %s, over the 5 s body deadline", d)
				}
			case <-time.After(10 * time.Second):
				t.Error("a slow request was never cut off")
			}
		})
	}
	wg.Wait()
}

// TestAdmissionPortHasItsOwnBudget: a request that holds the admission port's whole
// in-flight budget (a megabyte body whose handler has not returned) does not delay a
// hook call on the hook port: it fits in the quarter of the process's budget the
// admission port cannot take. Before, both ports shared one budget.
func TestAdmissionPortHasItsOwnBudget(t *testing.T) {
	g := NewWithT(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	base, client, admission := startServers(t, func(s webhook.Server) {
		s.Register("/slow", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			once.Do(func() { close(entered) })
			<-release
		}))
	})
	t.Cleanup(func() { close(release) })
	body := bytes.Repeat([]byte(" "), extension.DefaultMaxRequestBodyBytes-1)
	go func() {
		_, _, _ = post(context.Background(), client, admission+"/slow", bytes.NewReader(body), int64(len(body)))
	}()
	g.Eventually(entered).Should(BeClosed())
	took := hookLatency(t, client, base)
	t.Logf("hook call answered in %s while the admission port's budget is held", took)
	g.Expect(took).To(BeNumerically("<", 2*time.Second))
}
