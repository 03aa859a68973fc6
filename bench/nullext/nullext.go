// Package nullext is the floor of the rollout benchmark: a runtime extension that
// answers the CanUpdate hooks exactly as capi-inplace does (the same planner
// handlers, so CAPI takes the same in-place path for the same changes) and
// completes every UpdateMachine on the first call (Success, retryAfterSeconds 0)
// without touching any node. A rollout with it costs only Cluster API's own
// reconcile cadence; capi-inplace's rollout time divided by it is our
// orchestration overhead.
//
// Imports: internal/extension, internal/coordinator (Outcome), internal/policy, Cluster API hook types,
// prometheus. Benchmark code only: it lies about work done by design.
package nullext

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/capi-inplace/capi-inplace/internal/coordinator"
	"github.com/capi-inplace/capi-inplace/internal/extension"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// Message is UpdateMachine's answer.
const Message = "null extension: nothing to do"

// Updater completes every UpdateMachine at once.
type Updater struct{}

var _ extension.MachineUpdater = Updater{}

// Update answers done (Success with retryAfterSeconds 0 on the wire).
func (Updater) Update(context.Context, *runtimehooksv1.UpdateMachineRequest) coordinator.Outcome {
	return coordinator.Outcome{Kind: coordinator.OutcomeDone, Message: Message}
}

// NewHandlers returns capi-inplace's hook handlers with the built-in policy and the
// null Updater behind UpdateMachine.
func NewHandlers(reg prometheus.Registerer) (*extension.Handlers, error) {
	m, err := extension.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("null extension metrics: %w", err)
	}
	return extension.NewHandlers(extension.Options{Policy: policy.Builtin(), Updater: Updater{}, Metrics: m})
}
