package localstack

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/capi-inplace/capi-inplace/internal/extension/extensiontest"
)

// servingCert is a self-made CA and a serving certificate it signed for 127.0.0.1
// and localhost, written as ca.crt, tls.crt and tls.key into Dir.
type servingCert struct {
	Dir   string
	CAPEM []byte
}

// newServingCert creates dir and writes a fresh CA (ca.crt) and a serving certificate
// it signed (tls.crt, tls.key) into it: the same certificates the extension's own
// tests use, plus the CA as a file for the manager flags that want one.
func newServingCert(dir string) (servingCert, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return servingCert{}, fmt.Errorf("create cert dir: %w", err)
	}
	caPEM, err := extensiontest.WriteSelfSignedCert(dir)
	if err != nil {
		return servingCert{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), caPEM, 0o600); err != nil {
		return servingCert{}, fmt.Errorf("write ca.crt: %w", err)
	}
	return servingCert{Dir: dir, CAPEM: caPEM}, nil
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. The port is released
// before the caller binds it; the window is small and the stack runs alone.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
