package localstack

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Provider names the upstream provider whose CRDs, webhooks and manager the stack runs.
type Provider string

// The providers of the stack, in start order.
const (
	ProviderCore      Provider = "core"
	ProviderKCP       Provider = "kcp"
	ProviderBootstrap Provider = "bootstrap"
	ProviderDev       Provider = "dev"
)

// Providers lists every provider the stack runs.
var providers = []Provider{ProviderCore, ProviderKCP, ProviderBootstrap, ProviderDev}

// contractLabels are the labels clusterctl's kustomize layers add to provider CRDs; the
// topology controller reads them to find a provider's contract version.
func contractLabels() map[string]string {
	return map[string]string{
		"cluster.x-k8s.io/v1beta1": "v1beta1",
		"cluster.x-k8s.io/v1beta2": "v1beta2",
	}
}

// withContractLabels returns a copy of crd with the contract labels added (existing
// labels win, so an upstream label is never overwritten).
func withContractLabels(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	out := crd.DeepCopy()
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	for k, v := range contractLabels() {
		if _, ok := out.Labels[k]; !ok {
			out.Labels[k] = v
		}
	}
	return out
}

// splitYAML splits a multi-document YAML stream into its non-empty documents.
func splitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split yaml: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 || bytes.Equal(bytes.TrimSpace(doc), []byte("---")) {
			continue
		}
		docs = append(docs, doc)
	}
}

// loadCRDs reads every CRD of dir (*.yaml, sorted) with the contract labels added.
func loadCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("list CRDs in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s (run make tools-capi)", dir)
	}
	sort.Strings(files)
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read CRD file: %w", err)
		}
		docs, err := splitYAML(data)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		for _, doc := range docs {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(doc, crd); err != nil {
				return nil, fmt.Errorf("decode CRD in %s: %w", f, err)
			}
			if crd.Kind != "CustomResourceDefinition" {
				continue
			}
			crds = append(crds, withContractLabels(crd))
		}
	}
	return crds, nil
}

// providerWebhooks holds one provider's admission webhook configurations, renamed so
// that the providers' identically named configurations can coexist.
type providerWebhooks struct {
	mutating   []*admissionregistrationv1.MutatingWebhookConfiguration
	validating []*admissionregistrationv1.ValidatingWebhookConfiguration
}

// loadWebhooks reads a provider's config/webhook/manifests.yaml and prefixes every
// configuration name with the provider name.
func loadWebhooks(path string, p Provider) (providerWebhooks, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return providerWebhooks{}, fmt.Errorf("read webhooks of %s: %w", p, err)
	}
	docs, err := splitYAML(data)
	if err != nil {
		return providerWebhooks{}, fmt.Errorf("read %s: %w", path, err)
	}
	var out providerWebhooks
	for _, doc := range docs {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return providerWebhooks{}, fmt.Errorf("decode %s: %w", path, err)
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			w := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.Unmarshal(doc, w); err != nil {
				return providerWebhooks{}, fmt.Errorf("decode mutating webhooks in %s: %w", path, err)
			}
			w.Name = string(p) + "-" + w.Name
			out.mutating = append(out.mutating, w)
		case "ValidatingWebhookConfiguration":
			w := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.Unmarshal(doc, w); err != nil {
				return providerWebhooks{}, fmt.Errorf("decode validating webhooks in %s: %w", path, err)
			}
			w.Name = string(p) + "-" + w.Name
			out.validating = append(out.validating, w)
		}
	}
	return out, nil
}
