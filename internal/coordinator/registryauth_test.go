package coordinator

import (
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

const testRegistryPass = "s3cret-registry-pass"

func pullSecret(ns, name, dockerConfig string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(dockerConfig)}}
}

func TestRegistryLogin(t *testing.T) {
	const host = "registry.example.com:5000"
	auth := base64.StdEncoding.EncodeToString([]byte("site-a:" + testRegistryPass))
	tests := []struct {
		name    string
		config  string
		want    protocol.RegistryCredential
		wantErr string
	}{
		{name: "username and password", config: `{"auths":{"registry.example.com:5000":{"username":"site-a","password":"` + testRegistryPass + `"}}}`,
			want: protocol.RegistryCredential{Registry: host, Username: "site-a", Password: testRegistryPass}},
		{name: "auth, key as a URL", config: `{"auths":{"https://Registry.example.com:5000/v1/":{"auth":"` + auth + `"}}}`,
			want: protocol.RegistryCredential{Registry: host, Username: "site-a", Password: testRegistryPass}},
		{name: "identity token", config: `{"auths":{"registry.example.com:5000":{"identitytoken":"tok"}}}`,
			want: protocol.RegistryCredential{Registry: host, IdentityToken: "tok"}},
		{name: "only another registry", config: `{"auths":{"registry.example.com":{"username":"u","password":"` + testRegistryPass + `"}}}`, wantErr: "no login for registry.example.com:5000"},
		{name: "auth not base64", config: `{"auths":{"registry.example.com:5000":{"auth":"%%` + testRegistryPass + `"}}}`, wantErr: "not base64"},
		{name: "no login", config: `{"auths":{"registry.example.com:5000":{}}}`, wantErr: "has no login"},
		{name: "one registry under two keys, one login", config: `{"auths":{"registry.example.com:5000":{"username":"site-a","password":"` + testRegistryPass + `"},"https://registry.example.com:5000/v1/":{"auth":"` + auth + `"}}}`,
			want: protocol.RegistryCredential{Registry: host, Username: "site-a", Password: testRegistryPass}},
		{name: "one registry under two keys, two logins: refused, never one picked", config: `{"auths":{"registry.example.com:5000":{"username":"site-b","password":"` + testRegistryPass + `"},"https://registry.example.com:5000/v1/":{"auth":"` + auth + `"}}}`,
			wantErr: "the entries https://registry.example.com:5000/v1/ and registry.example.com:5000 name registry registry.example.com:5000 with different logins"},
		{name: "not JSON", config: `{"auths":` + testRegistryPass, wantErr: "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := registryLogin(pullSecret("ns", "s", tt.config), host)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(err.Error()).NotTo(ContainSubstring(testRegistryPass))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
	_, err := registryLogin(&corev1.Secret{Data: map[string][]byte{"password": []byte(testRegistryPass)}}, host)
	g := NewWithT(t)
	g.Expect(err).To(MatchError(ContainSubstring("no .dockerconfigjson key")))
}

// TestRegistryCredentialsInSealedPlanOnly: a plan whose kubeadm comes from a
// private registry carries the login from the pull Secret the policy names, inside
// the sealed plan only (the agent's key opens it); the plan Secret's bytes, the
// Node's annotations, the hook message and the Events never hold the password. A
// missing pull Secret fails the update before anything happens on the node, naming
// the Secret.
func TestRegistryCredentialsInSealedPlanOnly(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	digest := "sha256:" + fmt.Sprintf("%064x", 9)
	pol, err := policy.Parse(fmt.Appendf(nil, `
kubernetesBinaries:
  v1.36.3:
    %[1]s:
      kubeadm: {url: "oci://registry.example.com:5000/k8s/kubeadm", digest: "%[2]s"}
      kubelet: {url: "oci+http://mirror.site.local/k8s/kubelet", digest: "%[2]s"}
registryCredentials:
- {registry: "registry.example.com:5000", secretRef: {namespace: %[3]s, name: site-registry}}
- {registry: "other.example.com", secretRef: {namespace: %[3]s, name: other-registry}}
`, platform, digest, f.ns))
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range []string{"regauth1", "regauth1-peer"} {
		f.node(n, "v1.35.0", false)
		node := f.getNode(n)
		node.Status.NodeInfo.OperatingSystem, node.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
		g.Expect(f.wl.Status().Update(f.ctx, node)).To(Succeed())
	}
	c := f.coordinator(func(o *Options) { o.Binaries = pol; o.RegistryCredentials = pol })
	req := f.request(f.machine("m-regauth1", "regauth1", "v1.36.3", false), nil)

	// The pull Secret does not exist yet: a clear failure, the node untouched.
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("pull Secret " + f.ns + "/site-registry of registry registry.example.com:5000"))
	g.Expect(f.getNode("regauth1").Annotations).NotTo(HaveKey(inplacev1.StagePlanAnnotation))

	g.Expect(f.mgmt.Create(f.ctx, pullSecret(f.ns, "site-registry",
		`{"auths":{"registry.example.com:5000":{"username":"site-a","password":"`+testRegistryPass+`"}}}`))).To(Succeed())
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.Message)
	g.Expect(resp.Message).To(ContainSubstring("to stage plan"))

	sec := f.planSecret("regauth1")
	for k, v := range sec.Data {
		g.Expect(string(v)).NotTo(ContainSubstring(testRegistryPass), "plan Secret key %s in the clear", k)
	}
	sealed, err := protocol.DecodeSealedPlan(sec.Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	plan, err := sealed.Open(testAgentKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plan.RegistryCredentials).To(Equal([]protocol.RegistryCredential{
		{Registry: "registry.example.com:5000", Username: "site-a", Password: testRegistryPass}}),
		"only the registries the plan fetches from (mirror.site.local has no Secret, other.example.com is not used)")
	g.Expect(plan.StageItems()[0].Credentials).To(Equal(plan.RegistryCredentials))

	for k, v := range f.getNode("regauth1").Annotations {
		g.Expect(v).NotTo(ContainSubstring(testRegistryPass), "annotation %s", k)
	}
	g.Expect(resp.Message).NotTo(ContainSubstring(testRegistryPass))
	g.Expect(f.rec.all()).NotTo(ContainSubstring(testRegistryPass))
}

// TestRegistryLoginNeverPlannedInClear: a registry the policy names a pull
// Secret for, reached by any source of the plan over oci+http, fails the update
// before the node is asked for anything (no plan Secret, no stage-plan), with an
// input error that names the registry, the scheme and the way out, never the
// Secret's content; the same plan without that pull Secret carries no login for
// the registry and is published.
func TestRegistryLoginNeverPlannedInClear(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	digest := "sha256:" + fmt.Sprintf("%064x", 10)
	binaries := fmt.Sprintf(`
kubernetesBinaries:
  v1.36.3:
    %[1]s:
      kubeadm: {url: "oci://registry.example.com:5000/k8s/kubeadm", digest: "%[2]s"}
      kubelet: {url: "oci://registry.example.com:5000/k8s/kubelet", digest: "%[2]s",
                mirrors: ["oci+http://mirror.site.local:5000/k8s/kubelet"]}
registryCredentials:
- {registry: "registry.example.com:5000", secretRef: {namespace: %[3]s, name: site-registry}}
`, platform, digest, f.ns)
	withMirrorLogin := binaries + fmt.Sprintf(`- {registry: "mirror.site.local:5000", secretRef: {namespace: %s, name: mirror-registry}}
`, f.ns)
	for _, name := range []string{"site-registry", "mirror-registry"} {
		g.Expect(f.mgmt.Create(f.ctx, pullSecret(f.ns, name,
			`{"auths":{"registry.example.com:5000":{"username":"u","password":"`+testRegistryPass+`"},"mirror.site.local:5000":{"username":"u","password":"`+testRegistryPass+`"}}}`))).To(Succeed())
	}
	f.node("regclear1", "v1.35.0", false)
	node := f.getNode("regclear1")
	node.Status.NodeInfo.OperatingSystem, node.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
	g.Expect(f.wl.Status().Update(f.ctx, node)).To(Succeed())
	req := f.request(f.machine("m-regclear1", "regclear1", "v1.36.3", false), nil)

	pol, err := policy.Parse([]byte(withMirrorLogin))
	g.Expect(err).NotTo(HaveOccurred())
	c := f.coordinator(func(o *Options) { o.Binaries = pol; o.RegistryCredentials = pol })
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("registry mirror.site.local:5000 has the pull Secret " + f.ns + "/mirror-registry"))
	g.Expect(resp.Message).To(ContainSubstring("over oci+http (oci+http://mirror.site.local:5000/k8s/kubelet)"))
	g.Expect(resp.Message).To(ContainSubstring("serve the registry over TLS and name it with oci://"))
	g.Expect(resp.Message).NotTo(ContainSubstring(testRegistryPass))
	g.Expect(f.rec.all()).NotTo(ContainSubstring(testRegistryPass))
	g.Expect(f.getNode("regclear1").Annotations).NotTo(HaveKey(inplacev1.StagePlanAnnotation))
	err = f.wl.Get(f.ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName("regclear1")}, &corev1.Secret{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no plan Secret: %v", err)

	// The refusal is an input error a caller can tell by its sentinels.
	plan := &protocol.NodePlan{Kubernetes: protocol.KubernetesPlan{Binaries: &protocol.KubernetesBinaries{Platform: platform,
		Kubeadm: protocol.BinaryArtifact{URL: "oci://registry.example.com:5000/k8s/kubeadm", Digest: digest},
		Kubelet: protocol.BinaryArtifact{URL: "oci://registry.example.com:5000/k8s/kubelet", Digest: digest, Mirrors: []string{"oci+http://Mirror.site.local:5000/k8s/kubelet"}}}}}
	err = c.addRegistryCredentials(f.ctx, plan, f.ns)
	g.Expect(errors.Is(err, nodeplan.ErrInput)).To(BeTrue(), "%v", err)
	g.Expect(errors.Is(err, protocol.ErrRegistryLoginInClear)).To(BeTrue(), "%v", err)
	g.Expect(plan.RegistryCredentials).To(BeEmpty())

	// Without a pull Secret for the mirror, the plan goes out with the TLS
	// registry's login only, and the mirror is pulled from anonymously.
	pol, err = policy.Parse([]byte(binaries))
	g.Expect(err).NotTo(HaveOccurred())
	c = f.coordinator(func(o *Options) { o.Binaries = pol; o.RegistryCredentials = pol })
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.Message)
	sealed, err := protocol.DecodeSealedPlan(f.planSecret("regclear1").Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	published, err := sealed.Open(testAgentKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(published.RegistryCredentials).To(Equal([]protocol.RegistryCredential{
		{Registry: "registry.example.com:5000", Username: "u", Password: testRegistryPass}}))
}

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.events, "\n")
}
