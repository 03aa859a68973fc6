package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// PlanKind is the kind of a NodePlan envelope.
const PlanKind = "NodePlan"

// Role is the role of a node in its cluster.
type Role string

const (
	RoleControlPlane Role = "control-plane"
	RoleWorker       Role = "worker"
)

// KubeadmAction is the kubeadm command the agent runs for the Kubernetes part of a plan.
type KubeadmAction string

const (
	// KubeadmNone means the Kubernetes version does not change.
	KubeadmNone KubeadmAction = "none"
	// KubeadmUpgradeApply runs `kubeadm upgrade apply <version>`: the first
	// control-plane node of a cluster-wide upgrade.
	KubeadmUpgradeApply KubeadmAction = "upgrade-apply"
	// KubeadmUpgradeNode runs `kubeadm upgrade node`: every other node.
	KubeadmUpgradeNode KubeadmAction = "upgrade-node"
)

// NodePlan is everything a node must become, decided by the coordinator. It holds
// desired state, not steps: the agent derives the steps (see internal/agent/state).
type NodePlan struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`

	// NodeName is the node this plan is for; an agent refuses a plan for another node.
	NodeName string `json:"nodeName"`

	// Machine identifies the CAPI Machine, for humans and events.
	Machine MachineRef `json:"machine"`

	// Kubernetes is the Kubernetes part of the update.
	Kubernetes KubernetesPlan `json:"kubernetes"`

	// Files are written atomically, with backups for rollback.
	Files []File `json:"files,omitempty"`

	// KubeletExtraArgs are the desired kubelet extra args (nodeRegistration.kubeletExtraArgs).
	KubeletExtraArgs []Arg `json:"kubeletExtraArgs,omitempty"`

	// Users and NTP carry KubeadmConfig's users and ntp sections as raw JSON: the agent
	// applies them through the host's own tooling.
	Users json.RawMessage `json:"users,omitempty"`
	NTP   json.RawMessage `json:"ntp,omitempty"`

	// ClusterConfiguration is the desired kubeadm ClusterConfiguration (control plane
	// only) as raw JSON; the agent hands it to kubeadm.
	ClusterConfiguration json.RawMessage `json:"clusterConfiguration,omitempty"`

	// OS is the OS image to switch to; nil when the OS image does not change.
	OS *OSImage `json:"os,omitempty"`

	// Gates are user-defined health checks that must pass before commit, in addition
	// to the built-in ones.
	Gates []Gate `json:"gates,omitempty"`

	// OSBackends is the node's OS backend configuration from the policy of its pool
	// (the JSON of /etc/capi-inplace/os-backends.json), carried when the OS image
	// changes: the agent writes it to the host before it stages the image. Empty:
	// the node keeps the file it has.
	OSBackends json.RawMessage `json:"osBackends,omitempty"`

	// RegistryCredentials are the logins for the OCI registries the plan's
	// artifacts come from (from the pull Secrets the policy names), only for those
	// registries: the plan is sealed to the node's key, so no other node and no
	// reader of the plan Secret sees them.
	RegistryCredentials []RegistryCredential `json:"registryCredentials,omitempty"`
}

// LocalEtcd reports whether the node runs a member of the cluster's etcd: a
// control-plane node of a stacked etcd. The agent's etcd gates and its quorum
// hold check that member, and only when there is one.
func (k KubernetesPlan) LocalEtcd() bool {
	return k.Role == RoleControlPlane && !k.ExternalEtcd
}

// MachineRef names a CAPI Machine.
type MachineRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	Cluster   string `json:"cluster"`
}

// KubernetesPlan is the Kubernetes part of a node plan.
type KubernetesPlan struct {
	Role Role `json:"role"`
	// Version is the target kubelet version, e.g. "v1.36.0".
	Version string `json:"version"`
	// Action is the kubeadm command to run.
	Action KubeadmAction `json:"action"`
	// EtcdSnapshot asks for an etcd snapshot before the node is touched.
	EtcdSnapshot bool `json:"etcdSnapshot,omitempty"`
	// ExternalEtcd says the cluster's etcd runs off the control-plane nodes
	// (kubeadm clusterConfiguration.etcd.external): this node has no member to
	// snapshot or to check. False (the default, and every plan from before the
	// field) means a local stacked member.
	ExternalEtcd bool `json:"externalEtcd,omitempty"`
	// IgnorePreflightErrors are the kubeadm preflight checks the agent's kubeadm
	// commands skip (--ignore-preflight-errors), from the policy of the node's
	// pool: e.g. SystemVerification on a cgroup v1 host, CoreDNSUnsupportedPlugins
	// and CoreDNSMigration on a cluster without CoreDNS. "all" skips every check.
	IgnorePreflightErrors []string `json:"ignorePreflightErrors,omitempty"`
	// EtcdRestore is the policy for the local etcd member's snapshot when the
	// update rolls back on a single-member etcd (RestoreEtcdOnRollback); empty
	// means IfDataChanged.
	EtcdRestore EtcdRestore `json:"etcdRestore,omitempty"`
	// Binaries are kubeadm and kubelet of Version to download and verify, from the
	// policy; nil when the policy lists none for Version: the node's OS image or
	// package source must bring them.
	Binaries *KubernetesBinaries `json:"binaries,omitempty"`
}

// IgnoreAllPreflightErrors is kubeadm's name for every preflight check.
const IgnoreAllPreflightErrors = "all"

// preflightCheckRE matches kubeadm's preflight check names: letters and digits,
// with the dots, dashes and underscores of names like Port-6443 and
// FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml. No commas (the
// flag's separator), no spaces, no "=".
var preflightCheckRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)

// ValidatePreflightChecks checks a list of kubeadm preflight check names as
// kubeadm would: valid names, none twice (kubeadm compares them in lower case),
// and "all" only on its own.
func ValidatePreflightChecks(names []string) error {
	var errs []error
	seen := map[string]bool{}
	for i, n := range names {
		if !preflightCheckRE.MatchString(n) {
			errs = append(errs, fmt.Errorf("[%d] %q is not a kubeadm preflight check name (letters, digits, '.', '-', '_')", i, n))
			continue
		}
		if seen[strings.ToLower(n)] {
			errs = append(errs, fmt.Errorf("[%d] %q is listed twice", i, n))
		}
		seen[strings.ToLower(n)] = true
	}
	if seen[IgnoreAllPreflightErrors] && len(names) > 1 {
		errs = append(errs, fmt.Errorf("%q must be the only entry (kubeadm refuses it alongside other checks)", IgnoreAllPreflightErrors))
	}
	return errors.Join(errs...)
}

// PreflightFlag returns kubeadm's --ignore-preflight-errors flag for the checks,
// or nothing when there are none.
func (k KubernetesPlan) PreflightFlag() []string {
	if len(k.IgnorePreflightErrors) == 0 {
		return nil
	}
	return []string{"--ignore-preflight-errors=" + strings.Join(k.IgnorePreflightErrors, ",")}
}

// File is a file to write on the node.
type File struct {
	Path string `json:"path"`
	// Content is the file's content, already resolved from Secrets by the coordinator.
	Content     []byte `json:"content"`
	Permissions string `json:"permissions,omitempty"`
	Owner       string `json:"owner,omitempty"`
}

// Arg is one command-line argument of a component.
type Arg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// OSImage is the OS artifact to switch the node to.
type OSImage struct {
	// Backend names the OS backend (ostree, bootc, rauc, swupdate, mender, packages,
	// script, none, simulated).
	Backend string `json:"backend"`
	// Ref is the artifact reference: an OCI reference, an ostree ref or a bundle URL.
	Ref string `json:"ref"`
	// Digest is "sha256:<64 hex>": the artifact is refused when it does not match.
	Digest string `json:"digest"`
	// Download is where the agent fetches the artifact (a RAUC, SWUpdate or Mender
	// bundle) before the node is cordoned; nil when the backend fetches it itself
	// (ostree, bootc, packages) or the file is already on the node. With Download,
	// Ref is ArtifactPath(Digest), where the agent stages the file.
	Download *BinaryArtifact `json:"download,omitempty"`
}

// Gate is a user-defined health check of exactly one kind: Command (run on the
// host, chrooted into the host root, as root; it must exit 0), HTTPGet (a GET
// from the node whose status must be in the expected range) or CEL (an
// expression over the agent's own Node and the pods bound to it that must be
// true). ValidateGates is its rule. A plan written before HTTPGet and CEL
// existed has only Command and decodes unchanged.
type Gate struct {
	Name    string       `json:"name"`
	Command []string     `json:"command,omitempty"`
	HTTPGet *HTTPGetGate `json:"httpGet,omitempty"`
	CEL     *CELGate     `json:"cel,omitempty"`
	// TimeoutSeconds bounds one run of the gate (the command, the request, the
	// evaluation); 0 means the agent's default.
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// PassWithinSeconds is how long the gate may take to pass: the agent runs the
	// gate again until it passes or this time is up; 0 means the agent's gate
	// timeout.
	PassWithinSeconds int32 `json:"passWithinSeconds,omitempty"`
}

// Kind names the gate's kind as status shows it: "command", "httpGet" or "cel".
func (g Gate) Kind() string {
	switch {
	case g.HTTPGet != nil:
		return GateKindHTTPGet
	case g.CEL != nil:
		return GateKindCEL
	}
	return GateKindCommand
}

// HTTPGetGate is a GET the agent sends from the node. It passes when the answer's
// status is between ExpectedStatusMin and ExpectedStatusMax (both inclusive;
// 0 means 200 and 399, as the kubelet judges an httpGet probe). Redirects are not
// followed: a 3xx is judged by its own status.
type HTTPGetGate struct {
	// URL is an http or https URL without user info (it appears in status).
	URL string `json:"url"`
	// ExpectedStatusMin is the lowest accepted status code, 100 to 599; 0:
	// 200, as the kubelet judges an httpGet probe.
	ExpectedStatusMin int32 `json:"expectedStatusMin,omitempty"`
	// ExpectedStatusMax is the highest accepted status code, 100 to 599; 0:
	// 399. Redirects are not followed: a 3xx is judged by its own status.
	ExpectedStatusMax int32 `json:"expectedStatusMax,omitempty"`
	// CABundle is PEM certificates that verify an https server instead of the
	// host's system roots.
	CABundle string `json:"caBundle,omitempty"`
	// InsecureSkipVerify accepts any server certificate (https only); false by default.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// StatusRange returns the accepted status codes with the defaults filled in.
func (h HTTPGetGate) StatusRange() (lo, hi int) {
	lo, hi = 200, 399
	if h.ExpectedStatusMin != 0 {
		lo = int(h.ExpectedStatusMin)
	}
	if h.ExpectedStatusMax != 0 {
		hi = int(h.ExpectedStatusMax)
	}
	return lo, hi
}

// CELGate is a CEL expression of type bool over `node` (the agent's own Node as
// its JSON object) and `pods` (the list of pods bound to the node, as JSON
// objects), e.g. `pods.all(p, p.status.phase == "Running")`.
type CELGate struct {
	// Expression is the CEL expression, of type bool, over node and pods;
	// compiled when the policy is loaded.
	Expression string `json:"expression"`
}

var (
	// nodeNameRE is a DNS-1123 subdomain.
	nodeNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	modeRE     = regexp.MustCompile(`^0?[0-7]{3,4}$`)
)

// ErrInvalidPlan is wrapped by every validation error of a plan.
var ErrInvalidPlan = errors.New("invalid node plan")

// ErrPlanNewerThanAgent: the plan (or its sealed envelope) has fields this agent
// does not know, and would decode without them: a newer coordinator wrote it,
// typically while the agent DaemonSet still rolls out the agent that knows them.
// The plan is not applied (half of it must never run), and not refused for good
// either: the newer agent applies it. See ReasonAgentOutdated.
var ErrPlanNewerThanAgent = errors.New("the plan has fields this agent does not know")

// ReasonAgentOutdated is the NodeStatus reason of a Pending plan that is newer
// than the agent (ErrPlanNewerThanAgent).
const ReasonAgentOutdated = "AgentOutdated"

// decodeStrict decodes one JSON value, refusing unknown fields. A value that
// fails only because of unknown fields gives ErrPlanNewerThanAgent; any other
// failure, ErrInvalidPlan. what names the value in errors.
func decodeStrict[T any](data []byte, what string) (*T, error) {
	v := new(T)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if json.Unmarshal(data, new(T)) == nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrPlanNewerThanAgent, what, err)
		}
		return nil, fmt.Errorf("%w: decode %s: %w", ErrInvalidPlan, what, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the %s", ErrInvalidPlan, what)
	}
	return v, nil
}

// Validate checks that the plan is complete and internally consistent. It does not
// know which backends a node has: the agent checks that separately.
func (p *NodePlan) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if p.APIVersion != inplacev1.GroupName+"/"+inplacev1.Version {
		add("apiVersion %q is not %s/%s", p.APIVersion, inplacev1.GroupName, inplacev1.Version)
	}
	if p.Kind != PlanKind {
		add("kind %q is not %s", p.Kind, PlanKind)
	}
	if len(p.NodeName) == 0 || len(p.NodeName) > 253 || !nodeNameRE.MatchString(p.NodeName) {
		add("nodeName %q is not a valid node name", p.NodeName)
	}
	switch p.Kubernetes.Role {
	case RoleControlPlane, RoleWorker:
	default:
		add("kubernetes.role %q is not %q or %q", p.Kubernetes.Role, RoleControlPlane, RoleWorker)
	}
	if !ValidVersion(p.Kubernetes.Version) {
		add("kubernetes.version %q is not a version like v1.36.0", p.Kubernetes.Version)
	}
	switch p.Kubernetes.Action {
	case KubeadmNone, KubeadmUpgradeNode:
	case KubeadmUpgradeApply:
		if p.Kubernetes.Role != RoleControlPlane {
			add("kubernetes.action %q is only valid on a control-plane node", p.Kubernetes.Action)
		}
	default:
		add("kubernetes.action %q is not one of none, upgrade-apply, upgrade-node", p.Kubernetes.Action)
	}
	if !p.Kubernetes.EtcdRestore.Valid() {
		add("kubernetes.etcdRestore %q is not %s, %s or %s", p.Kubernetes.EtcdRestore, EtcdRestoreIfDataChanged, EtcdRestoreAlways, EtcdRestoreNever)
	}
	if err := ValidatePreflightChecks(p.Kubernetes.IgnorePreflightErrors); err != nil {
		add("kubernetes.ignorePreflightErrors: %w", err)
	}
	if b := p.Kubernetes.Binaries; b != nil {
		if err := b.Validate(); err != nil {
			add("kubernetes.binaries: %w", err)
		}
	}
	seen := map[string]bool{}
	for i, f := range p.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			add("files[%d].path %q is not a clean absolute file path", i, f.Path)
		}
		if seen[f.Path] {
			add("files[%d].path %q is listed twice", i, f.Path)
		}
		seen[f.Path] = true
		if f.Permissions != "" && !modeRE.MatchString(f.Permissions) {
			add("files[%d].permissions %q is not an octal mode", i, f.Permissions)
		}
	}
	if p.OS != nil {
		if p.OS.Backend == "" {
			add("os.backend is empty")
		}
		if p.OS.Ref == "" {
			add("os.ref is empty")
		}
		if !digestRE.MatchString(p.OS.Digest) {
			add("os.digest %q is not sha256:<64 lowercase hex>", p.OS.Digest)
		}
		if d := p.OS.Download; d != nil {
			if err := d.Validate(); err != nil {
				add("os.download: %w", err)
			}
			if d.Digest != p.OS.Digest {
				add("os.download.digest %q is not os.digest %q", d.Digest, p.OS.Digest)
			}
			if want := ArtifactPath(p.OS.Digest); p.OS.Ref != want {
				add("os.ref %q must be %s, where the agent stages the download", p.OS.Ref, want)
			}
		}
	}
	if len(p.OSBackends) > 0 && (!json.Valid(p.OSBackends) || p.OSBackends[0] != '{') {
		add("osBackends is not a JSON object")
	}
	for name, raw := range map[string]json.RawMessage{"users": p.Users, "ntp": p.NTP, "clusterConfiguration": p.ClusterConfiguration} {
		if len(raw) > 0 && !json.Valid(raw) {
			add("%s is not valid JSON", name)
		}
	}
	if err := ValidateGates(p.Gates); err != nil {
		add("gates: %w", err)
	}
	errs = append(errs, p.validateHostValues()...)
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidPlan, errors.Join(errs...))
	}
	return nil
}

// NewPlan returns an empty plan with its envelope fields set.
func NewPlan(nodeName string) *NodePlan {
	return &NodePlan{
		APIVersion: inplacev1.GroupName + "/" + inplacev1.Version,
		Kind:       PlanKind,
		NodeName:   nodeName,
	}
}

// Hash returns the plan's content hash: the first 16 bytes of the SHA-256 of its
// JSON, in hex. encoding/json writes struct fields in declaration order and map keys
// sorted, so equal plans always hash equally. It fails only on invalid raw JSON.
func (p *NodePlan) Hash() (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("hash node plan: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// EncodePlan validates and serialises a plan.
func EncodePlan(p *NodePlan) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(p)
}

// DecodePlan parses and validates a plan. Unknown fields are refused: a plan from a
// newer coordinator that this agent does not understand must not be half-applied
// (ErrPlanNewerThanAgent); anything else that does not decode or validate wraps
// ErrInvalidPlan.
func DecodePlan(data []byte) (*NodePlan, error) {
	p, err := decodeStrict[NodePlan](data, "plan")
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}
