package protocol

// The OS backends a plan can name in os.backend. Each backend package's Name is
// one of these, the policy accepts exactly these, and a node's configuration file
// sets up the NodeBackends: one catalog instead of lists beside each Name.
const (
	BackendOSTree    = "ostree"
	BackendBootc     = "bootc"
	BackendRAUC      = "rauc"
	BackendSWUpdate  = "swupdate"
	BackendMender    = "mender"
	BackendPackages  = "packages"
	BackendScript    = "script"
	BackendNone      = "none"
	BackendSimulated = "simulated"
)

// NodeBackends returns the backends a node's OS backend configuration can set up
// (internal/backend/registry), in a fixed order.
func NodeBackends() []string {
	return []string{BackendOSTree, BackendBootc, BackendRAUC, BackendSWUpdate, BackendMender, BackendPackages, BackendScript}
}

// KnownBackends returns every backend name a plan may carry: the NodeBackends,
// none (Kubernetes only) and simulated (the simulated host).
func KnownBackends() []string {
	return append(NodeBackends(), BackendNone, BackendSimulated)
}
