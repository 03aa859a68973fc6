package release

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/version"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/yaml"
)

// The provider as clusterctl names it: `clusterctl init --runtime-extension capi-inplace`
// installs the RuntimeExtensionProvider "capi-inplace", whose manifest label (the
// directory of a local repository) is "runtime-extension-capi-inplace".
const (
	ProviderName = "capi-inplace"
	// ProviderLabel is clusterctl's manifest label of the provider.
	ProviderLabel = "runtime-extension-" + ProviderName
	// ComponentsFile is the components YAML's name in a release.
	ComponentsFile = "runtime-extension-components.yaml"
	// MetadataFile is clusterctl's metadata file's name in a release.
	MetadataFile = "metadata.yaml"
	// DefaultRegistry is where `make image` pushes release images.
	DefaultRegistry = "ghcr.io/capi-inplace"
)

// The clusterctl variables of the components, besides the settings' in
// config/release (CAPI_INPLACE_DISABLE_IN_PLACE_UPDATES).
const (
	// VarImage is the extension's image (Deployment capi-inplace-extension).
	VarImage = "CAPI_INPLACE_IMAGE"
	// VarAgentImage is the node agent's image (the extension's AGENT_IMAGE).
	VarAgentImage = "CAPI_INPLACE_AGENT_IMAGE"
	// VarDisableInPlaceUpdates is the ExtensionConfig setting disableInPlaceUpdates.
	VarDisableInPlaceUpdates = "CAPI_INPLACE_DISABLE_IN_PLACE_UPDATES"
)

// What the release rewrites in config/release's rendering: the extension Deployment's
// container and its AGENT_IMAGE variable (config/manager/manager.yaml).
const (
	deploymentName    = "capi-inplace-extension"
	containerName     = "extension"
	agentImageEnvName = "AGENT_IMAGE"
)

// Options says what to release.
type Options struct {
	// ConfigDir is the repository's config/ directory (config/release is rendered).
	ConfigDir string
	// Version is the release, a semantic version with a leading v (v0.1.0); it is
	// the images' default tag and must fall in a release series of metadata.yaml.
	Version string
	// Registry holds the images capi-inplace and capi-inplace-agent; default
	// DefaultRegistry.
	Registry string
}

// Artifacts are one release's files for clusterctl's provider contract.
type Artifacts struct {
	Version    string
	Components []byte
	Metadata   []byte
}

// Build renders config/release with kustomize's Go API, replaces the two images by
// clusterctl variables defaulting to the release's tags, and checks metadata.yaml
// against the version and the Cluster API contract of our go.mod.
func Build(opts Options) (Artifacts, error) {
	v, err := version.ParseSemantic(opts.Version)
	if err != nil || !strings.HasPrefix(opts.Version, "v") {
		return Artifacts{}, fmt.Errorf("release version %q: want a semantic version with a leading v (v0.1.0)", opts.Version)
	}
	registry := opts.Registry
	if registry == "" {
		registry = DefaultRegistry
	}
	metadata, err := os.ReadFile(filepath.Join(opts.ConfigDir, "release", MetadataFile))
	if err != nil {
		return Artifacts{}, fmt.Errorf("read clusterctl metadata: %w", err)
	}
	if err := checkMetadata(metadata, v); err != nil {
		return Artifacts{}, err
	}
	objs, err := render(filepath.Join(opts.ConfigDir, "release"))
	if err != nil {
		return Artifacts{}, err
	}
	images := map[string]string{
		VarImage:      clusterctlVar(VarImage, registry+"/capi-inplace:"+opts.Version),
		VarAgentImage: clusterctlVar(VarAgentImage, registry+"/capi-inplace-agent:"+opts.Version),
	}
	if err := setImages(objs, images); err != nil {
		return Artifacts{}, err
	}
	components, err := marshal(objs)
	if err != nil {
		return Artifacts{}, err
	}
	return Artifacts{Version: opts.Version, Components: components, Metadata: metadata}, nil
}

// Write stores the artifacts as a clusterctl local repository does:
// <dir>/runtime-extension-capi-inplace/<version>/{runtime-extension-components.yaml,metadata.yaml}.
// The same two files are the assets of a release on GitHub. It returns the
// components file's path (a clusterctl provider URL is file://<that path>).
func Write(dir string, a Artifacts) (string, error) {
	out := filepath.Join(dir, ProviderLabel, a.Version)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("create release directory: %w", err)
	}
	for name, data := range map[string][]byte{ComponentsFile: a.Components, MetadataFile: a.Metadata} {
		if err := writeFileAtomic(filepath.Join(out, name), data); err != nil {
			return "", err
		}
	}
	return filepath.Join(out, ComponentsFile), nil
}

// clusterctlVar is a clusterctl variable with a default: ${NAME:=default}.
func clusterctlVar(name, def string) string {
	return "${" + name + ":=" + def + "}"
}

// checkMetadata makes sure clusterctl will accept the release: metadata.yaml decodes
// strictly, a release series covers the version, and its contract is the one of the
// Cluster API we build against (v1beta2 for v1.14).
func checkMetadata(data []byte, v *version.Version) error {
	m := &clusterctlv1.Metadata{}
	if err := yaml.UnmarshalStrict(data, m); err != nil {
		return fmt.Errorf("decode clusterctl metadata: %w", err)
	}
	if m.APIVersion != clusterctlv1.GroupVersion.String() || m.Kind != "Metadata" {
		return fmt.Errorf("clusterctl metadata is %s %s, want %s Metadata", m.APIVersion, m.Kind, clusterctlv1.GroupVersion)
	}
	series := m.GetReleaseSeriesForVersion(v)
	if series == nil {
		return fmt.Errorf("no release series %d.%d in clusterctl metadata for version %s: add one", v.Major(), v.Minor(), v)
	}
	if series.Contract != clusterv1.GroupVersion.Version {
		return fmt.Errorf("release series %d.%d names contract %s, but capi-inplace builds against Cluster API's %s", series.Major, series.Minor, series.Contract, clusterv1.GroupVersion.Version)
	}
	return nil
}

// render builds a kustomization directory, as `kustomize build` does.
func render(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("decode %s: %w", r.CurId(), err)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// setImages sets the extension container's image to images[VarImage] and its
// AGENT_IMAGE to images[VarAgentImage]. Each must be found exactly once: a renamed
// Deployment, container or variable fails the release instead of shipping an image
// no variable can change.
func setImages(objs []*unstructured.Unstructured, images map[string]string) error {
	var dep *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == deploymentName {
			dep = o
		}
	}
	if dep == nil {
		return fmt.Errorf("config/release renders no Deployment %s", deploymentName)
	}
	containers, _, err := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return fmt.Errorf("deployment %s: containers: %w", deploymentName, err)
	}
	var image, agentImage int
	for _, c := range containers {
		cm, ok := c.(map[string]any)
		if !ok || cm["name"] != containerName {
			continue
		}
		cm["image"] = images[VarImage]
		image++
		env, _ := cm["env"].([]any)
		for _, e := range env {
			em, ok := e.(map[string]any)
			if ok && em["name"] == agentImageEnvName {
				em["value"] = images[VarAgentImage]
				agentImage++
			}
		}
	}
	if image != 1 || agentImage != 1 {
		return fmt.Errorf("deployment %s: want one container %q with one %s variable, found %d containers and %d variables", deploymentName, containerName, agentImageEnvName, image, agentImage)
	}
	if err := unstructured.SetNestedSlice(dep.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		return fmt.Errorf("deployment %s: set containers: %w", deploymentName, err)
	}
	return nil
}

// marshal writes the objects as one multi-document YAML stream, in kustomize's order.
// Values holding a clusterctl variable are double-quoted: clusterctl substitutes the
// text before it parses the YAML, and an unquoted ${X:=false} would become a boolean
// where the API wants a string (the ExtensionConfig's settings).
func marshal(objs []*unstructured.Unstructured) ([]byte, error) {
	var buf bytes.Buffer
	for i, o := range objs {
		n, err := kyaml.FromMap(o.Object)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		quoteVariables(n.YNode())
		s, err := n.String()
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.WriteString(s)
	}
	return buf.Bytes(), nil
}

// quoteVariables double-quotes every scalar value that holds a clusterctl variable.
func quoteVariables(n *kyaml.Node) {
	if n.Kind == kyaml.ScalarNode && strings.Contains(n.Value, "${") {
		n.Style = kyaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		quoteVariables(c)
	}
}

// writeFileAtomic writes through a temporary file and a rename, so that an
// interrupted release never leaves a truncated file that looks complete.
func writeFileAtomic(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.Remove(tmp.Name()))
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", path, err), tmp.Close())
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
