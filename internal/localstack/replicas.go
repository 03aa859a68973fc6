package localstack

import (
	"context"
	"errors"
	"fmt"
	"github.com/capi-inplace/capi-inplace/internal/freeport"
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"
)

// ExtensionReplicas are several processes of one runtime extension behind one
// loopback address, as replicas of a Deployment behind its Service: a Forwarder sends
// each connection to a live replica, and CAPI and the API server reach them only
// through it (the ExtensionConfig and any webhook registration name the Forwarder's
// port). Every replica serves the same certificate.
type ExtensionReplicas struct {
	Spec      ExtensionSpec
	Cert      servingCert
	Forwarder *Forwarder
	Replicas  []*Extension
}

// StartExtensionReplicas starts n processes of spec (process names <Name>-0 ...), each
// on its own port with one shared certificate, puts a Forwarder in front of them,
// registers the Forwarder's address under spec.Name with an ExtensionConfig and waits
// until CAPI has discovered it.
func (s *Stack) StartExtensionReplicas(ctx context.Context, spec ExtensionSpec, n int) (*ExtensionReplicas, error) {
	if n < 1 {
		return nil, errors.New("localstack: at least one replica")
	}
	cert, err := newServingCert(filepath.Join(s.TempRoot, "extensions", spec.Name))
	if err != nil {
		return nil, fmt.Errorf("certificate for extension %s: %w", spec.Name, err)
	}
	r := &ExtensionReplicas{Spec: spec, Cert: cert}
	var backends []string
	for i := range n {
		port, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		rs := spec
		rs.Name = fmt.Sprintf("%s-%d", spec.Name, i)
		e := &Extension{Spec: rs, Port: port, Cert: cert, stack: s}
		if err := e.Start(ctx); err != nil {
			return nil, err
		}
		r.Replicas = append(r.Replicas, e)
		backends = append(backends, fmt.Sprintf("127.0.0.1:%d", port))
	}
	if r.Forwarder, err = StartForwarder(backends); err != nil {
		return nil, err
	}
	s.OnStop(r.Forwarder.Close)
	if err := s.registerURL(ctx, r.URL(), cert.CAPEM, spec.Name, spec.NamespaceLabels, spec.Settings); err != nil {
		return nil, err
	}
	return r, nil
}

// URL is the replicas' one address (the Forwarder's).
func (r *ExtensionReplicas) URL() string {
	return fmt.Sprintf("https://%s/", r.Forwarder.Addr())
}

// Forwarder is a loopback TCP forwarder: each accepted connection goes to the first
// backend, in round-robin order from the last one used, that accepts a connection;
// bytes are copied both ways unchanged (TLS passes through). It counts the
// connections it handed to each backend and the bytes each backend answered (with
// keep-alive, one connection carries many requests: the bytes show who answered).
type Forwarder struct {
	ln       net.Listener
	backends []string

	mu     sync.Mutex
	next   int
	counts map[string]int
	bytes  map[string]int64
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartForwarder listens on a free loopback port and forwards to backends.
func StartForwarder(backends []string) (*Forwarder, error) {
	if len(backends) == 0 {
		return nil, errors.New("localstack: forwarder without backends")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("forwarder: listen: %w", err)
	}
	f := &Forwarder{ln: ln, backends: backends, counts: map[string]int{}, bytes: map[string]int64{}, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// Addr is host:port of the forwarder.
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

// Counts returns how many connections went to each backend so far.
func (f *Forwarder) Counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.counts))
	for k, v := range f.counts {
		out[k] = v
	}
	return out
}

// Answered returns how many bytes each backend sent back so far.
func (f *Forwarder) Answered() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int64, len(f.bytes))
	for k, v := range f.bytes {
		out[k] = v
	}
	return out
}

// Close stops accepting, closes every open connection and waits for the copies.
func (f *Forwarder) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	_ = f.ln.Close()
	f.wg.Wait()
}

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.forward(c)
		}()
	}
}

// dialLive dials the backends in round-robin order and returns the first that
// accepts, as a Service's endpoints leave out a dead pod.
func (f *Forwarder) dialLive() (net.Conn, string, error) {
	f.mu.Lock()
	start := f.next
	f.next = (f.next + 1) % len(f.backends)
	f.mu.Unlock()
	var errs []error
	for i := range f.backends {
		b := f.backends[(start+i)%len(f.backends)]
		c, err := net.DialTimeout("tcp", b, 2*time.Second)
		if err == nil {
			return c, b, nil
		}
		errs = append(errs, err)
	}
	return nil, "", fmt.Errorf("no live backend: %w", errors.Join(errs...))
}

func (f *Forwarder) forward(client net.Conn) {
	backend, addr, err := f.dialLive()
	if err != nil {
		_ = client.Close()
		return
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		_ = client.Close()
		_ = backend.Close()
		return
	}
	f.counts[addr]++
	f.conns[client] = struct{}{}
	f.conns[backend] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.conns, client)
		delete(f.conns, backend)
		f.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	pipe := func(dst net.Conn, src io.Reader) {
		_, _ = io.Copy(dst, src)
		// Half-close so the other direction can finish; a full close ends both.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(backend, client)
	go pipe(client, countingReader{backend, func(n int) {
		f.mu.Lock()
		f.bytes[addr] += int64(n)
		f.mu.Unlock()
	}})
	<-done
	<-done
	_ = client.Close()
	_ = backend.Close()
}

// countingReader reports the size of every read.
type countingReader struct {
	r   io.Reader
	add func(int)
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.add(n)
	}
	return n, err
}
