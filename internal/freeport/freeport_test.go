package freeport

import "testing"

// TestPortsNeverRepeat: ports handed out in one process are never handed out
// again, even once their listeners are closed (the kernel offers them again at
// once: a dozen repeats in 400 ports with a plain listen and close).
func TestPortsNeverRepeat(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		ports, err := Ports(2)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
}
