package lanekit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// ArtifactServer serves a lane's Kubernetes binaries over HTTP, as an operator's
// artifact mirror would; nodes verify content by digest.
type ArtifactServer struct {
	URL string
	srv *http.Server
}

// ServeArtifacts serves dir on addr (host:0 picks a port).
func ServeArtifacts(addr, dir string) (*ArtifactServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	s := &ArtifactServer{URL: "http://" + ln.Addr().String(), srv: &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *ArtifactServer) Close() { _ = s.srv.Close() }

// SHA256File returns the hex sha256 of a file.
func SHA256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
