package extension

import (
	"crypto/tls"
	"errors"
	"fmt"

	"k8s.io/utils/ptr"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/capi-inplace/capi-inplace/internal/planner"
)

// Handler names, as they appear in discovery and in the ExtensionConfig's status.
const (
	HandlerCanUpdateMachine    = "can-update-machine"
	HandlerCanUpdateMachineSet = "can-update-machineset"
	HandlerUpdateMachine       = "update-machine"
	// HandlerGenerateUpgradePlan is what a ClusterClass names in
	// spec.upgrade.external.generateUpgradePlanExtension, with the ExtensionConfig's
	// name: "generate-upgrade-plan.<ExtensionConfig>".
	HandlerGenerateUpgradePlan = planner.UpgradePlanHandler
)

// updateMachineTimeoutSeconds is UpdateMachine's timeout: the coordinator talks to
// the workload cluster, so it gets the most CAPI allows. The CanUpdate hooks are
// pure computation and keep CAPI's default (10s).
const updateMachineTimeoutSeconds = 30

// ServerOptions configure the hook server.
type ServerOptions struct {
	// Host and Port to listen on; Port defaults to 9443.
	Host string
	Port int
	// CertDir holds tls.crt and tls.key; controller-runtime's certwatcher reloads
	// them when they change.
	CertDir string
	// TLSOpts adjust the TLS configuration (e.g. minimum version).
	TLSOpts []func(*tls.Config)
	// MaxRequestBodyBytes bounds one request body (413 above it);
	// 0 means DefaultMaxRequestBodyBytes.
	MaxRequestBodyBytes int64
	// MaxInFlightBodyBytes bounds the bodies this port handles at once, weighted by
	// size (later requests wait); 0 means DefaultMaxInFlightBodyBytes.
	MaxInFlightBodyBytes int64
}

// NewServer returns the runtime hook server (a controller-runtime Runnable that
// needs no leader election) with the four handlers registered; discovery is added
// when it starts. Every handler served on it, including ones registered later with
// Register, is bounded by the port's request limits (see limits.go).
func NewServer(h *Handlers, opts ServerOptions) (*server.Server, error) {
	if h == nil {
		return nil, errors.New("hook server needs handlers")
	}
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return nil, fmt.Errorf("build runtime hook catalog: %w", err)
	}
	srv, err := server.New(server.Options{
		Catalog: catalog,
		Host:    opts.Host,
		Port:    opts.Port,
		CertDir: opts.CertDir,
		TLSOpts: opts.TLSOpts,
	})
	if err != nil {
		return nil, fmt.Errorf("create hook server: %w", err)
	}
	// Every handler registered on the server (the hooks when it starts, the hold
	// webhook and the guard through Register when they share the port) goes through
	// the port's request limits, and the port bounds its connections.
	bounded, err := newBoundedServer(opts, nil)
	if err != nil {
		return nil, fmt.Errorf("create hook server: %w", err)
	}
	srv.Server = bounded
	fail := ptr.To(runtimehooksv1.FailurePolicyFail)
	for _, eh := range []server.ExtensionHandler{
		{Hook: runtimehooksv1.CanUpdateMachine, Name: HandlerCanUpdateMachine, HandlerFunc: h.DoCanUpdateMachine, FailurePolicy: fail},
		{Hook: runtimehooksv1.CanUpdateMachineSet, Name: HandlerCanUpdateMachineSet, HandlerFunc: h.DoCanUpdateMachineSet, FailurePolicy: fail},
		{Hook: runtimehooksv1.UpdateMachine, Name: HandlerUpdateMachine, HandlerFunc: h.DoUpdateMachine, FailurePolicy: fail,
			TimeoutSeconds: ptr.To[int32](updateMachineTimeoutSeconds)},
		{Hook: runtimehooksv1.GenerateUpgradePlan, Name: HandlerGenerateUpgradePlan, HandlerFunc: h.DoGenerateUpgradePlan, FailurePolicy: fail},
	} {
		if err := srv.AddExtensionHandler(eh); err != nil {
			return nil, fmt.Errorf("register %s handler: %w", eh.Name, err)
		}
	}
	return srv, nil
}

// NewAdmissionServer returns the HTTPS server of the admission webhooks' own port
// (the hold webhook and the guard): the same request limits as the hook server's
// (built by NewServer), with budgets of its own within the process's, so that no
// client of the admission port (which every pod may reach) can delay a hook call.
// Register the webhooks on it.
func NewAdmissionServer(hookServer *server.Server, opts ServerOptions) (webhook.Server, error) {
	var hooks *boundedServer
	if hookServer != nil {
		hooks, _ = hookServer.Server.(*boundedServer)
	}
	if hooks == nil {
		return nil, errors.New("create admission server: the hook server was not built by NewServer")
	}
	srv, err := newBoundedServer(opts, hooks.limits.process)
	if err != nil {
		return nil, fmt.Errorf("create admission server: %w", err)
	}
	return srv, nil
}
