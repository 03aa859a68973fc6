package policy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDeliveryDocsExamplesParse: every policy example in docs/delivery.md (a
// yaml block whose first key is a policy field) is accepted by the policy loader,
// with its digest placeholders filled in, so the docs and Parse cannot drift apart.
// The kubernetesBinaries example's mirrors were refused before BinaryConfig had
// them.
func TestDeliveryDocsExamplesParse(t *testing.T) {
	raw, err := os.ReadFile("../../docs/delivery.md")
	if err != nil {
		t.Fatal(err)
	}
	placeholder := regexp.MustCompile(`sha256:(\.\.\.|<[^>]*>)`)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(raw), -1)
	policyKeys := map[string]bool{"backends": true, "artifacts": true, "kubernetesBinaries": true, "registryCredentials": true, "osBackends": true}
	seen := map[string]bool{}
	for _, b := range blocks {
		body := b[1]
		first := ""
		for _, l := range strings.Split(body, "\n") {
			if l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, " ") {
				first, _, _ = strings.Cut(l, ":")
				break
			}
		}
		if !policyKeys[first] {
			continue
		}
		seen[first] = true
		doc := placeholder.ReplaceAllString(body, "sha256:"+strings.Repeat("ab", 32))
		p, err := Parse([]byte(doc))
		if err != nil {
			t.Errorf("docs/delivery.md example starting with %s: %v\n%s", first, err, body)
			continue
		}
		if first == "kubernetesBinaries" {
			b, err := p.KubernetesBinaries("v1.36.3", "linux/amd64")
			if err != nil || b == nil || len(b.Kubeadm.Mirrors) == 0 {
				t.Errorf("the kubernetesBinaries example's kubeadm has no mirrors in the plan: %+v, %v", b, err)
			}
		}
	}
	for _, k := range []string{"backends", "kubernetesBinaries", "registryCredentials", "osBackends"} {
		if !seen[k] {
			t.Errorf("docs/delivery.md has no policy example starting with %s any more", k)
		}
	}
}
