package helperbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLocate(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if p, err := Locate("anything", "/opt/helper"); err != nil || p != "/opt/helper" {
		t.Errorf("configured: %q, %v", p, err)
	}
	// The test binary's own name is beside it.
	if p, err := Locate(filepath.Base(exe), ""); err != nil || p != exe {
		t.Errorf("beside the executable: %q, %v; want %s", p, err, exe)
	}
	dir := t.TempDir()
	onPath := filepath.Join(dir, "capi-inplace-helperbin-test")
	if err := os.WriteFile(onPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if p, err := Locate(filepath.Base(onPath), ""); err != nil || p != onPath {
		t.Errorf("on $PATH: %q, %v; want %s", p, err, onPath)
	}
	if _, err := Locate("capi-inplace-nowhere", ""); err == nil || !strings.Contains(err.Error(), "helper capi-inplace-nowhere: not beside the agent's executable nor on $PATH") {
		t.Errorf("missing: %v", err)
	}
}

func TestTail(t *testing.T) {
	tail := &Tail{Limit: 4}
	for _, s := range []string{"ab", "cdef", "g"} {
		if n, err := tail.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := tail.String(); got != "defg" {
		t.Errorf("tail %q, want defg", got)
	}
}
