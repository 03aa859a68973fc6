package coordinator

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// RegistryCredentialsResolver names the pull Secret of an OCI registry host[:port]
// for the Machines of a namespace. *policy.Policy implements it.
type RegistryCredentialsResolver interface {
	RegistrySecret(namespace, host string) (policy.SecretRef, bool)
}

var _ RegistryCredentialsResolver = (*policy.Policy)(nil)

// addRegistryCredentials puts into the plan the login of every private registry
// its artifacts come from, read from the pull Secret the policy names for it (in
// the management cluster), and nothing for other registries: the plan is sealed to
// the node's key, so only that node's agent reads them. A named Secret that is
// missing or holds no login for the registry is an input error whose message names
// the Secret, never its content. So is a private registry that any source of the
// plan reaches over oci+http: the sealed plan protects the login up to the node,
// and the agent would then send it without TLS; the Secret is not even read.
func (c *Coordinator) addRegistryCredentials(ctx context.Context, plan *protocol.NodePlan, namespace string) error {
	r := c.opts.RegistryCredentials
	if r == nil || plan == nil {
		return nil
	}
	plan.RegistryCredentials = nil
	var creds []protocol.RegistryCredential
	for _, host := range plan.OCIRegistries() {
		ref, ok := r.RegistrySecret(namespace, host)
		if !ok {
			continue
		}
		if inClear := plan.SourcesInClear(host); len(inClear) > 0 {
			return fmt.Errorf("%w: %w: registry %s has the pull Secret %s/%s, and the plan reaches it over %s (%s): serve the registry over TLS and name it with %s://, or, if it serves anonymously, drop its registryCredentials entry from the policy",
				nodeplan.ErrInput, protocol.ErrRegistryLoginInClear, host, ref.Namespace, ref.Name, protocol.SchemeOCIHTTP, strings.Join(inClear, ", "), protocol.SchemeOCI)
		}
		sec := &corev1.Secret{}
		if err := c.opts.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, sec); err != nil {
			return fmt.Errorf("%w: read pull Secret %s/%s of registry %s: %w", nodeplan.ErrInput, ref.Namespace, ref.Name, host, err)
		}
		cred, err := registryLogin(sec, host)
		if err != nil {
			return fmt.Errorf("%w: pull Secret %s/%s of registry %s: %w", nodeplan.ErrInput, ref.Namespace, ref.Name, host, err)
		}
		creds = append(creds, cred)
	}
	plan.RegistryCredentials = creds
	return nil
}

// dockerConfig is the .dockerconfigjson of a kubernetes.io/dockerconfigjson Secret.
type dockerConfig struct {
	Auths map[string]struct {
		Username      string `json:"username"`
		Password      string `json:"password"`
		Auth          string `json:"auth"`
		IdentityToken string `json:"identitytoken"`
	} `json:"auths"`
}

// registryLogin reads the login for host from a pull Secret. A config may name
// one registry under several keys (a bare host and a URL): they are read in key
// order, and entries that disagree are refused rather than one picked, so the
// same Secret always gives the same login. Errors never quote the Secret's
// content.
func registryLogin(sec *corev1.Secret, host string) (protocol.RegistryCredential, error) {
	raw, ok := sec.Data[corev1.DockerConfigJsonKey]
	if !ok {
		return protocol.RegistryCredential{}, fmt.Errorf("no %s key (a Secret of type %s is expected)", corev1.DockerConfigJsonKey, corev1.SecretTypeDockerConfigJson)
	}
	var cfg dockerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return protocol.RegistryCredential{}, fmt.Errorf("%s is not valid JSON", corev1.DockerConfigJsonKey)
	}
	var (
		found protocol.RegistryCredential
		keys  []string
	)
	for _, key := range slices.Sorted(maps.Keys(cfg.Auths)) {
		if registryKeyHost(key) != host {
			continue
		}
		a := cfg.Auths[key]
		cred := protocol.RegistryCredential{Registry: host, Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken}
		if a.Auth != "" && cred.Username == "" {
			dec, err := base64.StdEncoding.DecodeString(a.Auth)
			user, pass, found := strings.Cut(string(dec), ":")
			if err != nil || !found {
				return protocol.RegistryCredential{}, fmt.Errorf("the auth of %s is not base64 of user:password", key)
			}
			cred.Username, cred.Password = user, pass
		}
		if cred.Username == "" && cred.IdentityToken == "" {
			return protocol.RegistryCredential{}, fmt.Errorf("the entry of %s has no login", key)
		}
		if len(keys) > 0 && cred != found {
			return protocol.RegistryCredential{}, fmt.Errorf("the entries %s and %s name registry %s with different logins; keep one", strings.Join(keys, ", "), key, host)
		}
		found, keys = cred, append(keys, key)
	}
	if len(keys) == 0 {
		return protocol.RegistryCredential{}, fmt.Errorf("no login for %s in %s", host, corev1.DockerConfigJsonKey)
	}
	return found, nil
}

// registryKeyHost is the host[:port] of a dockerconfigjson auths key, which may
// be a bare host or a URL ("https://registry.example.com/v1/").
func registryKeyHost(key string) string {
	k := strings.ToLower(key)
	if i := strings.Index(k, "://"); i >= 0 {
		k = k[i+3:]
	}
	k, _, _ = strings.Cut(k, "/")
	return k
}
