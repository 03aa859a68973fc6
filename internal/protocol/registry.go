package protocol

import (
	"errors"
	"net/url"
	"strings"
)

// ErrRegistryLoginInClear: a registry login would travel over plain HTTP
// (an oci+http source), readable and replayable by anyone on the path. The
// coordinator refuses to build such a plan and the agent refuses such a source,
// so that neither side is the one to leak it.
var ErrRegistryLoginInClear = errors.New("a registry login is never sent over plain HTTP")

// RegistryCredential is the login for one OCI registry. Its String and GoString
// name the registry only, so that no %v of a plan or an item prints the secret.
type RegistryCredential struct {
	// Registry is the registry's host[:port], as in the oci:// source.
	Registry string `json:"registry"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// IdentityToken is an OAuth2 refresh token (dockerconfigjson "identitytoken").
	IdentityToken string `json:"identityToken,omitempty"`
}

func (c RegistryCredential) String() string   { return "credential for " + c.Registry + " (redacted)" }
func (c RegistryCredential) GoString() string { return c.String() }

// OCIRegistry returns the registry host[:port] of an oci:// or oci+http:// source;
// ok is false for any other source.
func OCIRegistry(src string) (host string, ok bool) {
	u, err := url.Parse(src)
	if err != nil || (u.Scheme != SchemeOCI && u.Scheme != SchemeOCIHTTP) || u.Host == "" {
		return "", false
	}
	return strings.ToLower(u.Host), true
}

// OCIRegistries lists, once each and in order, the registries the plan's staged
// artifacts come from (every source, mirrors included).
func (p *NodePlan) OCIRegistries() []string {
	var out []string
	seen := map[string]bool{}
	for _, it := range p.stageItems() {
		for _, src := range it.Artifact.Sources() {
			if h, ok := OCIRegistry(src); ok && !seen[h] {
				seen[h] = true
				out = append(out, h)
			}
		}
	}
	return out
}

// RegistryInClear returns the registry host[:port] of an oci+http source, a
// registry reached without TLS, to which no login may be sent; ok is false for
// any other source. The one rule both the coordinator and the agent apply.
func RegistryInClear(src string) (host string, ok bool) {
	u, err := url.Parse(src)
	if err != nil || u.Scheme != SchemeOCIHTTP {
		return "", false
	}
	return OCIRegistry(src)
}

// SourcesInClear lists, in order, the plan's staged sources (mirrors included)
// that reach the registry host without TLS (RegistryInClear).
func (p *NodePlan) SourcesInClear(host string) []string {
	var out []string
	for _, it := range p.stageItems() {
		for _, src := range it.Artifact.Sources() {
			if h, ok := RegistryInClear(src); ok && strings.EqualFold(h, host) {
				out = append(out, src)
			}
		}
	}
	return out
}

// Credential returns the credential for a registry host, if the list has one.
func Credential(creds []RegistryCredential, host string) (RegistryCredential, bool) {
	for _, c := range creds {
		if strings.EqualFold(c.Registry, host) {
			return c, true
		}
	}
	return RegistryCredential{}, false
}
