package coordinator

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
)

// MaxReferencedSecretBytes bounds the Secrets one call reads for a KubeadmConfig's
// files and users (SecretBytes of each, summed): the plan they go into carries at
// most 768 KiB (nodeplan), and the CRD lets a config reference 300 Secrets of up to
// about a megabyte each, which a namespace editor chooses. Reading stops at the
// Secret that crosses the bound, so one call holds at most this plus one Secret,
// whatever the namespace holds.
const MaxReferencedSecretBytes int64 = 2 << 20

// overBudgetError says a KubeadmConfig's Secrets are over
// MaxReferencedSecretBytes: UpdateMachine's failure and the CanUpdate hooks'
// refusal give the same sentence.
type overBudgetError struct {
	count, read int
	crossing    string
}

func (e *overBudgetError) Error() string {
	return fmt.Sprintf("the %d Secrets the KubeadmConfig references hold more than %d bytes (passed at Secret %s, %d of them); reference fewer or smaller Secrets",
		e.count, MaxReferencedSecretBytes, e.crossing, e.read)
}

// referencedSecrets reads the Secrets cfg references in namespace, by name; a
// missing one is left out (nodeplan.Build reports it with the file that needs it).
// Over MaxReferencedSecretBytes it fails with nodeplan.ErrInput and
// nodeplan.ErrTooLarge: the desired objects must change.
func referencedSecrets(ctx context.Context, r client.Reader, namespace string, cfg *bootstrapv1.KubeadmConfig) (map[string]map[string][]byte, error) {
	out := map[string]map[string][]byte{}
	var total int64
	names := nodeplan.SecretRefs(cfg)
	for i, name := range names {
		sec := &corev1.Secret{}
		err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sec)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("%w: read secret %s/%s: %w", nodeplan.ErrInput, namespace, name, err)
		}
		if total += SecretBytes(sec); total > MaxReferencedSecretBytes {
			return nil, fmt.Errorf("%w: %w: %w", nodeplan.ErrInput, nodeplan.ErrTooLarge, &overBudgetError{count: len(names), read: i + 1, crossing: name})
		}
		out[name] = sec.Data
	}
	return out, nil
}

// ReferencedSecretsOverBudget reads, through r, the Secrets spec's files and
// users reference in namespace, as UpdateMachine does, so that the CanUpdate
// hooks can refuse a configuration UpdateMachine would fail on only after
// Cluster API committed to the in-place update. reason is set when they exceed
// MaxReferencedSecretBytes (reading stops at the Secret that crosses it); err
// is a failure to read them.
func ReferencedSecretsOverBudget(ctx context.Context, r client.Reader, namespace string, spec *bootstrapv1.KubeadmConfigSpec) (reason string, err error) {
	_, err = referencedSecrets(ctx, r, namespace, &bootstrapv1.KubeadmConfig{Spec: *spec})
	if over := (*overBudgetError)(nil); errors.As(err, &over) {
		return over.Error(), nil
	}
	return "", err
}
