//go:build e2e

package e2e

import (
	"sort"

	"encoding/json"
	"k8s.io/apimachinery/pkg/types"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func jsonValue(v any) (apiextensionsv1.JSON, error) {
	b, err := json.Marshal(v)
	return apiextensionsv1.JSON{Raw: b}, err
}

type typesUID = types.UID

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
