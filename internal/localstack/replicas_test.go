package localstack

import (
	"io"
	"net"
	"testing"
)

// echoServer accepts connections and answers each with its name.
func echoServer(t *testing.T, name string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(name))
			_ = c.Close()
		}
	}()
	return ln
}

func ask(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestForwarderSendsEachConnectionToALiveBackend: round robin over live backends; a
// dead one (nothing listening) gets nothing and costs no connection.
func TestForwarderSendsEachConnectionToALiveBackend(t *testing.T) {
	a, b := echoServer(t, "a"), echoServer(t, "b")
	defer b.Close()
	f, err := StartForwarder([]string{a.Addr().String(), b.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]int{}
	for range 4 {
		seen[ask(t, f.Addr())]++
	}
	if seen["a"] != 2 || seen["b"] != 2 {
		t.Fatalf("both live: answers %v, want 2 each", seen)
	}
	_ = a.Close()
	for range 3 {
		if got := ask(t, f.Addr()); got != "b" {
			t.Fatalf("a is dead: answer %q, want b", got)
		}
	}
	counts := f.Counts()
	if counts[a.Addr().String()] != 2 || counts[b.Addr().String()] != 5 {
		t.Fatalf("counts %v, want a 2 and b 5", counts)
	}
	if answered := f.Answered(); answered[a.Addr().String()] != 2 || answered[b.Addr().String()] != 5 {
		t.Fatalf("bytes answered %v, want a 2 and b 5 (one byte per answer)", answered)
	}
}
