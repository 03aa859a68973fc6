package artifact

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// basicAuthRegistry is a real registry (go-containerregistry's) that answers only
// requests with the one Basic login, as a site's private registry does, and
// remembers the Authorization headers it saw.
type basicAuthRegistry struct {
	next       http.Handler
	user, pass string
	mu         sync.Mutex
	seen       []string
}

func (b *basicAuthRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.seen = append(b.seen, r.Header.Get("Authorization"))
	b.mu.Unlock()
	if u, p, ok := r.BasicAuth(); !ok || u != b.user || p != b.pass {
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
		return
	}
	b.next.ServeHTTP(w, r)
}

// seenLogins returns the Authorization headers the registry saw, and forgets them.
func (b *basicAuthRegistry) seenLogins() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := b.seen
	b.seen = nil
	return seen
}

// tlsRegistry serves reg over TLS on loopback; it returns the server, its
// host[:port] and the SourceHost that trusts its certificate.
func tlsRegistry(t *testing.T, reg http.Handler) (*httptest.Server, string, protocol.SourceHost) {
	t.Helper()
	srv := httptest.NewTLSServer(reg)
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "https://")
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return srv, host, protocol.SourceHost{Host: host, CABundle: ca}
}

// TestFetchOCIWithCredentials: a registry over TLS that requires a login serves
// the blob only with the plan's credential for its host; without one (or with one for
// another registry) the fetch fails as unreachable with the registry's 401, and
// the error never carries the password.
func TestFetchOCIWithCredentials(t *testing.T) {
	g := NewWithT(t)
	const user, pass = "site-a", "s3cret-registry-pass"
	reg := &basicAuthRegistry{next: registry.New(registry.Logger(log.New(io.Discard, "", 0))), user: user, pass: pass}
	srv, host, trust := tlsRegistry(t, reg)
	exe := testExecutable(t)
	repo, err := name.NewRepository(host + "/k8s/kubeadm")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.WriteLayer(repo, static.NewLayer(exe, types.MediaType("application/vnd.k8s.binary")),
		remote.WithAuth(&authn.Basic{Username: user, Password: pass}), remote.WithTransport(srv.Client().Transport))).To(Succeed())

	item := protocol.StageItem{Name: protocol.StageKubeadm, Executable: true,
		Artifact: protocol.BinaryArtifact{URL: "oci://" + host + "/k8s/kubeadm", Digest: digestOf(exe), SourceHosts: []protocol.SourceHost{trust}}}
	for _, tt := range []struct {
		name  string
		creds []protocol.RegistryCredential
	}{
		{"anonymous", nil},
		{"a credential for another registry", []protocol.RegistryCredential{{Registry: "registry.example.com", Username: user, Password: pass}}},
		{"a wrong password", []protocol.RegistryCredential{{Registry: host, Username: user, Password: "wrong"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			it := item
			it.Credentials = tt.creds
			s := &Store{Root: t.TempDir()}
			_, err := s.Fetch(context.Background(), it, nil)
			g.Expect(err).To(MatchError(ErrUnreachable))
			g.Expect(err.Error()).To(ContainSubstring("401"))
			g.Expect(err.Error()).NotTo(ContainSubstring(pass))
			g.Expect(storeDirEntries(t, s)).To(BeEmpty())
		})
	}

	it := item
	it.Credentials = []protocol.RegistryCredential{{Registry: "other.example.com", Username: "x", Password: "y"}, {Registry: host, Username: user, Password: pass}}
	s := &Store{Root: t.TempDir()}
	p, err := s.Fetch(context.Background(), it, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Has(item.Artifact.Digest)).To(BeTrue(), "staged at %s", p)

	// Neither %v nor %#v of an item prints the password.
	g.Expect(fmt.Sprintf("%v %+v %#v", it, it, it.Credentials)).NotTo(ContainSubstring(pass))
	var buf bytes.Buffer
	fmt.Fprint(&buf, it.Credentials[1])
	g.Expect(buf.String()).To(Equal("credential for " + host + " (redacted)"))
}

// TestFetchOCINeverSendsLoginInClear: a source that would carry the plan's
// login for its registry over plain HTTP (oci+http) is refused before any
// request, with protocol.ErrRegistryLoginInClear, so not one Authorization
// header reaches that registry; the next source is still tried, and an
// oci+http source of a registry the plan has no login for still serves.
func TestFetchOCINeverSendsLoginInClear(t *testing.T) {
	g := NewWithT(t)
	const user, pass = "site-a", "s3cret-registry-pass"
	quiet := registry.Logger(log.New(io.Discard, "", 0))
	exe := testExecutable(t)

	plain := &basicAuthRegistry{next: registry.New(quiet), user: user, pass: pass}
	plainSrv := httptest.NewServer(plain)
	defer plainSrv.Close()
	plainHost := strings.TrimPrefix(plainSrv.URL, "http://")
	repo, err := name.NewRepository(plainHost+"/k8s/kubeadm", name.Insecure)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.WriteLayer(repo, static.NewLayer(exe, types.MediaType("application/vnd.k8s.binary")),
		remote.WithAuth(&authn.Basic{Username: user, Password: pass}))).To(Succeed())
	plain.seenLogins()

	secure := &basicAuthRegistry{next: registry.New(quiet), user: user, pass: pass}
	secureSrv, secureHost, trust := tlsRegistry(t, secure)
	repo, err = name.NewRepository(secureHost + "/k8s/kubeadm")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.WriteLayer(repo, static.NewLayer(exe, types.MediaType("application/vnd.k8s.binary")),
		remote.WithAuth(&authn.Basic{Username: user, Password: pass}), remote.WithTransport(secureSrv.Client().Transport))).To(Succeed())

	anonymous := httptest.NewServer(registry.New(quiet))
	defer anonymous.Close()
	anonymousHost := strings.TrimPrefix(anonymous.URL, "http://")
	repo, err = name.NewRepository(anonymousHost+"/k8s/kubeadm", name.Insecure)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.WriteLayer(repo, static.NewLayer(exe, types.MediaType("application/vnd.k8s.binary")))).To(Succeed())

	logins := []protocol.RegistryCredential{{Registry: plainHost, Username: user, Password: pass}, {Registry: secureHost, Username: user, Password: pass}}
	kubeadm := func(url string, mirrors ...string) protocol.StageItem {
		it := protocol.StageItem{Name: protocol.StageKubeadm, Executable: true, Credentials: logins,
			Artifact: protocol.BinaryArtifact{URL: url, Mirrors: mirrors, Digest: digestOf(exe)}}
		if strings.Contains(url, secureHost) {
			it.Artifact.SourceHosts = []protocol.SourceHost{trust}
		}
		return it
	}

	t.Run("the only source is in clear", func(t *testing.T) {
		g := NewWithT(t)
		s := &Store{Root: t.TempDir()}
		_, err := s.Fetch(context.Background(), kubeadm("oci+http://"+plainHost+"/k8s/kubeadm"), nil)
		g.Expect(err).To(MatchError(protocol.ErrRegistryLoginInClear))
		g.Expect(err).To(MatchError(ErrUnreachable))
		g.Expect(err.Error()).To(ContainSubstring("registry " + plainHost))
		g.Expect(err.Error()).NotTo(ContainSubstring(pass))
		g.Expect(plain.seenLogins()).To(BeEmpty(), "the source is refused before any request")
		g.Expect(storeDirEntries(t, s)).To(BeEmpty())
	})
	t.Run("a mirror in clear is refused, the TLS source serves", func(t *testing.T) {
		g := NewWithT(t)
		s := &Store{Root: t.TempDir()}
		_, err := s.Fetch(context.Background(), kubeadm("oci://"+secureHost+"/k8s/kubeadm", "oci+http://"+plainHost+"/k8s/kubeadm"), nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(plain.seenLogins()).To(BeEmpty())
		g.Expect(secure.seenLogins()).To(ContainElement(HavePrefix("Basic ")), "the login goes over TLS")
	})
	t.Run("a registry without a login still serves over oci+http", func(t *testing.T) {
		g := NewWithT(t)
		s := &Store{Root: t.TempDir()}
		_, err := s.Fetch(context.Background(), kubeadm("oci+http://"+anonymousHost+"/k8s/kubeadm"), nil)
		g.Expect(err).NotTo(HaveOccurred())
	})
}
