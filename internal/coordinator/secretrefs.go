package coordinator

import (
	"context"
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
			return nil, fmt.Errorf("%w: %w: the %d Secrets the KubeadmConfig references hold more than %d bytes (passed at Secret %s, %d of them); reference fewer or smaller Secrets",
				nodeplan.ErrInput, nodeplan.ErrTooLarge, len(names), MaxReferencedSecretBytes, name, i+1)
		}
		out[name] = sec.Data
	}
	return out, nil
}
