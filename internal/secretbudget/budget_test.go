package secretbudget

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestRefs(t *testing.T) {
	g := NewWithT(t)
	spec := &bootstrapv1.KubeadmConfigSpec{
		Files: []bootstrapv1.File{
			{Path: "/a", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "zz", Key: "k"}}},
			{Path: "/b", Content: "inline"},
			{Path: "/c", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "aa", Key: "k"}}},
		},
		Users: []bootstrapv1.User{{Name: "u", PasswdFrom: bootstrapv1.PasswdSource{Secret: bootstrapv1.SecretPasswdSource{Name: "zz", Key: "p"}}}},
	}
	g.Expect(Refs(spec)).To(Equal([]string{"aa", "zz"}))
	g.Expect(Refs(nil)).To(BeEmpty())

	// The same names from a KubeadmConfigTemplate read unstructured.
	u := &unstructured.Unstructured{Object: map[string]any{"kind": "KubeadmConfigTemplate", "spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"files":              []any{map[string]any{"path": "/a", "contentFrom": map[string]any{"secret": map[string]any{"name": "zz", "key": "k"}}}},
		"users":              []any{map[string]any{"name": "u", "passwdFrom": map[string]any{"secret": map[string]any{"name": "aa", "key": "p"}}}},
		"preKubeadmCommands": []any{"ignored"},
	}}}}}
	got, err := SpecAt(u, "spec", "template", "spec")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(Refs(got)).To(Equal([]string{"aa", "zz"}))
}

// countingReader serves a fake namespace's Secrets and counts the bodies read.
type countingReader struct {
	client.Reader
	gets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// namespace holds Secrets s0..s<count-1> of size bytes each, in namespace "ns".
func namespace(count, size int) *countingReader {
	b := fake.NewClientBuilder()
	for i := range count {
		b = b.WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%d", i)},
			Data: map[string][]byte{"k": []byte(strings.Repeat("x", size))}})
	}
	return &countingReader{Reader: b.Build()}
}

func referencing(names ...string) *bootstrapv1.KubeadmConfigSpec {
	spec := &bootstrapv1.KubeadmConfigSpec{}
	for i, n := range names {
		spec.Files = append(spec.Files, bootstrapv1.File{Path: fmt.Sprintf("/f%d", i),
			ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: n, Key: "k"}}})
	}
	return spec
}

// TestReadAndSizesCountAlike: Read (UpdateMachine) and Sizes (the guard and plan)
// give the same verdict by the one fold: a missing Secret is skipped, reading
// stops at the Secret that crosses the budget, and the error names the Secrets
// counted and the budget.
func TestReadAndSizesCountAlike(t *testing.T) {
	const size = 768 << 10 // three cross 2 MiB
	tests := []struct {
		name        string
		refs        []string
		wantOver    []string // the Secrets counted, when over
		wantMissing []string
		wantGets    int
	}{
		{name: "within the budget", refs: []string{"s0", "s1"}, wantGets: 2},
		{name: "over: stops at the third", refs: []string{"s0", "s1", "s2", "s3", "s4"}, wantOver: []string{"s0", "s1", "s2"}, wantGets: 3},
		{name: "a missing Secret is not counted", refs: []string{"s0", "later", "s1"}, wantMissing: []string{"later"}, wantGets: 3},
		{name: "a missing Secret does not hide the crossing", refs: []string{"s0", "s1", "later", "s2"}, wantOver: []string{"s0", "s1", "s2"}, wantMissing: []string{"later"}, wantGets: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := referencing(tt.refs...)

			r := namespace(5, size)
			got, err := Read(context.Background(), r, "ns", spec)
			g.Expect(r.gets).To(Equal(tt.wantGets))
			var over *OverBudgetError
			if tt.wantOver == nil {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(HaveLen(len(tt.refs) - len(tt.wantMissing)))
			} else {
				g.Expect(errors.As(err, &over)).To(BeTrue(), "%v", err)
				g.Expect(over.Counted).To(Equal(tt.wantOver))
				g.Expect(over.Referenced).To(Equal(len(tt.refs)))
				g.Expect(over.Bytes).To(BeNumerically(">", MaxBytes))
			}

			r = namespace(5, size)
			sizes := Sizes{}
			g.Expect(sizes.Read(context.Background(), r, "ns", spec)).To(Succeed())
			g.Expect(r.gets).To(Equal(tt.wantGets))
			g.Expect(sizes.Read(context.Background(), r, "ns", spec)).To(Succeed())
			g.Expect(r.gets).To(Equal(tt.wantGets), "a size read is not read again")
			checked, missing, err := sizes.Check(spec)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(missing).To(Equal(tt.wantMissing))
			if over == nil {
				g.Expect(checked).To(BeNil())
			} else {
				g.Expect(checked).To(Equal(over))
				g.Expect(checked.Error()).To(Equal(over.Error()))
			}
		})
	}
}

// TestSizesCheckNeedsRead: a size the rule needs and Read did not record is an
// error, never a silent "not counted".
func TestSizesCheckNeedsRead(t *testing.T) {
	g := NewWithT(t)
	_, _, err := Sizes{"s0": 10}.Check(referencing("s0", "s1"))
	g.Expect(err).To(MatchError(ContainSubstring("the size of Secret s1 was not read")))
}

func TestOverBudgetErrorNamesTheSecretsAndTheBudget(t *testing.T) {
	g := NewWithT(t)
	e := &OverBudgetError{Referenced: 12, Counted: []string{"s0", "s1", "s2"}, Bytes: 2200000}
	g.Expect(e.Error()).To(Equal("the 12 Secrets the KubeadmConfig references hold more than 2097152 bytes (2 MiB), the budget of one in-place update: " +
		"3 of them (s0, s1, s2) hold 2200000 bytes, passed at Secret s2; reference fewer or smaller Secrets"))
	e.Counted = []string{"a", "b", "c", "d", "e", "f", "g"}
	g.Expect(e.Error()).To(ContainSubstring("7 of them (a, b, c, d, ..., g) hold"))
}
