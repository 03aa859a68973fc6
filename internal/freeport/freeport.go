// Package freeport hands test harnesses loopback TCP ports to bind later.
//
// A port is free once the listener that found it closes, and the kernel offers a
// port just closed again at once: two callers that each close their listener
// before the other binds get the same port (seen in CI: an etcd member's peer
// port was another member's client port). Ports remembers every port it handed
// out in the process and never hands one out twice.
//
// Imports: standard library only.
package freeport

import (
	"fmt"
	"net"
	"sync"
)

var (
	mu        sync.Mutex
	handedOut = map[int]bool{}
)

// Ports returns n loopback ports free now and not returned before in this
// process.
func Ports(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	var (
		out []int
		ls  []net.Listener
	)
	// Held open until the end, so the kernel offers each port once.
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		port := l.Addr().(*net.TCPAddr).Port
		if handedOut[port] {
			continue
		}
		handedOut[port] = true
		out = append(out, port)
	}
	return out, nil
}

// Port returns one port as Ports does.
func Port() (int, error) {
	p, err := Ports(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}
