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
// when a plan needs it; it never appears in the policy, a log or a status.
//
//	registryCredentials:
//	- registry: registry.example.com:5000
//	  secretRef: {namespace: capi-inplace-system, name: site-registry}
type RegistryCredentialConfig struct {
	// Registry is the registry's host[:port], as written in the oci:// sources.
	Registry  string    `json:"registry"`
	SecretRef SecretRef `json:"secretRef"`
}

// SecretRef names a Secret.
type SecretRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

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
		if _, dup := out[host]; dup {
			errs = append(errs, fmt.Errorf("registryCredentials[%d]: registry %s is listed twice", i, host))
			continue
		}
		out[host] = c.SecretRef
	}
	return out, errs
}

// RegistrySecret returns the pull Secret of a registry host[:port], if the policy
// names one.
func (p *Policy) RegistrySecret(host string) (SecretRef, bool) {
	ref, ok := p.registrySecrets[strings.ToLower(host)]
	return ref, ok
}
