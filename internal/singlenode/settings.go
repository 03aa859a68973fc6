package singlenode

import (
	"context"

	"github.com/capi-inplace/capi-inplace/internal/extsettings"
)

// settings returns the planner's settings: Settings, overlaid by the spec.settings of
// the ExtensionConfig named ExtensionConfigName (read on every decision, so that
// disableInPlaceUpdates set on it takes effect as it does for the hooks, to which
// Cluster API passes the same settings). A missing ExtensionConfig adds nothing. The
// guard reads them through the same extsettings.Reader.
func (r *Reconciler) settings(ctx context.Context) (map[string]string, error) {
	return extsettings.Reader{Client: r.Client, Name: r.ExtensionConfigName, Defaults: r.Settings}.Settings(ctx)
}
