package artifact

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestFetchDeclaredSize: an artifact's declared size bounds what a source may
// send, chunked or not. A body longer than declared is cut one byte past the
// size (the rest never reaches the disk) and a shorter one fails at its end,
// both as ErrSizeMismatch, a permanent cause like a digest mismatch. Before,
// the plan had no size: a chunked body was read up to 4 GiB before its digest
// failed.
func TestFetchDeclaredSize(t *testing.T) {
	artifactBody := bytes.Repeat([]byte("rauc bundle "), 10000)
	extra := bytes.Repeat([]byte{0x5a}, 64<<20)
	var sent, finished atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		switch r.URL.Path {
		case "/exact", "/chunked":
			body = artifactBody
		case "/longer":
			body = append(bytes.Clone(artifactBody), extra...)
		case "/shorter":
			body = artifactBody[:len(artifactBody)-100]
		case "/announces-more":
			w.Header().Set("Content-Length", strconv.Itoa(len(artifactBody)+1))
			_, _ = w.Write(append(bytes.Clone(artifactBody), 'x'))
			return
		}
		if r.URL.Path == "/exact" {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			_, _ = w.Write(body)
			return
		}
		// Chunked: no length announced, the declared size is all the agent knows.
		sent.Store(0)
		for len(body) > 0 {
			n := min(len(body), 64<<10)
			if _, err := w.Write(body[:n]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			sent.Add(int64(n))
			body = body[n:]
		}
		finished.Add(1)
	}))
	defer srv.Close()
	item := func(p string) protocol.StageItem {
		return protocol.StageItem{Name: protocol.StageOSImage, Artifact: protocol.BinaryArtifact{
			URL: srv.URL + p, Digest: digestOf(artifactBody), Size: int64(len(artifactBody))}}
	}
	for _, tt := range []struct {
		path    string
		wantErr error
		text    string
	}{
		{path: "/exact"},
		{path: "/chunked"},
		{path: "/longer", wantErr: ErrSizeMismatch, text: "sent more than the 120000 bytes the plan declares"},
		{path: "/shorter", wantErr: ErrSizeMismatch, text: "sent 119900 bytes, the plan declares 120000"},
		{path: "/announces-more", wantErr: ErrSizeMismatch, text: "announces 120001 bytes, the plan declares 120000"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			g := NewWithT(t)
			s := &Store{Root: t.TempDir()}
			var most atomic.Int64
			_, err := s.Fetch(context.Background(), item(tt.path), func(n, size int64) {
				most.Store(n)
				g.Expect(size).To(Equal(int64(len(artifactBody))), "progress counts against the declared size")
			})
			if tt.wantErr == nil {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(s.Has(digestOf(artifactBody))).To(BeTrue())
				g.Expect(most.Load()).To(Equal(int64(len(artifactBody))))
				return
			}
			g.Expect(err).To(MatchError(tt.wantErr))
			g.Expect(err.Error()).To(ContainSubstring(tt.text))
			g.Expect(storeDirEntries(t, s)).To(BeEmpty(), "no partial file stays")
		})
	}

	// The longer body was cut: the server could not send its 64 MiB of extra.
	g := NewWithT(t)
	before := finished.Load()
	_, err := (&Store{Root: t.TempDir()}).Fetch(context.Background(), item("/longer"), nil)
	g.Expect(err).To(MatchError(ErrSizeMismatch))
	g.Eventually(sent.Load).WithTimeout(5*time.Second).Should(BeNumerically("<", len(artifactBody)+len(extra)/2), "the download stopped one byte past the declared size")
	g.Consistently(finished.Load).WithTimeout(500*time.Millisecond).Should(Equal(before), "the server never sent the whole body")

	// Declared over the store's bound: refused before a byte is read.
	_, err = (&Store{Root: t.TempDir(), MaxBytes: 1024}).Fetch(context.Background(), item("/exact"), nil)
	g.Expect(err).To(MatchError(ErrTooLarge))
}

// redirector answers every path under /to/<n>/ with a 302 to target(n).
func redirector(target func(path string) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target(r.URL.Path), http.StatusFound)
	})
}

// TestFetchRedirects: a source's redirect is followed to https on any host (a
// CDN), never from https to plain http, to plain http on another host only when
// the source host lists it, and at most MaxRedirects times. Before, every
// redirect was followed: an https source sent the agent to plain http.
func TestFetchRedirects(t *testing.T) {
	bundle := bytes.Repeat([]byte("bundle "), 1000)
	files := &fileServer{files: map[string][]byte{"/bundle": bundle}}
	plain := httptest.NewServer(files)
	defer plain.Close()
	tlsFiles := httptest.NewTLSServer(files)
	defer tlsFiles.Close()
	// Each redirecting server is its own host (another port).
	tlsToPlain := httptest.NewTLSServer(redirector(func(string) string { return plain.URL + "/bundle?X-Signature=s3cret" }))
	defer tlsToPlain.Close()
	tlsToTLS := httptest.NewTLSServer(redirector(func(string) string { return tlsFiles.URL + "/bundle" }))
	defer tlsToTLS.Close()
	plainToPlain := httptest.NewServer(redirector(func(string) string { return plain.URL + "/bundle" }))
	defer plainToPlain.Close()
	plainToTLS := httptest.NewServer(redirector(func(string) string { return tlsFiles.URL + "/bundle" }))
	defer plainToTLS.Close()
	var loop *httptest.Server
	loop = httptest.NewTLSServer(redirector(func(p string) string {
		n, _ := strconv.Atoi(strings.TrimPrefix(p, "/"))
		return loop.URL + "/" + strconv.Itoa(n+1)
	}))
	defer loop.Close()
	hostOf := func(u string) string { return strings.TrimPrefix(strings.TrimPrefix(u, "https://"), "http://") }

	for _, tt := range []struct {
		name    string
		url     string
		hosts   []protocol.SourceHost
		wantErr string
	}{
		{name: "https to https on another host (a CDN)", url: tlsToTLS.URL + "/bundle"},
		{name: "plain http to https on another host", url: plainToTLS.URL + "/bundle"},
		{name: "https to plain http", url: tlsToPlain.URL + "/bundle", wantErr: "a source reached over TLS is never followed to plain http"},
		{name: "https to plain http, the host listed", url: tlsToPlain.URL + "/bundle",
			hosts:   []protocol.SourceHost{{Host: hostOf(tlsToPlain.URL), RedirectHosts: []string{hostOf(plain.URL)}}},
			wantErr: "never followed to plain http"},
		{name: "plain http to another plain http host", url: plainToPlain.URL + "/bundle", wantErr: "list " + hostOf(plain.URL) + " in the redirectHosts"},
		{name: "plain http to a listed plain http host", url: plainToPlain.URL + "/bundle",
			hosts: []protocol.SourceHost{{Host: hostOf(plainToPlain.URL), RedirectHosts: []string{hostOf(plain.URL)}}}},
		{name: "a redirect loop", url: loop.URL + "/0", wantErr: "more than 5 redirects"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := &Store{Root: t.TempDir(), Client: tlsFiles.Client()}
			it := protocol.StageItem{Name: protocol.StageOSImage, Artifact: protocol.BinaryArtifact{URL: tt.url, Digest: digestOf(bundle), SourceHosts: tt.hosts}}
			g.Expect(it.Artifact.Validate()).To(Succeed())
			_, err := s.Fetch(context.Background(), it, nil)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(s.Has(digestOf(bundle))).To(BeTrue())
				return
			}
			g.Expect(err).To(MatchError(ErrRedirectRefused))
			g.Expect(err).To(MatchError(ErrUnreachable), "another source may still serve it")
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
			g.Expect(err.Error()).NotTo(ContainSubstring("s3cret"), "a signed URL's query is not quoted")
			g.Expect(storeDirEntries(t, s)).To(BeEmpty())
		})
	}

	// A registry over TLS whose blob GET redirects to plain http (as a registry
	// redirects to its storage): go-containerregistry follows redirects itself,
	// the store's transport refuses the plain request.
	g := NewWithT(t)
	regHandler := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	reg := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			http.Redirect(w, r, plain.URL+"/bundle", http.StatusTemporaryRedirect)
			return
		}
		regHandler.ServeHTTP(w, r)
	}))
	defer reg.Close()
	regHost := strings.TrimPrefix(reg.URL, "https://")
	repo, err := name.NewRepository(regHost + "/os/bundle")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.WriteLayer(repo, static.NewLayer(bundle, types.MediaType("application/vnd.rauc.bundle")), remote.WithTransport(reg.Client().Transport))).To(Succeed())
	it := protocol.StageItem{Name: protocol.StageOSImage, Artifact: protocol.BinaryArtifact{URL: "oci://" + regHost + "/os/bundle", Digest: digestOf(bundle)}}
	_, err = (&Store{Root: t.TempDir(), Client: reg.Client()}).Fetch(context.Background(), it, nil)
	g.Expect(err).To(MatchError(ErrRedirectRefused))
	g.Expect(err.Error()).To(ContainSubstring("never followed to plain http"))

	// A registry whose blob GET goes round n redirects on its own host before the
	// blob: MaxRedirects are followed, one more is refused.
	for _, n := range []int{MaxRedirects, MaxRedirects + 1} {
		var chain *httptest.Server
		chain = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				hop, _ := strconv.Atoi(r.URL.Query().Get("hop"))
				if hop < n {
					http.Redirect(w, r, fmt.Sprintf("%s%s?hop=%d", chain.URL, r.URL.Path, hop+1), http.StatusTemporaryRedirect)
					return
				}
			}
			regHandler.ServeHTTP(w, r)
		}))
		host := strings.TrimPrefix(chain.URL, "https://")
		repo, err := name.NewRepository(host + "/os/bundle")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(remote.WriteLayer(repo, static.NewLayer(bundle, types.MediaType("application/vnd.rauc.bundle")), remote.WithTransport(chain.Client().Transport))).To(Succeed())
		it := protocol.StageItem{Name: protocol.StageOSImage, Artifact: protocol.BinaryArtifact{URL: "oci://" + host + "/os/bundle", Digest: digestOf(bundle)}}
		s := &Store{Root: t.TempDir(), Client: chain.Client()}
		_, err = s.Fetch(context.Background(), it, nil)
		if n <= MaxRedirects {
			g.Expect(err).NotTo(HaveOccurred(), "%d redirects", n)
			g.Expect(s.Has(digestOf(bundle))).To(BeTrue())
		} else {
			g.Expect(err).To(MatchError(ErrRedirectRefused), "%d redirects", n)
			g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("more than %d redirects", MaxRedirects)))
			g.Expect(storeDirEntries(t, s)).To(BeEmpty())
		}
		chain.Close()
	}
}

// testCA returns a new self-signed CA certificate in PEM.
func testCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestFetchSourceCABundle: a source host's CA bundle is the only trust for that
// host, over https and to an OCI registry over TLS: the right CA is accepted
// without the server's CA anywhere else, a wrong one refuses the server even
// when the store's own client trusts it. Before, the plan had no CA bundle: a
// private CA meant plain http.
func TestFetchSourceCABundle(t *testing.T) {
	g := NewWithT(t)
	bundle := bytes.Repeat([]byte("bundle "), 1000)
	srv := httptest.NewTLSServer(&fileServer{files: map[string][]byte{"/bundle": bundle}})
	defer srv.Close()
	reg := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	regHost := strings.TrimPrefix(reg.URL, "https://")
	exe := testExecutable(t)
	repo, err := name.NewRepository(regHost + "/k8s/kubeadm")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.WriteLayer(repo, static.NewLayer(exe, types.MediaType("application/vnd.k8s.binary")), remote.WithTransport(reg.Client().Transport))).To(Succeed())

	serverCA := func(s *httptest.Server) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}))
	}
	httpsItem := func(ca string) protocol.StageItem {
		return protocol.StageItem{Name: protocol.StageOSImage, Artifact: protocol.BinaryArtifact{URL: srv.URL + "/bundle", Digest: digestOf(bundle),
			SourceHosts: []protocol.SourceHost{{Host: strings.TrimPrefix(srv.URL, "https://"), CABundle: ca}}}}
	}
	ociItem := func(ca string) protocol.StageItem {
		return protocol.StageItem{Name: protocol.StageKubeadm, Executable: true, Artifact: protocol.BinaryArtifact{URL: "oci://" + regHost + "/k8s/kubeadm", Digest: digestOf(exe),
			SourceHosts: []protocol.SourceHost{{Host: regHost, CABundle: ca}}}}
	}
	for _, tt := range []struct {
		name   string
		item   protocol.StageItem
		client *http.Client
		ok     bool
	}{
		{name: "https, the right CA, system roots otherwise", item: httpsItem(serverCA(srv)), ok: true},
		{name: "https, no CA bundle, system roots", item: httpsItem("")},
		{name: "https, a wrong CA though the store's client trusts the server", item: httpsItem(testCA(t)), client: srv.Client()},
		{name: "registry, the right CA", item: ociItem(serverCA(reg)), ok: true},
		{name: "registry, a wrong CA though the store's client trusts it", item: ociItem(testCA(t)), client: reg.Client()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tt.item.Artifact.Validate()).To(Succeed())
			s := &Store{Root: t.TempDir(), Client: tt.client}
			_, err := s.Fetch(context.Background(), tt.item, nil)
			if tt.ok {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(s.Has(tt.item.Artifact.Digest)).To(BeTrue())
				return
			}
			g.Expect(err).To(MatchError(ErrUnreachable))
			g.Expect(err.Error()).To(ContainSubstring("certificate"))
			g.Expect(storeDirEntries(t, s)).To(BeEmpty())
		})
	}
}
