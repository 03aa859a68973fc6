package release

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/version"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const configDir = "../../config"

// clusterctlVarRE matches clusterctl's ${NAME:=default} variables (the only form the
// release uses).
var clusterctlVarRE = regexp.MustCompile(`\$\{([A-Za-z0-9_]+):=([^}]*)\}`)

// substituteDefaults does what clusterctl does with no variable set.
func substituteDefaults(components []byte) []byte {
	return clusterctlVarRE.ReplaceAll(components, []byte("$2"))
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		objs = append(objs, u)
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

func TestBuildComponents(t *testing.T) {
	g := NewWithT(t)
	a, err := Build(Options{ConfigDir: configDir, Version: "v0.1.3"})
	g.Expect(err).NotTo(HaveOccurred())

	vars := map[string]string{}
	for _, m := range clusterctlVarRE.FindAllStringSubmatch(string(a.Components), -1) {
		vars[m[1]] = m[2]
	}
	g.Expect(vars).To(Equal(map[string]string{
		VarImage:                 "ghcr.io/capi-inplace/capi-inplace:v0.1.3",
		VarAgentImage:            "ghcr.io/capi-inplace/capi-inplace-agent:v0.1.3",
		VarDisableInPlaceUpdates: "false",
	}), "the variables docs/install.md lists, defaulting to the release's tags")
	// No other $NAME or ${NAME}: clusterctl would take it for a variable without a
	// default and refuse to install. $(AGENT_IMAGE) is Kubernetes' expansion.
	rest := clusterctlVarRE.ReplaceAllString(string(a.Components), "")
	g.Expect(rest).NotTo(MatchRegexp(`\$\{|\$[A-Za-z_]`))

	objs := decode(t, substituteDefaults(a.Components))
	dep := find(t, objs, "Deployment", deploymentName)
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	g.Expect(c["image"]).To(Equal("ghcr.io/capi-inplace/capi-inplace:v0.1.3"))
	g.Expect(c["env"]).To(ContainElement(map[string]any{"name": agentImageEnvName, "value": "ghcr.io/capi-inplace/capi-inplace-agent:v0.1.3"}))
	settings, _, _ := unstructured.NestedFieldNoCopy(find(t, objs, "ExtensionConfig", "capi-inplace").Object, "spec", "settings")
	g.Expect(settings).To(Equal(map[string]any{"disableInPlaceUpdates": "false"}), "a string after substitution, as the CRD wants")

	// The components are config/default's objects: the release adds variables, not objects.
	def, err := render(filepath.Join(configDir, "default"))
	g.Expect(err).NotTo(HaveOccurred())
	var want, got []string
	for _, o := range def {
		want = append(want, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	g.Expect(got).To(Equal(want))
	g.Expect(objs[0].GetKind()).To(Equal("Namespace"), "clusterctl's target namespace: the components' one Namespace")
	// clusterctl delete and upgrade remove a provider's ClusterRoles and
	// ClusterRoleBindings only when their names start with "<namespace>-"
	// (cmd/clusterctl/client/cluster/components.go, Delete); others would be left behind.
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" || o.GetKind() == "ClusterRoleBinding" {
			g.Expect(o.GetName()).To(HavePrefix(objs[0].GetName()+"-"), "%s %s", o.GetKind(), o.GetName())
		}
	}

	// Another registry moves both images.
	b, err := Build(Options{ConfigDir: configDir, Version: "v0.1.3", Registry: "registry.example/mirror"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b.Components)).To(ContainSubstring("${CAPI_INPLACE_IMAGE:=registry.example/mirror/capi-inplace:v0.1.3}"))
	g.Expect(string(b.Components)).To(ContainSubstring("${CAPI_INPLACE_AGENT_IMAGE:=registry.example/mirror/capi-inplace-agent:v0.1.3}"))
}

func TestBuildRefusesWhatClusterctlWould(t *testing.T) {
	for _, tc := range []struct {
		name, version, want string
	}{
		{"no leading v", "0.1.0", "leading v"},
		{"not semantic", "v0.1", "semantic version"},
		{"git describe output", "3f9eeda-dirty", "semantic version"},
		{"no release series", "v0.2.0", "no release series 0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(Options{ConfigDir: configDir, Version: tc.version})
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestCheckMetadata(t *testing.T) {
	v := version.MustParseSemantic("v0.1.0")
	ok, err := os.ReadFile(filepath.Join(configDir, "release", MetadataFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, data, want string
	}{
		{"the repository's", string(ok), ""},
		{"older contract", "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 0, minor: 1, contract: v1beta1}\n", "contract v1beta1"},
		{"unknown field", "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 0, minor: 1, contract: v1beta2, kontract: x}\n", "unknown field"},
		{"wrong kind", "apiVersion: v1\nkind: ConfigMap\n", "want clusterctl.cluster.x-k8s.io/v1alpha3 Metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkMetadata([]byte(tc.data), v)
			if tc.want == "" {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				return
			}
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestWriteIsALocalRepository(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	path, err := Write(dir, Artifacts{Version: "v0.1.0", Components: []byte("c"), Metadata: []byte("m")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(path).To(Equal(filepath.Join(dir, "runtime-extension-capi-inplace", "v0.1.0", "runtime-extension-components.yaml")))
	g.Expect(os.ReadFile(path)).To(Equal([]byte("c")))
	g.Expect(os.ReadFile(filepath.Join(filepath.Dir(path), "metadata.yaml"))).To(Equal([]byte("m")))
	// Repeating the write replaces the files and leaves no temporary ones.
	_, err = Write(dir, Artifacts{Version: "v0.1.0", Components: []byte("c2"), Metadata: []byte("m")})
	g.Expect(err).NotTo(HaveOccurred())
	entries, err := os.ReadDir(filepath.Dir(path))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(2))
	g.Expect(os.ReadFile(path)).To(Equal([]byte("c2")))
}
