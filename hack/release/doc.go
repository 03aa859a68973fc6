// Package release builds capi-inplace's release artifacts for clusterctl's provider
// contract: capi-inplace is a RuntimeExtensionProvider, installed with
// `clusterctl init --runtime-extension capi-inplace`. A release is two files:
//
//   - runtime-extension-components.yaml: config/release (config/default plus the
//     settings' clusterctl variables) rendered with kustomize's Go API, with the
//     extension's and the agent's images turned into the variables CAPI_INPLACE_IMAGE
//     and CAPI_INPLACE_AGENT_IMAGE (${NAME:=default}, defaulting to the release's tags);
//   - metadata.yaml: config/release/metadata.yaml, the release series and the Cluster
//     API contract each implements, checked against the version and against the
//     contract of the Cluster API module in go.mod.
//
// `make release-manifests` (cmd/release-manifests) writes them to
// _artifacts/release/runtime-extension-capi-inplace/<version>/, the layout of a
// clusterctl local repository; test/clusterctl installs, upgrades and deletes them
// with a real clusterctl against a real kube-apiserver.
//
// Imports: apimachinery, kustomize's api and kyaml, the Cluster API core and
// clusterctl API types, sigs.k8s.io/yaml.
package release
