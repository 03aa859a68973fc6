package clusterctl_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/capi-inplace/capi-inplace/hack/release"
)

// certManagerVersion is the cert-manager whose CRDs the local repository serves as
// cert-manager.yaml (config/config_test.go validates the manifests against the same).
const certManagerVersion = "v1.21.2"

// capiVersion is the Cluster API release of go.mod (and of bin/clusterctl).
const capiVersion = "v1.14.2"

// capiProvider is one Cluster API provider of the local repository, rendered from the
// Cluster API module's config/ as upstream's `make release-manifests` renders it.
type capiProvider struct {
	name, providerType, label, kustomization, file string
}

var capiProviders = []capiProvider{
	{"cluster-api", "CoreProvider", "cluster-api", "core/config/default", "core-components.yaml"},
	{"kubeadm", "BootstrapProvider", "bootstrap-kubeadm", "bootstrap/kubeadm/config/default", "bootstrap-components.yaml"},
	{"kubeadm", "ControlPlaneProvider", "control-plane-kubeadm", "controlplane/kubeadm/config/default", "control-plane-components.yaml"},
}

// localRepository is a clusterctl local repository
// ({dir}/{provider label}/{version}/{components file}) and the clusterctl
// configuration that points at it.
type localRepository struct {
	dir        string
	configPath string
}

// newLocalRepository writes the Cluster API providers, cert-manager and the given
// capi-inplace releases into dir, and a clusterctl configuration naming them.
func newLocalRepository(t *testing.T, dir string, releases ...release.Artifacts) localRepository {
	t.Helper()
	capiDir := moduleDir(t, "sigs.k8s.io/cluster-api", "")
	metadata, err := os.ReadFile(filepath.Join(capiDir, "metadata.yaml"))
	if err != nil {
		t.Fatalf("read Cluster API's metadata.yaml: %v", err)
	}
	var cfg strings.Builder
	cfg.WriteString("providers:\n")
	for _, p := range capiProviders {
		out := filepath.Join(dir, p.label, capiVersion)
		writeFile(t, filepath.Join(out, p.file), renderCAPI(t, filepath.Join(capiDir, p.kustomization)))
		writeFile(t, filepath.Join(out, "metadata.yaml"), metadata)
		fmt.Fprintf(&cfg, "- name: %s\n  type: %s\n  url: file://%s\n", p.name, p.providerType, filepath.Join(out, p.file))
	}
	var latest string
	for _, a := range releases {
		path, err := release.Write(dir, a)
		if err != nil {
			t.Fatalf("write release %s: %v", a.Version, err)
		}
		latest = path // clusterctl reads the other versions from the directory next to it
	}
	fmt.Fprintf(&cfg, "- name: %s\n  type: RuntimeExtensionProvider\n  url: file://%s\n", release.ProviderName, latest)

	certManager := filepath.Join(dir, "cert-manager", certManagerVersion, "cert-manager.yaml")
	writeFile(t, certManager, certManagerComponents(t))
	fmt.Fprintf(&cfg, "cert-manager:\n  url: file://%s\n  version: %s\n  timeout: 2m\n", certManager, certManagerVersion)
	// No network here: clusterctl's check for a newer clusterctl asks GitHub.
	cfg.WriteString("CLUSTERCTL_DISABLE_VERSIONCHECK: \"true\"\n")

	configPath := filepath.Join(dir, "clusterctl.yaml")
	writeFile(t, configPath, []byte(cfg.String()))
	return localRepository{dir: dir, configPath: configPath}
}

// renderCAPI builds one of Cluster API's config/default kustomizations and leaves out
// its admission webhook configurations: no pod serves them here, and with their
// failurePolicy Fail the API server would refuse every ExtensionConfig (Cluster API's
// core validates and defaults ExtensionConfigs by webhook). Everything else, CRDs
// included, is upstream's release content.
func renderCAPI(t *testing.T, dir string) []byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var docs [][]byte
	for _, r := range resMap.Resources() {
		switch r.GetKind() {
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			continue
		}
		b, err := r.AsYAML()
		if err != nil {
			t.Fatalf("encode %s: %v", r.CurId(), err)
		}
		docs = append(docs, b)
	}
	return bytes.Join(docs, []byte("---\n"))
}

// certManagerComponents is what clusterctl installs as cert-manager: its namespace
// and its CRDs from cert-manager's Go module (deploy/crds). Its controllers,
// cainjector and webhook are left out: no pod would run them, and the webhook's
// configuration (failurePolicy Fail) would refuse every cert-manager object, so
// clusterctl's readiness check (it creates a test Issuer and Certificate) would
// never pass.
func certManagerComponents(t *testing.T) []byte {
	t.Helper()
	crdDir := filepath.Join(moduleDir(t, "github.com/cert-manager/cert-manager", certManagerVersion), "deploy", "crds")
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cert-manager CRDs in %s: %v", crdDir, err)
	}
	sort.Strings(files)
	docs := [][]byte{[]byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cert-manager\n")}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		docs = append(docs, bytes.TrimPrefix(bytes.TrimSpace(b), []byte("---\n")))
	}
	return bytes.Join(docs, []byte("\n---\n"))
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// moduleDir returns a module's directory in the module cache. With no version it is
// the version our go.mod selects; with a version the module is downloaded (once) with
// `go mod download`, outside our module so that go.mod and go.sum stay untouched.
func moduleDir(t *testing.T, path, version string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to locate %s in the module cache: %v", path, err)
	}
	var cmd *exec.Cmd
	if version == "" {
		cmd = exec.Command(goBin, "list", "-m", "-json", path)
	} else {
		cmd = exec.Command(goBin, "mod", "download", "-json", path+"@"+version)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, out, stderr.String())
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: decode: %v", strings.Join(cmd.Args, " "), err)
	}
	if m.Dir == "" {
		t.Fatalf("%s: no directory (%s)", strings.Join(cmd.Args, " "), m.Error)
	}
	return m.Dir
}
