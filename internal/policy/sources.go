package policy

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// ArtifactSourceConfig is how nodes fetch from one host that artifacts' or
// kubernetesBinaries' urls and mirrors name:
//
//	artifactSources:
//	- host: mirror.site-a.local:8443
//	  caBundle: |
//	    -----BEGIN CERTIFICATE-----
//	    ...
//	- host: cache.site-a.local
//	  redirectHosts: [minio.site-a.local:9000]
//
// A host without an entry is fetched with the system roots of the agent's
// image, and its redirects follow the default rule (docs/artifacts.md).
type ArtifactSourceConfig struct {
	// Host is the host of the url or mirror as written there, with its port when
	// it has one.
	Host string `json:"host"`
	// CABundle is PEM certificates, the only roots that verify TLS while a node
	// fetches from this host (the hosts it redirects to and, for a registry, its
	// token service included).
	CABundle string `json:"caBundle,omitempty"`
	// RedirectHosts are other hosts a plain-http source on this host may
	// redirect to over plain http. Redirects to https are followed to any host
	// without it; from https to plain http never.
	RedirectHosts []string `json:"redirectHosts,omitempty"`
}

// compileSources validates the artifact source entries, keyed by lowercase host.
func compileSources(cfg []ArtifactSourceConfig) (map[string]protocol.SourceHost, []error) {
	var errs []error
	out := map[string]protocol.SourceHost{}
	for i, c := range cfg {
		h := protocol.SourceHost{Host: c.Host, CABundle: c.CABundle, RedirectHosts: slices.Clone(c.RedirectHosts)}
		if err := h.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("artifactSources[%d]: %w", i, err))
			continue
		}
		key := strings.ToLower(c.Host)
		if _, dup := out[key]; dup {
			errs = append(errs, fmt.Errorf("artifactSources[%d]: host %s is listed twice", i, c.Host))
			continue
		}
		out[key] = h
	}
	return out, errs
}

// withSources gives a the settings of each of its sources' hosts that has an
// entry, in the order of its sources.
func withSources(a *protocol.BinaryArtifact, sources map[string]protocol.SourceHost) {
	for _, src := range a.Sources() {
		u, err := url.Parse(src)
		if err != nil {
			continue // the artifact's own validation names the URL
		}
		h, ok := sources[strings.ToLower(u.Host)]
		if !ok || slices.ContainsFunc(a.SourceHosts, func(s protocol.SourceHost) bool { return strings.EqualFold(s.Host, h.Host) }) {
			continue
		}
		a.SourceHosts = append(a.SourceHosts, h)
	}
}
