package coordinator

import (
	"context"
	"errors"
	"fmt"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/secretbudget"
)

// referencedSecrets reads the Secrets cfg references in namespace, by name, under
// the budget the hooks and the guard count by (secretbudget.Read); a missing one is
// left out (nodeplan.Build reports it with the file that needs it). Over
// secretbudget.MaxBytes it fails with nodeplan.ErrInput and nodeplan.ErrTooLarge:
// the desired objects must change.
func referencedSecrets(ctx context.Context, r client.Reader, namespace string, cfg *bootstrapv1.KubeadmConfig) (map[string]map[string][]byte, error) {
	secrets, err := secretbudget.Read(ctx, r, namespace, &cfg.Spec)
	if over := (*secretbudget.OverBudgetError)(nil); errors.As(err, &over) {
		return nil, fmt.Errorf("%w: %w: %w", nodeplan.ErrInput, nodeplan.ErrTooLarge, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", nodeplan.ErrInput, err)
	}
	out := make(map[string]map[string][]byte, len(secrets))
	for name, sec := range secrets {
		out[name] = sec.Data
	}
	return out, nil
}
