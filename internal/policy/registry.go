package policy

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// RegistryCredentialConfig names the pull Secret (type
// kubernetes.io/dockerconfigjson, in the management cluster) whose login for
// Registry the coordinator puts into the sealed plan of a node that fetches an
// artifact from that registry (an oci:// source or mirror). The Secret is read
// when a plan needs it; it never appears in the policy, a log or a status, but
// every node whose plan uses the registry receives the login, and whoever
// administers that node's cluster can read it there. Namespaces scopes the login
// to the Machines of those namespaces, so each tenant gets its own; an entry
// without Namespaces serves the namespaces no other entry of the registry names.
// A login is never sent without TLS: a plan that would fetch from the registry
// over oci+http fails to build, naming the registry (serve it over TLS and use
// oci://, or drop its entry if it serves anonymously).
//
//	registryCredentials:
//	- registry: registry.example.com:5000
//	  secretRef: {namespace: capi-inplace-system, name: site-registry}
//	- registry: registry.example.com:5000
//	  namespaces: [tenant-a]
//	  secretRef: {namespace: capi-inplace-system, name: tenant-a-registry}
type RegistryCredentialConfig struct {
	// Registry is the registry's host[:port], as written in the oci:// sources.
	Registry string `json:"registry"`
	// Namespaces are the Machine namespaces this login is for; empty: every
	// namespace no other entry of Registry names.
	Namespaces []string `json:"namespaces,omitempty"`
	// SecretRef is the pull Secret (type kubernetes.io/dockerconfigjson) in
	// the management cluster.
	SecretRef SecretRef `json:"secretRef"`
}

// SecretRef names a Secret.
type SecretRef struct {
	// Namespace is the Secret's namespace.
	Namespace string `json:"namespace"`
	// Name is the Secret's name.
	Name string `json:"name"`
}

// registryScope is the key of one login: a registry host[:port] and a Machine
// namespace ("" for the registry's default entry).
func registryScope(namespace, host string) string { return namespace + "/" + host }

func compileRegistryCredentials(cfgs []RegistryCredentialConfig) (map[string]SecretRef, []error) {
	var errs []error
	out := map[string]SecretRef{}
	for i, c := range cfgs {
		host := strings.ToLower(c.Registry)
		switch {
		case host == "" || strings.ContainsAny(host, "/ ") || strings.Contains(host, "://"):
			errs = append(errs, fmt.Errorf("registryCredentials[%d].registry %q must be a host[:port]", i, c.Registry))
			continue
		case len(validation.IsDNS1123Subdomain(c.SecretRef.Name)) > 0 || len(validation.IsDNS1123Label(c.SecretRef.Namespace)) > 0:
			errs = append(errs, fmt.Errorf("registryCredentials[%d].secretRef must name a Secret (namespace and name)", i))
			continue
		}
		namespaces := c.Namespaces
		if len(namespaces) == 0 {
			namespaces = []string{""}
		}
		for _, ns := range namespaces {
			if ns != "" && len(validation.IsDNS1123Label(ns)) > 0 {
				errs = append(errs, fmt.Errorf("registryCredentials[%d].namespaces: %q is not a namespace name", i, ns))
				continue
			}
			key := registryScope(ns, host)
			if _, dup := out[key]; dup {
				scope := "every other namespace"
				if ns != "" {
					scope = "namespace " + ns
				}
				errs = append(errs, fmt.Errorf("registryCredentials[%d]: registry %s is listed twice for %s", i, host, scope))
				continue
			}
			out[key] = c.SecretRef
		}
	}
	return out, errs
}

// RegistrySecret returns the pull Secret of a registry host[:port] for the
// Machines of namespace: the entry that names the namespace, else the registry's
// default entry, if the policy has either.
func (p *Policy) RegistrySecret(namespace, host string) (SecretRef, bool) {
	host = strings.ToLower(host)
	if ref, ok := p.registrySecrets[registryScope(namespace, host)]; ok {
		return ref, true
	}
	ref, ok := p.registrySecrets[registryScope("", host)]
	return ref, ok
}
