package protocol

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// KubernetesBinaries are the kubeadm and kubelet a node downloads for the plan's
// Kubernetes version, for the node's platform only. The plan carries where to get
// them and what they must hash to, never their content: the agent downloads each
// one and refuses it unless its SHA-256 matches.
type KubernetesBinaries struct {
	// Platform is the node's "<os>/<architecture>" (Node.status.nodeInfo), e.g.
	// "linux/amd64": an agent on another platform refuses the binaries.
	Platform string         `json:"platform"`
	Kubeadm  BinaryArtifact `json:"kubeadm"`
	Kubelet  BinaryArtifact `json:"kubelet"`
}

// BinaryArtifact is one file to download (an executable, an OS bundle).
type BinaryArtifact struct {
	// URL is an http or https URL, or an OCI repository (oci://<registry>/<repository>,
	// oci+http:// for a registry without TLS) whose blob Digest is the file (an
	// `oras push` layer). Plain http is enough for integrity: the digest verifies the
	// content whatever the transport.
	URL string `json:"url"`
	// Digest is "sha256:<64 lowercase hex>" of the file's content.
	Digest string `json:"digest"`
	// Mirrors are other sources of the same content, tried in order before URL
	// (an air-gapped site's mirror); the digest verifies whichever answers.
	Mirrors []string `json:"mirrors,omitempty"`
	// Size is the file's length in bytes; 0 means not declared (the agent then
	// bounds it by MaxArtifactBytes). A source that announces or sends another
	// length serves other content, refused as a digest mismatch is.
	Size int64 `json:"size,omitempty"`
	// SourceHosts are the settings of the hosts URL and Mirrors name (their own
	// trust roots, the plain-http hosts they may redirect to), one per host.
	SourceHosts []SourceHost `json:"sourceHosts,omitempty"`
}

// SourceHost is how the agent fetches from one host of an artifact's sources.
type SourceHost struct {
	// Host is the host of a source URL, with its port when the URL has one
	// ("mirror.site-a.local:8443"), compared without regard to case.
	Host string `json:"host"`
	// CABundle is PEM certificates, the only roots that verify TLS while
	// fetching from this host (its redirects and, for a registry, its token
	// service included); empty means the system roots of the agent's image.
	CABundle string `json:"caBundle,omitempty"`
	// RedirectHosts are hosts besides Host a plain-http source of this host may
	// be redirected to over plain http (an http mirror whose storage is on
	// another host). A redirect to https is followed to any host; one from https
	// to plain http never.
	RedirectHosts []string `json:"redirectHosts,omitempty"`
}

// Bounds of an artifact's declared size and source settings.
const (
	// MaxArtifactBytes is the largest artifact the agent fetches, declared or
	// not: the policy refuses a larger size, the agent a longer body.
	MaxArtifactBytes int64 = 4 << 30
	// MaxSourceCABundleBytes bounds a source host's CA bundle (a few PEM
	// certificates), as MaxGateCABundleBytes does a gate's.
	MaxSourceCABundleBytes = 16384
	// MaxRedirectHosts bounds a source host's RedirectHosts.
	MaxRedirectHosts = 16
)

// Sources returns where to fetch the artifact, in the order to try them.
func (a BinaryArtifact) Sources() []string {
	return append(slices.Clone(a.Mirrors), a.URL)
}

// SourceHostOf returns the settings of the source URL's host (a zero
// SourceHost but for Host when the artifact has none for it).
func (a BinaryArtifact) SourceHostOf(src string) SourceHost {
	u, err := url.Parse(src)
	if err != nil {
		return SourceHost{}
	}
	for _, h := range a.SourceHosts {
		if strings.EqualFold(h.Host, u.Host) {
			return h
		}
	}
	return SourceHost{Host: u.Host}
}

// validHost reports whether h is a URL host: a name or address with an
// optional port, nothing else.
func validHost(h string) bool {
	if h == "" || len(h) > 261 || strings.ContainsAny(h, "/?#@\\ ") {
		return false
	}
	u, err := url.Parse("//" + h)
	return err == nil && u.Host == h && u.Hostname() != ""
}

// Validate checks one source host's settings.
func (h SourceHost) Validate() error {
	var errs []error
	if !validHost(h.Host) {
		errs = append(errs, fmt.Errorf("host %.64q is not a host[:port]", h.Host))
	}
	switch {
	case len(h.CABundle) > MaxSourceCABundleBytes:
		errs = append(errs, fmt.Errorf("caBundle is %d bytes, more than %d", len(h.CABundle), MaxSourceCABundleBytes))
	case h.CABundle != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(h.CABundle)):
		errs = append(errs, errors.New("caBundle holds no PEM certificate"))
	}
	if len(h.RedirectHosts) > MaxRedirectHosts {
		errs = append(errs, fmt.Errorf("redirectHosts lists %d hosts, more than %d", len(h.RedirectHosts), MaxRedirectHosts))
	} else {
		for i, r := range h.RedirectHosts {
			if !validHost(r) {
				errs = append(errs, fmt.Errorf("redirectHosts[%d] %.64q is not a host[:port]", i, r))
			}
		}
	}
	return errors.Join(errs...)
}

// URL schemes of an OCI repository source.
const (
	SchemeOCI     = "oci"
	SchemeOCIHTTP = "oci+http"
)

// ociRepositoryRE is the distribution spec's repository name.
var ociRepositoryRE = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)

// Platforms are the node platforms Kubernetes publishes kubeadm and kubelet for.
var Platforms = []string{"linux/amd64", "linux/arm64", "linux/arm", "linux/ppc64le", "linux/s390x"}

// digestRE is the one rule for an artifact digest, shared by the policy, the plan
// and the agent.
var digestRE = regexp.MustCompile(`^sha256:([0-9a-f]{64})$`)

// ErrInvalidDigest is wrapped by DigestHex's errors.
var ErrInvalidDigest = errors.New("digest is not sha256:<64 lowercase hex>")

// DigestHex returns the hex part of a "sha256:<64 lowercase hex>" digest, or an
// error wrapping ErrInvalidDigest.
func DigestHex(digest string) (string, error) {
	m := digestRE.FindStringSubmatch(digest)
	if m == nil {
		return "", fmt.Errorf("%q: %w", digest, ErrInvalidDigest)
	}
	return m[1], nil
}

// ValidDigest reports whether digest is "sha256:<64 lowercase hex>".
func ValidDigest(digest string) bool { return digestRE.MatchString(digest) }

// digestAlgorithm prefixes every artifact digest (digestRE's rule).
const digestAlgorithm = "sha256:"

// DigestFromHex returns the digest whose hex part is hexSum (a hex-encoded
// SHA-256 sum, as DigestHex returns it): the one place the digest string is
// built, so that a computed digest always compares equal to a valid plan's.
func DigestFromHex(hexSum string) string { return digestAlgorithm + hexSum }

// DigestFromSum returns the digest of a SHA-256 sum (hash.Hash.Sum's bytes).
func DigestFromSum(sum []byte) string { return DigestFromHex(hex.EncodeToString(sum)) }

// DigestOf returns the digest of content.
func DigestOf(content []byte) string {
	sum := sha256.Sum256(content)
	return DigestFromSum(sum[:])
}

// ValidateDownloadURL checks that raw is an absolute http, https, oci or oci+http
// URL with a host and no user information (a password in a URL would travel in
// plans and logs); an OCI URL names a repository only (the digest names the blob).
func ValidateDownloadURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %w", raw, err)
	}
	switch u.Scheme {
	case "http", "https", SchemeOCI, SchemeOCIHTTP:
	default:
		return fmt.Errorf("%q is not an http, https, oci or oci+http URL", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", raw)
	}
	if u.User != nil {
		return fmt.Errorf("URL of host %s carries user information: serve the artifact without credentials", u.Host)
	}
	if u.Scheme == SchemeOCI || u.Scheme == SchemeOCIHTTP {
		repo := strings.TrimPrefix(u.Path, "/")
		if !ociRepositoryRE.MatchString(repo) || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%q is not oci://<registry>/<repository> (lowercase repository, no tag or digest: the artifact's digest names the blob)", raw)
		}
	}
	return nil
}

// Validate checks one artifact.
func (a BinaryArtifact) Validate() error {
	var errs []error
	if err := ValidateDownloadURL(a.URL); err != nil {
		errs = append(errs, fmt.Errorf("url: %w", err))
	}
	if !ValidDigest(a.Digest) {
		errs = append(errs, fmt.Errorf("digest %q is not sha256:<64 lowercase hex>", a.Digest))
	}
	for i, m := range a.Mirrors {
		if err := ValidateDownloadURL(m); err != nil {
			errs = append(errs, fmt.Errorf("mirrors[%d]: %w", i, err))
		}
	}
	if a.Size < 0 || a.Size > MaxArtifactBytes {
		errs = append(errs, fmt.Errorf("size %d is not between 0 (not declared) and %d bytes", a.Size, MaxArtifactBytes))
	}
	hosts := map[string]bool{}
	for _, src := range a.Sources() {
		if u, err := url.Parse(src); err == nil {
			hosts[strings.ToLower(u.Host)] = true
		}
	}
	seen := map[string]bool{}
	for i, h := range a.SourceHosts {
		if err := h.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("sourceHosts[%d]: %w", i, err))
			continue
		}
		key := strings.ToLower(h.Host)
		if !hosts[key] {
			errs = append(errs, fmt.Errorf("sourceHosts[%d]: host %s is the host of no url or mirror", i, h.Host))
		}
		if seen[key] {
			errs = append(errs, fmt.Errorf("sourceHosts[%d]: host %s is listed twice", i, h.Host))
		}
		seen[key] = true
	}
	return errors.Join(errs...)
}

// Validate checks the platform and both artifacts.
func (b *KubernetesBinaries) Validate() error {
	var errs []error
	if !slices.Contains(Platforms, b.Platform) {
		errs = append(errs, fmt.Errorf("platform %q is not one of %s", b.Platform, strings.Join(Platforms, ", ")))
	}
	if err := b.Kubeadm.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("kubeadm: %w", err))
	}
	if err := b.Kubelet.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("kubelet: %w", err))
	}
	return errors.Join(errs...)
}
