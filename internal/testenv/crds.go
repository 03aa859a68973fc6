package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// CRDSet is one of Cluster API's CRD directories in the module cache.
type CRDSet int

const (
	// CAPICore is core/config/crd/bases of sigs.k8s.io/cluster-api (the version go.mod
	// selects): Cluster, Machine, MachineSet, MachineDeployment, ClusterClass, ...,
	// and runtime.cluster.x-k8s.io's ExtensionConfig.
	CAPICore CRDSet = iota + 1
	// KubeadmBootstrap is bootstrap/kubeadm/config/crd/bases (KubeadmConfig).
	KubeadmBootstrap
	// KubeadmControlPlane is controlplane/kubeadm/config/crd/bases.
	KubeadmControlPlane
	// DockerInfra is the Dev (Docker) provider's CRDs, from sigs.k8s.io/cluster-api/test
	// as hack/tools/capi/go.mod pins it (present once `make tools` ran).
	DockerInfra
)

func capiDirs(sets []CRDSet) ([]string, error) {
	var capi, capiTest string
	var dirs []string
	for _, s := range sets {
		var err error
		switch s {
		case CAPICore, KubeadmBootstrap, KubeadmControlPlane:
			if capi == "" {
				if capi, err = ModuleDir("", "sigs.k8s.io/cluster-api"); err != nil {
					return nil, err
				}
			}
			sub := map[CRDSet]string{CAPICore: "core", KubeadmBootstrap: "bootstrap/kubeadm", KubeadmControlPlane: "controlplane/kubeadm"}[s]
			dirs = append(dirs, filepath.Join(capi, filepath.FromSlash(sub), "config", "crd", "bases"))
		case DockerInfra:
			if capiTest == "" {
				if capiTest, err = ModuleDir(filepath.Join(repoRoot(), "hack", "tools", "capi"), "sigs.k8s.io/cluster-api/test"); err != nil {
					return nil, err
				}
			}
			dirs = append(dirs, filepath.Join(capiTest, "infrastructure", "docker", "config", "crd", "bases"))
		default:
			return nil, fmt.Errorf("unknown CRD set %d", s)
		}
	}
	return dirs, nil
}

// ModuleDir is a module's directory in the module cache at the version the
// module in dir ("" for the current directory) requires. `go mod download`
// fetches it when the cache does not hold it yet (`go list -m` would answer an
// empty directory: whether a test found the module then hung on which other
// package's test had downloaded it first).
func ModuleDir(dir, module string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate %s in the module cache: %w: %s%s", module, err, out, stderr.String())
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("locate %s in the module cache: %w", module, err)
	}
	if m.Dir == "" {
		return "", fmt.Errorf("locate %s in the module cache: %s", module, m.Error)
	}
	return m.Dir, nil
}

// repoRoot is the module's root, two levels above this file.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// ReadCRDs decodes every CustomResourceDefinition in the YAML files of dirs and
// labels each with both Cluster API contract versions.
func ReadCRDs(dirs ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, dir := range dirs {
		paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return nil, fmt.Errorf("list CRDs in %s: %w", dir, err)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("no CRDs in %s", dir)
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("read CRDs: %w", err)
			}
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
			for {
				var raw map[string]any
				if err := dec.Decode(&raw); err != nil {
					break
				}
				if raw["kind"] != "CustomResourceDefinition" {
					continue
				}
				b, err := sigsyaml.Marshal(raw)
				if err != nil {
					return nil, fmt.Errorf("encode CRD in %s: %w", p, err)
				}
				crd := &apiextensionsv1.CustomResourceDefinition{}
				if err := sigsyaml.Unmarshal(b, crd); err != nil {
					return nil, fmt.Errorf("decode CRD in %s: %w", p, err)
				}
				if crd.Labels == nil {
					crd.Labels = map[string]string{}
				}
				crd.Labels["cluster.x-k8s.io/v1beta1"] = "v1beta1"
				crd.Labels["cluster.x-k8s.io/v1beta2"] = "v1beta2"
				out = append(out, crd)
			}
		}
	}
	return out, nil
}

// InfraMachineGroup, InfraMachineVersion and InfraMachineKind name the stand-in
// infrastructure machine InfraMachineCRD serves.
const (
	InfraMachineGroup   = "infrastructure.cluster.x-k8s.io"
	InfraMachineVersion = "v1beta2"
	InfraMachineKind    = "DevMachine"
)

// InfraMachineCRD is a schema-less stand-in for an infrastructure provider's machine
// CRD (the kind and group of CAPD's DevMachine, whose CRD lives in a module the
// coordinator's tests do not download): the coordinator reads the stored
// infrastructure machine of every Machine it updates, and only its spec matters to it.
func InfraMachineCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		// TypeMeta too, for writing it into a CRD directory.
		TypeMeta: metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   "devmachines." + InfraMachineGroup,
			Labels: map[string]string{"cluster.x-k8s.io/v1beta2": InfraMachineVersion},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: InfraMachineGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "devmachines", Singular: "devmachine", Kind: InfraMachineKind, ListKind: InfraMachineKind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: InfraMachineVersion, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
}
