package protocol

import (
	"crypto/sha256"
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
}

// Sources returns where to fetch the artifact, in the order to try them.
func (a BinaryArtifact) Sources() []string {
	return append(slices.Clone(a.Mirrors), a.URL)
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
