package connlimit_test

import (
	"io"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/connlimit"
)

// dialFrom connects to addr from the loopback address from (all of 127/8 is local
// on Linux), so one test can play several clients.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// served reports whether the server answers on c: it echoes one byte.
func served(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err := io.ReadFull(c, b)
	return err == nil
}

// TestOneClientCannotTakeEveryConnection: a client at its share gets its further
// connections closed, while another client is still served; a closed connection
// gives its slot back.
func TestOneClientCannotTakeEveryConnection(t *testing.T) {
	g := NewWithT(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	l := connlimit.Listen(inner, connlimit.Limits{Total: 8, PerClient: 3})
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	addr := inner.Addr().String()

	var hog []net.Conn
	for range 3 {
		c := dialFrom(t, "127.0.0.2", addr)
		g.Expect(served(c)).To(BeTrue())
		hog = append(hog, c)
	}
	g.Expect(served(dialFrom(t, "127.0.0.2", addr))).To(BeFalse(), "a fourth connection of the same client is closed")
	g.Expect(served(dialFrom(t, "127.0.0.1", addr))).To(BeTrue(), "another client is served")

	_ = hog[0].Close()
	g.Eventually(func() bool { return served(dialFrom(t, "127.0.0.2", addr)) }).Should(BeTrue(), "a closed connection frees its slot")
}

// TestCloseEndsAnAcceptWaitingForASlot: a server shutting down while every slot is
// taken is not stuck in Accept.
func TestCloseEndsAnAcceptWaitingForASlot(t *testing.T) {
	g := NewWithT(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	l := connlimit.Listen(inner, connlimit.Limits{Total: 1, PerClient: 1})
	dialFrom(t, "127.0.0.1", inner.Addr().String())
	c, err := l.Accept()
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = c.Close() }()
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	time.Sleep(50 * time.Millisecond)
	g.Expect(l.Close()).To(Succeed())
	g.Eventually(done).Should(Receive(MatchError(net.ErrClosed)))
}
