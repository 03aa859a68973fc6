package secretbudget

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MaxBytes bounds the Secrets one update reads for a KubeadmConfig's files and
// users (Bytes of each, summed): the plan they go into carries at most 768 KiB
// (nodeplan), and the CRD lets a config reference 300 Secrets of up to about a
// megabyte each, which a namespace editor chooses.
const MaxBytes int64 = 2 << 20

// OverheadBytes is what a Secret costs in memory beyond its data and metadata
// maps (the object, its strings and a cache's bookkeeping).
const OverheadBytes = 1 << 10

// Bytes is what a Secret holds in memory, decoded: its data (and stringData) keys
// and values, its labels, annotations and managed fields, and OverheadBytes. It is
// the size the budget counts and the extension's Secret cache is bounded by.
func Bytes(sec *corev1.Secret) int64 {
	n := int64(OverheadBytes)
	for k, v := range sec.Data {
		n += int64(len(k) + len(v))
	}
	for k, v := range sec.StringData {
		n += int64(len(k) + len(v))
	}
	for k, v := range sec.Labels {
		n += int64(len(k) + len(v))
	}
	for k, v := range sec.Annotations {
		n += int64(len(k) + len(v))
	}
	for _, mf := range sec.ManagedFields {
		if mf.FieldsV1 != nil {
			n += int64(len(mf.FieldsV1.GetRawBytes()))
		}
	}
	return n
}

// Refs returns the names of the Secrets spec's files (contentFrom.secret) and
// users (passwdFrom.secret) reference, sorted and unique: the order the budget
// is counted in.
func Refs(spec *bootstrapv1.KubeadmConfigSpec) []string {
	if spec == nil {
		return nil
	}
	set := map[string]bool{}
	for _, f := range spec.Files {
		if f.ContentFrom.Secret.Name != "" {
			set[f.ContentFrom.Secret.Name] = true
		}
	}
	for _, u := range spec.Users {
		if u.PasswdFrom.Secret.Name != "" {
			set[u.PasswdFrom.Secret.Name] = true
		}
	}
	out := make([]string, 0, len(set))
	for name := range set {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// SpecAt returns the part of an unstructured bootstrap object's KubeadmConfigSpec,
// at path ("spec" for a KubeadmConfig, "spec", "template", "spec" for a
// KubeadmConfigTemplate), that references Secrets: its files and users.
func SpecAt(u *unstructured.Unstructured, path ...string) (*bootstrapv1.KubeadmConfigSpec, error) {
	spec := &bootstrapv1.KubeadmConfigSpec{}
	part := map[string]any{}
	for _, field := range []string{"files", "users"} {
		v, found, err := unstructured.NestedFieldNoCopy(u.Object, append(append([]string(nil), path...), field)...)
		if err != nil {
			return nil, fmt.Errorf("%s %s %s.%s: %w", u.GetKind(), u.GetName(), strings.Join(path, "."), field, err)
		}
		if found {
			part[field] = v
		}
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(part, spec); err != nil {
		return nil, fmt.Errorf("%s %s %s files and users: %w", u.GetKind(), u.GetName(), strings.Join(path, "."), err)
	}
	return spec, nil
}

// OverBudgetError says the Secrets a KubeadmConfig references hold more than
// MaxBytes. UpdateMachine's and the CanUpdate hooks' failures, the guard's
// refusal and plan's reason all give its sentence.
type OverBudgetError struct {
	// Referenced is how many Secrets the configuration references.
	Referenced int
	// Counted are the existing Secrets counted, in order, up to the one that
	// crossed the budget (the last); Bytes is their sum.
	Counted []string
	Bytes   int64
}

// maxNamed bounds the Secrets an OverBudgetError names: a configuration may
// reference 300.
const maxNamed = 5

func (e *OverBudgetError) Error() string {
	named := strings.Join(e.Counted, ", ")
	if len(e.Counted) > maxNamed {
		named = strings.Join(e.Counted[:maxNamed-1], ", ") + ", ..., " + e.Counted[len(e.Counted)-1]
	}
	return fmt.Sprintf("the %d Secrets the KubeadmConfig references hold more than %d bytes (2 MiB), the budget of one in-place update: "+
		"%d of them (%s) hold %d bytes, passed at Secret %s; reference fewer or smaller Secrets",
		e.Referenced, MaxBytes, len(e.Counted), named, e.Bytes, e.Counted[len(e.Counted)-1])
}

// errNotFound marks, to fold, a referenced Secret that does not exist.
var errNotFound = errors.New("secret not found")

// fold is the rule: names in order, each one's size from size (errNotFound: the
// Secret does not exist and is skipped), summed, stopping at the first that
// crosses MaxBytes with an *OverBudgetError; any other error of size ends it.
func fold(names []string, size func(name string) (int64, error)) error {
	var (
		total   int64
		counted []string
	)
	for _, name := range names {
		n, err := size(name)
		switch {
		case errors.Is(err, errNotFound):
			continue
		case err != nil:
			return err
		}
		counted = append(counted, name)
		if total += n; total > MaxBytes {
			return &OverBudgetError{Referenced: len(names), Counted: counted, Bytes: total}
		}
	}
	return nil
}

// Read reads the Secrets spec references in namespace, through r, by name, and
// returns those that exist. Over MaxBytes it fails with an *OverBudgetError,
// having read no Secret after the one that crossed the budget; an error reading a
// Secret is returned wrapped.
func Read(ctx context.Context, r client.Reader, namespace string, spec *bootstrapv1.KubeadmConfigSpec) (map[string]*corev1.Secret, error) {
	out := map[string]*corev1.Secret{}
	err := fold(Refs(spec), func(name string) (int64, error) {
		sec, err := get(ctx, r, namespace, name)
		if err != nil {
			return 0, err
		}
		out[name] = sec
		return Bytes(sec), nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func get(ctx context.Context, r client.Reader, namespace, name string) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return nil, errNotFound
	case err != nil:
		return nil, fmt.Errorf("read secret %s/%s: %w", namespace, name, err)
	}
	return sec, nil
}

// NotFound is the size Sizes records for a Secret that does not exist.
const NotFound int64 = -1

// Sizes are the Bytes of one namespace's Secrets by name, as read (NotFound for
// one that does not exist): what the guard and plan read once and check every
// configuration of a Cluster against without holding a Secret's body.
type Sizes map[string]int64

// Read reads, through r, the Secrets spec references in namespace that s does not
// hold yet, in the budget's order, and records their sizes; it stops where the
// budget is crossed, as Read does, so Check finds every size it needs. An over
// budget is no error here (Check reports it); a failure to read a Secret is.
func (s Sizes) Read(ctx context.Context, r client.Reader, namespace string, spec *bootstrapv1.KubeadmConfigSpec) error {
	err := fold(Refs(spec), func(name string) (int64, error) {
		if n, ok := s[name]; ok {
			return known(n)
		}
		sec, err := get(ctx, r, namespace, name)
		switch {
		case errors.Is(err, errNotFound):
			s[name] = NotFound
			return 0, err
		case err != nil:
			return 0, err
		}
		s[name] = Bytes(sec)
		return s[name], nil
	})
	if over := (*OverBudgetError)(nil); errors.As(err, &over) {
		return nil
	}
	return err
}

// Check applies the budget to the Secrets spec references with the sizes s holds:
// over is set when they cross MaxBytes, missing lists the referenced Secrets
// counted as not existing. An error means s lacks a size the rule needs (Read was
// not called for spec).
func (s Sizes) Check(spec *bootstrapv1.KubeadmConfigSpec) (over *OverBudgetError, missing []string, err error) {
	err = fold(Refs(spec), func(name string) (int64, error) {
		n, ok := s[name]
		if !ok {
			return 0, fmt.Errorf("the size of Secret %s was not read", name)
		}
		if n == NotFound {
			missing = append(missing, name)
		}
		return known(n)
	})
	if errors.As(err, &over) {
		return over, missing, nil
	}
	return nil, missing, err
}

func known(n int64) (int64, error) {
	if n == NotFound {
		return 0, errNotFound
	}
	return n, nil
}
