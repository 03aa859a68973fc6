// Package coordinatortest starts the real kube-apiserver and etcd (envtest) for the
// coordinator's integration tests, optionally with Cluster API's CRDs (core and
// kubeadm bootstrap) from the module cache, so one API server can play both the
// management and the workload cluster.
//
// Imports: controller-runtime's envtest, client-go, apiextensions types; test support only.
package coordinatortest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is a running test control plane; nil Config means the tests skip.
type Env struct {
	Config     *rest.Config
	SkipReason string
	env        *envtest.Environment
}

// Main starts the environment, runs the package's tests and stops it. Without
// KUBEBUILDER_ASSETS the tests skip locally and fail in CI (CI set).
func Main(m *testing.M, withCAPI bool, out **Env) int {
	e := &Env{}
	*out = e
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make test` (it points it at bin/, built by `make tools`)")
			return 1
		}
		e.SkipReason = "KUBEBUILDER_ASSETS not set (run make test)"
		return m.Run()
	}
	e.env = &envtest.Environment{ErrorIfCRDPathMissing: true}
	if withCAPI {
		dirs, err := capiCRDDirs()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		e.env.CRDDirectoryPaths = dirs
		e.env.CRDs = []*apiextensionsv1.CustomResourceDefinition{InfraMachineCRD()}
	}
	cfg, err := e.env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start envtest (KUBEBUILDER_ASSETS=%s): %v\n", os.Getenv("KUBEBUILDER_ASSETS"), err)
		return 1
	}
	e.Config = cfg
	code := m.Run()
	if err := e.env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
	}
	return code
}

// Require returns the rest config or skips the test.
func (e *Env) Require(t *testing.T) *rest.Config {
	t.Helper()
	if e == nil || e.Config == nil {
		t.Skip(e.SkipReason)
	}
	return rest.CopyConfig(e.Config)
}

func capiCRDDirs() ([]string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api").Output()
	if err != nil {
		return nil, fmt.Errorf("locate sigs.k8s.io/cluster-api in the module cache: %w", err)
	}
	root := strings.TrimSpace(string(out))
	return []string{
		filepath.Join(root, "core", "config", "crd", "bases"),
		filepath.Join(root, "bootstrap", "kubeadm", "config", "crd", "bases"),
	}, nil
}

// InfraMachineGroup, InfraMachineVersion and InfraMachineKind name the stand-in
// infrastructure machine InfraMachineCRD serves.
const (
	InfraMachineGroup   = "infrastructure.cluster.x-k8s.io"
	InfraMachineVersion = "v1beta2"
	InfraMachineKind    = "DevMachine"
)

// InfraMachineCRD is a schema-less stand-in for an infrastructure provider's machine
// CRD (the kind and group of CAPD's DevMachine, whose CRD lives in a module the tests
// do not download): the coordinator reads the stored infrastructure machine of every
// Machine it updates, and only its spec matters to it.
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
