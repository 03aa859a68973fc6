// Package coordinatortest is the coordinator's envtest setup on top of
// internal/testenv: the real kube-apiserver and etcd, optionally with Cluster API's
// CRDs (core and kubeadm bootstrap) from the module cache and the stand-in
// infrastructure machine, so one API server can play both the management and the
// workload cluster. It stays for its remaining users (the coordinator's, drain's and
// agentinstall's tests); new tests use internal/testenv.
//
// Imports: internal/testenv; test support only.
package coordinatortest

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// Env is a running test control plane; nil Config means the tests skip.
type Env = testenv.Env

// Options is the coordinator's CRD selection: with withCAPI, Cluster API's core
// and kubeadm bootstrap CRDs and the stand-in infrastructure machine.
func Options(withCAPI bool) testenv.Options {
	if !withCAPI {
		return testenv.Options{}
	}
	return testenv.Options{CAPI: []testenv.CRDSet{testenv.CAPICore, testenv.KubeadmBootstrap}, InfraMachine: true}
}

// Main starts the environment, runs the package's tests and stops it (testenv.Main
// with Options(withCAPI)).
func Main(m *testing.M, withCAPI bool, out **Env) int {
	return testenv.Main(m, Options(withCAPI), out)
}

// InfraMachineGroup, InfraMachineVersion and InfraMachineKind name the stand-in
// infrastructure machine InfraMachineCRD serves.
const (
	InfraMachineGroup   = testenv.InfraMachineGroup
	InfraMachineVersion = testenv.InfraMachineVersion
	InfraMachineKind    = testenv.InfraMachineKind
)

// InfraMachineCRD is testenv.InfraMachineCRD.
func InfraMachineCRD() *apiextensionsv1.CustomResourceDefinition { return testenv.InfraMachineCRD() }
