package kube

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
)

// APIServerManifest is kubeadm's kube-apiserver static pod manifest.
const APIServerManifest = ManifestsDir + "/kube-apiserver.yaml"

// APIServerStopTimeout bounds the wait for the kubelet to stop the kube-apiserver
// static pod (kubeadm's has the default 30 s grace period).
const APIServerStopTimeout = 2 * time.Minute

// apiServerParked is the kube-apiserver manifest's name in the attempt directory
// while an etcd restore keeps the API server stopped.
const apiServerParked = "kube-apiserver.yaml"

// stopAPIServer stops the node's kube-apiserver before its etcd is restored, as
// Kubernetes documents for an etcd restore (stop every API server, restore, start
// them): a running API server keeps serving from its watch cache what the restore
// takes away, and on the real-node lane the upgraded one held its port across the
// restore while the restored one crash-looped. It moves the manifest out of the
// kubelet's manifest directory to parked (in the attempt directory) and waits until
// nothing listens on the API server's port. A node without the manifest (none was
// parked either) has nothing to stop. Repeatable: a manifest parked by an earlier
// run is waited for the same way.
func (h *Host) stopAPIServer(ctx context.Context, parked string) error {
	if live, err := h.readHostFile(APIServerManifest); err == nil {
		if err := atomicfile.Write(parked, live.Data, 0o600); err != nil {
			return fmt.Errorf("stop the API server: park its manifest: %w", err)
		}
		if err := h.removeHostFile(APIServerManifest); err != nil {
			return fmt.Errorf("stop the API server: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stop the API server: %w", err)
	}
	raw, err := os.ReadFile(parked)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop the API server: read its parked manifest: %w", err)
	}
	addr, err := apiServerAddress(raw)
	if err != nil {
		return fmt.Errorf("stop the API server: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, APIServerStopTimeout)
	defer cancel()
	for listening(ctx, addr) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stop the API server: it still serves %s %s after its manifest was moved away", addr, APIServerStopTimeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// startAPIServer puts the parked kube-apiserver manifest back when the manifest
// directory has none: the kubelet then starts the API server (on the restored
// etcd). Nothing parked, nothing to do.
func (h *Host) startAPIServer(parked string) error {
	if _, err := h.readHostFile(APIServerManifest); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	manifest, err := os.ReadFile(parked)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("start the API server: read its parked manifest: %w", err)
	}
	if err := h.writeHostFile(APIServerManifest, manifest, 0o600, -1, -1); err != nil {
		return fmt.Errorf("start the API server: put its manifest back: %w", err)
	}
	return nil
}

// listening reports whether something accepts TCP connections on addr (the agent
// runs in the host's network namespace).
func listening(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// apiServerAddress is where the kube-apiserver of a static pod manifest listens,
// as the node reaches it: --bind-address (loopback when unset or unspecified) and
// --secure-port (6443 when unset).
func apiServerAddress(raw []byte) (string, error) {
	var pod struct {
		Spec struct {
			Containers []struct {
				Name    string   `json:"name"`
				Command []string `json:"command"`
				Args    []string `json:"args"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &pod); err != nil {
		return "", fmt.Errorf("kube-apiserver manifest: %w", err)
	}
	host, port := "127.0.0.1", "6443"
	found := false
	for _, c := range pod.Spec.Containers {
		if c.Name != "kube-apiserver" {
			continue
		}
		found = true
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !ok || !strings.HasPrefix(a, "--") {
				continue
			}
			switch name {
			case "secure-port":
				port = value
			case "bind-address":
				if ip := net.ParseIP(value); ip != nil && !ip.IsUnspecified() {
					host = value
				}
			}
		}
	}
	if !found {
		return "", errors.New("kube-apiserver manifest: no container named kube-apiserver")
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("kube-apiserver manifest: --secure-port=%s is not a port", port)
	}
	return net.JoinHostPort(host, port), nil
}

// APIServerProbeTimeout bounds one readiness probe of the node's own API server.
const APIServerProbeTimeout = 5 * time.Second

// The client certificate the readiness probe presents: kubeadm's API server
// client to the kubelets, on every kubeadm control plane. /readyz is open to
// any authenticated client (system:public-info-viewer), and to anonymous ones
// unless --anonymous-auth=false, which hardened clusters set.
const (
	probeClientCert = "/etc/kubernetes/pki/apiserver-kubelet-client.crt"
	probeClientKey  = "/etc/kubernetes/pki/apiserver-kubelet-client.key"
)

// APIServerReady asks the node's own kube-apiserver whether it is ready: GET
// /readyz over TLS at the address its live manifest gives (--bind-address or
// loopback, --secure-port or 6443), within APIServerProbeTimeout. nil means
// ready; the error says why not (no manifest, nothing listening, /readyz's
// answer).
//
// The probe only tells the rescue pod whether to leave the node to the agent,
// and its mistakes are not alike: a wrong "not ready" rolls back an update
// whose API server serves, a wrong "ready" only leaves the node as it is today
// without the rescue (the coordinator's deadline then fails the update). So it
// leans to "ready": the server's certificate is not verified (after an upgrade
// it may name neither the loopback address nor what the probe could guess),
// and an answer refusing the probe's identity (401, 403) counts as ready, since
// a server that authenticates requests started and serves. It sends no
// credential a server could replay: a TLS client certificate proves its key
// over this connection only.
func (h *Host) APIServerReady(ctx context.Context) error {
	live, err := h.readHostFile(APIServerManifest)
	if err != nil {
		return fmt.Errorf("read the API server's manifest: %w", err)
	}
	addr, err := apiServerAddress(live.Data)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, APIServerProbeTimeout)
	defer cancel()
	// The server's certificate is not verified: see above.
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
	if cert, err := h.probeCertificate(); err == nil {
		cfg.Certificates = []tls.Certificate{cert}
	}
	client := &http.Client{
		// No proxy from the environment: the server is on this node.
		Transport:     &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	url := "https://" + addr + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	switch resp.StatusCode {
	case http.StatusOK, http.StatusUnauthorized, http.StatusForbidden:
		return nil
	}
	return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
}

// probeCertificate loads the client certificate the readiness probe presents.
func (h *Host) probeCertificate() (tls.Certificate, error) {
	cert, err := h.ReadFile(probeClientCert)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := h.ReadFile(probeClientKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(cert, key)
}
