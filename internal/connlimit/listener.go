package connlimit

import (
	"net"
	"sync"
)

// Limits bound the connections of one listener.
type Limits struct {
	// Total is the most connections open at once; more wait to be accepted.
	Total int
	// PerClient is the most connections open at once from one remote IP address;
	// more are closed when accepted. It must not exceed Total.
	PerClient int
}

// Listen wraps l so that it holds at most lim.Total connections and at most
// lim.PerClient from one remote IP address.
func Listen(l net.Listener, lim Limits) net.Listener {
	total := max(lim.Total, 1)
	return &listener{
		Listener:  l,
		slots:     make(chan struct{}, total),
		perClient: min(max(lim.PerClient, 1), total),
		open:      map[string]int{},
		done:      make(chan struct{}),
	}
}

type listener struct {
	net.Listener
	slots     chan struct{}
	perClient int
	done      chan struct{} // closed by Close: an Accept waiting for a slot returns
	closeOnce sync.Once

	mu   sync.Mutex
	open map[string]int
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		client := ClientOf(c.RemoteAddr())
		if !l.take(client) {
			_ = c.Close()
			<-l.slots
			continue
		}
		return &conn{Conn: c, release: sync.OnceFunc(func() { l.give(client); <-l.slots })}, nil
	}
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *listener) take(client string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[client] >= l.perClient {
		return false
	}
	l.open[client]++
	return true
}

func (l *listener) give(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[client]--; l.open[client] <= 0 {
		delete(l.open, client)
	}
}

type conn struct {
	net.Conn
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// ClientOf names the client of a connection or request by its remote IP address
// (without the port: each new connection of one client has another port).
func ClientOf(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	return ClientOfAddress(addr.String())
}

// ClientOfAddress is ClientOf for an address in host:port form, such as
// http.Request.RemoteAddr.
func ClientOfAddress(hostport string) string {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	return host
}
