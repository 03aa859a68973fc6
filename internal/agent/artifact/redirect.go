package artifact

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// ErrRedirectRefused: a source redirected the agent where the store does not
// follow (redirect.go's rule).
var ErrRedirectRefused = errors.New("redirect refused")

// MaxRedirects is how many redirects one fetch of an http(s) source follows.
const MaxRedirects = 5

// The redirect rule: a fetch goes where the source sends it only without
// giving up TLS and without leaving the source's host over plain http.
//   - To https, any host: a CDN (dl.k8s.io answers from cdn.dl.k8s.io, a
//     release page from object storage). TLS verifies the host the redirect
//     names, the digest the content, so another host adds no way to make the
//     node take other bytes.
//   - From https (or after an https hop) to plain http, never: an on-path
//     attacker could then feed the body, and the policy cannot opt in.
//   - To plain http: only the source's own host, or one its SourceHost lists in
//     RedirectHosts (a plain-http mirror whose storage is elsewhere).
//   - At most MaxRedirects hops per request, for an http(s) source and for every
//     request a registry's client makes (token service and blob storage too),
//     each judged by the same rule: go-containerregistry's client would follow
//     ten.

// checkHop refuses a request a fetch from src may not make after prev (the
// request before it; src itself for a registry's requests, whose chain the
// transport does not see).
func checkHop(src, prev, to *url.URL, redirectHosts []string) error {
	if to.Scheme == "https" {
		return nil
	}
	if to.Scheme != "http" {
		return fmt.Errorf("%w: to %s, not http or https", ErrRedirectRefused, redactURL(to.String()))
	}
	if isTLS(src) || isTLS(prev) {
		return fmt.Errorf("%w: from %s to plain http %s: a source reached over TLS is never followed to plain http", ErrRedirectRefused, redactURL(prev.String()), redactURL(to.String()))
	}
	if strings.EqualFold(to.Host, src.Host) {
		return nil
	}
	for _, h := range redirectHosts {
		if strings.EqualFold(to.Host, h) {
			return nil
		}
	}
	return fmt.Errorf("%w: from %s to %s over plain http: list %s in the redirectHosts of the policy's artifactSources entry for %s to allow it",
		ErrRedirectRefused, redactURL(prev.String()), redactURL(to.String()), to.Host, src.Host)
}

func isTLS(u *url.URL) bool { return u.Scheme == "https" || u.Scheme == "oci" }

// clientFor returns the client of one fetch from src: the store's client with
// the source host's CA bundle as its only roots when it has one, following
// redirects by checkHop.
func (s *Store) clientFor(src *url.URL, host protocol.SourceHost) (*http.Client, error) {
	base := s.client()
	c := *base
	if host.CABundle != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(host.CABundle)) {
			return nil, fmt.Errorf("caBundle of %s holds no PEM certificate", host.Host)
		}
		rt := base.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		t, ok := rt.(*http.Transport)
		if !ok {
			return nil, fmt.Errorf("caBundle of %s: the store's client has a %T, not an *http.Transport", host.Host, rt)
		}
		t = t.Clone()
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if t.TLSClientConfig != nil {
			cfg = t.TLSClientConfig.Clone()
		}
		cfg.RootCAs = pool
		t.TLSClientConfig = cfg
		c.Transport = t
	}
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) > MaxRedirects {
			return fmt.Errorf("%w: more than %d redirects from %s", ErrRedirectRefused, MaxRedirects, redactURL(src.String()))
		}
		return checkHop(src, via[len(via)-1].URL, req.URL, host.RedirectHosts)
	}
	if src.Scheme == "oci" || src.Scheme == "oci+http" {
		rt := c.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		c.Transport = hopGuard{next: rt, src: src, redirectHosts: host.RedirectHosts}
	}
	return &c, nil
}

// hopGuard judges every request of a registry fetch by checkHop before it is
// sent: go-containerregistry builds its own client around the transport, so
// the transport is where its redirects and token requests can be seen. A
// request the client made to follow a redirect carries the response that
// caused it (http.Request.Response), which gives the hop it follows and how
// many came before.
type hopGuard struct {
	next          http.RoundTripper
	src           *url.URL
	redirectHosts []string
}

func (g hopGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	prev, hops := g.src, 0
	for r := req.Response; r != nil && r.Request != nil; r = r.Request.Response {
		if hops == 0 {
			prev = r.Request.URL
		}
		hops++
	}
	err := checkHop(g.src, prev, req.URL, g.redirectHosts)
	if hops > MaxRedirects {
		err = fmt.Errorf("%w: more than %d redirects from %s", ErrRedirectRefused, MaxRedirects, redactURL(g.src.String()))
	}
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	return g.next.RoundTrip(req)
}

// redactURL is raw without its query and fragment (a signed URL's token) and
// user information, for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}
