package agentcmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// getOn sends GET /healthz on c and returns the answer's status, or an error when
// the server closed the connection instead.
func getOn(c net.Conn, r *bufio.Reader) (int, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func dialFrom(t *testing.T, from, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// TestEndpointBoundsConnections: one client (a pod on the node) keeping
// connections open gets no more than its share, the kubelet's probe from another
// address is still answered, and kept-alive connections are closed once idle. Before,
// the health and metrics ports held any number of connections, idle ones forever.
func TestEndpointBoundsConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	stop, err := serveHealth(addr, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	type held struct {
		c net.Conn
		r *bufio.Reader
	}
	var hog []held
	for i := range endpointMaxConnsPerClient {
		c, r := dialFrom(t, "127.0.0.2", addr)
		if code, err := getOn(c, r); err != nil || code != http.StatusOK {
			t.Fatalf("connection %d of the client: %d %v", i, code, err)
		}
		hog = append(hog, held{c, r})
	}
	c, r := dialFrom(t, "127.0.0.2", addr)
	if code, err := getOn(c, r); err == nil {
		t.Errorf("a connection over the client's share was served (%d)", code)
	}
	c, r = dialFrom(t, "127.0.0.1", addr)
	if code, err := getOn(c, r); err != nil || code != http.StatusOK {
		t.Errorf("another client's probe: %d %v", code, err)
	}

	time.Sleep(endpointIdleTimeout + time.Second)
	for i, h := range hog {
		_ = h.c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := h.r.ReadByte(); err == nil || isTimeout(err) {
			t.Errorf("kept-alive connection %d still open after %s idle (%v)", i, endpointIdleTimeout, err)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
