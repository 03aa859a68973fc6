package artifact

import (
	"bytes"
	"context"
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

// TestFetchOCIWithCredentials: a registry that requires a login serves the blob
// only with the plan's credential for its host; without one (or with one for
// another registry) the fetch fails as unreachable with the registry's 401, and
// the error never carries the password.
func TestFetchOCIWithCredentials(t *testing.T) {
	g := NewWithT(t)
	const user, pass = "site-a", "s3cret-registry-pass"
	reg := &basicAuthRegistry{next: registry.New(registry.Logger(log.New(io.Discard, "", 0))), user: user, pass: pass}
	srv := httptest.NewServer(reg)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	exe := testExecutable(t)
	repo, err := name.NewRepository(host+"/k8s/kubeadm", name.Insecure)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.WriteLayer(repo, static.NewLayer(exe, types.MediaType("application/vnd.k8s.binary")),
		remote.WithAuth(&authn.Basic{Username: user, Password: pass}))).To(Succeed())

	item := protocol.StageItem{Name: protocol.StageKubeadm, Executable: true,
		Artifact: protocol.BinaryArtifact{URL: "oci+http://" + host + "/k8s/kubeadm", Digest: digestOf(exe)}}
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
