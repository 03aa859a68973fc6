package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Config is the policy file's format (YAML or JSON). Every field is optional; New
// fills in defaults.
type Config struct {
	// AcceptBootstrapOnlyFields, when true, lets KubeadmConfig fields that only act
	// while a machine bootstraps (preKubeadmCommands, postKubeadmCommands,
	// bootCommands, format, verbosity, ...) change as no-ops. Default false: such a
	// change is refused, so CAPI replaces the machine and the new commands really run.
	AcceptBootstrapOnlyFields bool `json:"acceptBootstrapOnlyFields,omitempty"`

	// Drain configures how the coordinator drains a node before updating it.
	Drain DrainConfig `json:"drain,omitempty"`

	// Backends names the OS backend of each cluster's nodes.
	Backends BackendConfig `json:"backends,omitempty"`

	// InfrastructureKinds adds infrastructure machine kinds, or replaces the
	// built-in entry of the same group and kind.
	InfrastructureKinds []InfraKindConfig `json:"infrastructureKinds,omitempty"`

	// Artifacts maps infrastructure image values to node-side OS artifacts.
	Artifacts []ArtifactConfig `json:"artifacts,omitempty"`

	// KubernetesBinaries maps Kubernetes versions to the kubeadm and kubelet each
	// node platform downloads, by URL and digest.
	KubernetesBinaries KubernetesBinariesConfig `json:"kubernetesBinaries,omitempty"`

	// Gates are user-defined health gates per pool of Machines.
	Gates []GatePoolConfig `json:"gates,omitempty"`

	// Kubeadm configures the kubeadm commands the agent runs: the preflight
	// checks they skip, for every node or per pool.
	Kubeadm KubeadmConfig `json:"kubeadm,omitempty"`

	// OSBackends configures the OS backends of the nodes of each pool.
	OSBackends []OSBackendsPoolConfig `json:"osBackends,omitempty"`

	// Fleet sets failure budgets, maintenance windows and soak per pool of
	// Machines.
	Fleet []FleetPoolConfig `json:"fleet,omitempty"`

	// ArtifactSources configure how nodes fetch from the hosts that artifacts'
	// and kubernetesBinaries' urls and mirrors name.
	ArtifactSources []ArtifactSourceConfig `json:"artifactSources,omitempty"`

	// RegistryCredentials name the pull Secret of each private OCI registry that
	// artifacts come from.
	RegistryCredentials []RegistryCredentialConfig `json:"registryCredentials,omitempty"`

	// Deadlines bound each phase of a node update.
	Deadlines DeadlinesConfig `json:"deadlines,omitempty"`
}

// DrainConfig configures how a node is drained before its update: like Cluster
// API's own drain (MachineDrainRules, PodDisruptionBudgets), bounded in time.
type DrainConfig struct {
	// TimeoutSeconds bounds a drain; after it the update fails visibly (and is
	// retried) instead of evicting by force. Default 600.
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
	// SkipOnSingleNode skips the drain when the node is the cluster's only node:
	// evicted pods would have nowhere to go. Default true.
	SkipOnSingleNode *bool `json:"skipOnSingleNode,omitempty"`
	// Force evicts pods that no controller recreates (a bare pod is lost for
	// good). Default false: such a pod blocks the drain and nothing is evicted.
	Force bool `json:"force,omitempty"`
}

// BackendConfig names the OS backend (ostree, bootc, rauc, ...) that installs
// the OS images of each cluster's nodes; an artifact may name its own.
type BackendConfig struct {
	// Default is the backend of every cluster not listed in clusters, and of every
	// artifact that does not name its own backend.
	Default string `json:"default,omitempty"`
	// Clusters maps "<namespace>/<cluster name>" to a backend.
	Clusters map[string]string `json:"clusters,omitempty"`
}

// InfraKindConfig describes one infrastructure machine kind. Its template kind
// (Kind + "Template") is covered by the same entry, with every path moved under
// spec.template.spec.
type InfraKindConfig struct {
	// Group is the API group, e.g. infrastructure.cluster.x-k8s.io.
	Group string `json:"group"`
	// Kind is the machine kind, e.g. Metal3Machine (not the template kind).
	Kind string `json:"kind"`
	// ImagePaths are the dotted paths of the fields that hold the OS image, starting
	// with "spec.". The first one is the key looked up in the artifact table; the
	// others (checksums, formats) may change only together with it.
	ImagePaths []string `json:"imagePaths,omitempty"`
	// IgnorePaths are dotted paths, starting with "spec.", whose changes are
	// harmless for a running node and are accepted as no-ops (the path and
	// everything below it).
	IgnorePaths []string `json:"ignorePaths,omitempty"`
}

// ArtifactConfig maps one infrastructure image value to an OS artifact.
type ArtifactConfig struct {
	// Image is the value of the kind's key image path: a string (an AMI id, a URL,
	// a template name) or an object (an Azure or OpenStack image reference),
	// compared as canonical JSON.
	Image any `json:"image"`
	// Kind restricts the entry to one infrastructure machine kind; empty matches
	// every kind.
	Kind string `json:"kind,omitempty"`
	// Backend is the OS backend; empty means the cluster's backend.
	Backend string `json:"backend,omitempty"`
	// Ref is the artifact: an OCI reference, an ostree ref, a bundle path on the
	// node. Leave it empty with URL.
	Ref string `json:"ref,omitempty"`
	// Digest is "sha256:<64 hex>". Without it the image change is refused: the
	// agent must be able to verify what it installs.
	Digest string `json:"digest,omitempty"`
	// URL is where the agent downloads a bundle (RAUC, SWUpdate, Mender) before the
	// node is cordoned: an http(s) URL or oci://<registry>/<repository> holding the
	// bundle as the blob of digest. The backend then reads it from the node's
	// artifact store (protocol.ArtifactPath).
	URL string `json:"url,omitempty"`
	// Mirrors are other sources of the same bundle, tried first.
	Mirrors []string `json:"mirrors,omitempty"`
	// Size is the bundle's length in bytes (with URL); a source that announces
	// or sends another length fails staging for good, as a digest mismatch does.
	// Optional: without it the agent bounds a download at 4 GiB.
	Size int64 `json:"size,omitempty"`
}

// Drain is the validated drain policy.
type Drain struct {
	TimeoutSeconds   int32
	SkipOnSingleNode bool
	Force            bool
}

// InfraKind is a validated infrastructure kind entry. Paths are field names
// relative to the machine's spec (no "spec" segment).
type InfraKind struct {
	Group       string
	Kind        string
	ImagePaths  [][]string
	IgnorePaths [][]string
}

// Artifact is a validated artifact entry.
type Artifact struct {
	Kind     string
	Backend  string
	Ref      string
	Digest   string
	Download *protocol.BinaryArtifact
}

// Policy is the validated, immutable policy. Build it with New, Parse or Builtin.
type Policy struct {
	acceptBootstrapOnly bool
	drain               Drain
	deadlines           Deadlines
	defaultBackend      string
	clusterBackends     map[string]string
	kinds               map[string]InfraKind // key: group + "/" + kind
	artifacts           map[string][]Artifact
	binaries            map[string]map[string]protocol.KubernetesBinaries // version -> platform
	sources             map[string]protocol.SourceHost                    // lowercase host -> settings
	gatePools           []gatePool
	fleetPools          []fleetPool
	preflightGlobal     []string
	preflightPools      []kubeadmPool
	etcdRestore         protocol.EtcdRestore
	osBackendPools      []osBackendsPool
	verifyingDefault    bool // deadlines.verifyingSeconds not set: named so in errors
	deadlinePools       []deadlinesPool
	registrySecrets     map[string]SecretRef // registry host -> pull Secret
}

// Backends are the OS backend names the agent knows (see protocol.OSImage).
var knownBackends = protocol.KnownBackends()

// ErrInvalid is wrapped by every validation error of a policy.
var ErrInvalid = errors.New("invalid policy")

// InvalidError is the error of a policy that does not parse or validate: one
// entry per problem, each naming its field (a tool lists them one by one).
// errors.Is matches ErrInvalid and each problem's own error.
type InvalidError struct {
	Problems []error
}

func (e *InvalidError) Error() string {
	return ErrInvalid.Error() + ": " + errors.Join(e.Problems...).Error()
}

// Is matches ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the problems.
func (e *InvalidError) Unwrap() []error { return e.Problems }

const (
	defaultDrainTimeoutSeconds = 600
	// TemplateSuffix turns a machine kind into its template kind.
	TemplateSuffix = "Template"
)

// Builtin returns the built-in policy: the defaults of every setting and the built-in
// infrastructure kinds, with no artifacts (so no image change is covered).
func Builtin() *Policy {
	p, err := New(Config{})
	if err != nil {
		// The built-in entries are constants: a failure here is a programming error
		// caught by the package's tests, never an operator's mistake.
		panic(fmt.Sprintf("built-in policy is invalid: %v", err))
	}
	return p
}

// Parse reads a policy file's content (YAML or JSON, unknown fields refused) and
// validates it.
func Parse(data []byte) (*Policy, error) {
	var cfg Config
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, &InvalidError{Problems: []error{fmt.Errorf("parse: %w", err)}}
	}
	return New(cfg)
}

// New validates cfg, fills in defaults and merges the built-in infrastructure kinds.
func New(cfg Config) (*Policy, error) {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	p := &Policy{
		acceptBootstrapOnly: cfg.AcceptBootstrapOnlyFields,
		drain:               Drain{TimeoutSeconds: defaultDrainTimeoutSeconds, SkipOnSingleNode: true, Force: cfg.Drain.Force},
		defaultBackend:      cfg.Backends.Default,
		clusterBackends:     map[string]string{},
		kinds:               map[string]InfraKind{},
		artifacts:           map[string][]Artifact{},
	}
	if t := cfg.Drain.TimeoutSeconds; t != nil {
		if *t <= 0 {
			add("drain.timeoutSeconds %d must be positive", *t)
		}
		p.drain.TimeoutSeconds = *t
	}
	if s := cfg.Drain.SkipOnSingleNode; s != nil {
		p.drain.SkipOnSingleNode = *s
	}
	if b := cfg.Backends.Default; b != "" && !slices.Contains(knownBackends, b) {
		add("backends.default %q is not one of %s", b, strings.Join(knownBackends, ", "))
	}
	for key, b := range cfg.Backends.Clusters {
		ns, name, ok := strings.Cut(key, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			add("backends.clusters key %q is not <namespace>/<cluster>", key)
		}
		if !slices.Contains(knownBackends, b) {
			add("backends.clusters[%q] %q is not one of %s", key, b, strings.Join(knownBackends, ", "))
		}
		p.clusterBackends[key] = b
	}

	for _, k := range builtinKinds() {
		kind, err := compileKind(k)
		if err != nil {
			add("built-in kind %s: %w", k.Kind, err)
			continue
		}
		p.kinds[kind.Group+"/"+kind.Kind] = kind
	}
	seen := map[string]bool{}
	for i, k := range cfg.InfrastructureKinds {
		kind, err := compileKind(k)
		if err != nil {
			add("infrastructureKinds[%d]: %w", i, err)
			continue
		}
		key := kind.Group + "/" + kind.Kind
		if seen[key] {
			add("infrastructureKinds[%d]: %s is listed twice", i, key)
		}
		seen[key] = true
		p.kinds[key] = kind // replaces a built-in entry on purpose
	}

	var sourceErrs []error
	p.sources, sourceErrs = compileSources(cfg.ArtifactSources)
	errs = append(errs, sourceErrs...)

	for i, a := range cfg.Artifacts {
		key, err := CanonicalImage(a.Image)
		if err != nil || a.Image == nil || key == `""` || key == "" {
			add("artifacts[%d].image must be a non-empty string or object", i)
			continue
		}
		var download *protocol.BinaryArtifact
		switch {
		case a.URL != "" && a.Ref != "":
			add("artifacts[%d]: ref and url exclude each other (with url the agent stages the bundle at %s)", i, protocol.ArtifactPath("sha256:<hex>"))
		case a.URL != "":
			download = &protocol.BinaryArtifact{URL: a.URL, Digest: a.Digest, Mirrors: slices.Clone(a.Mirrors), Size: a.Size}
			withSources(download, p.sources)
			if err := download.Validate(); err != nil {
				add("artifacts[%d]: %w", i, err)
			}
			a.Ref = protocol.ArtifactPath(a.Digest)
		case a.Ref == "":
			add("artifacts[%d]: ref or url is required", i)
		case len(a.Mirrors) > 0:
			add("artifacts[%d].mirrors need a url", i)
		case a.Size != 0:
			add("artifacts[%d].size needs a url (the agent downloads only with url)", i)
		}
		if a.Digest != "" && !protocol.ValidDigest(a.Digest) {
			add("artifacts[%d].digest %q is not sha256:<64 lowercase hex>", i, a.Digest)
		}
		if a.Backend != "" && !slices.Contains(knownBackends, a.Backend) {
			add("artifacts[%d].backend %q is not one of %s", i, a.Backend, strings.Join(knownBackends, ", "))
		}
		if strings.HasSuffix(a.Kind, TemplateSuffix) {
			add("artifacts[%d].kind %q must be a machine kind, not a template kind", i, a.Kind)
		}
		for _, prev := range p.artifacts[key] {
			if prev.Kind == a.Kind {
				add("artifacts[%d]: image %s is mapped twice for kind %q", i, key, a.Kind)
			}
		}
		p.artifacts[key] = append(p.artifacts[key], Artifact{Kind: a.Kind, Backend: a.Backend, Ref: a.Ref, Digest: a.Digest, Download: download})
	}

	binaries, binErrs := compileBinaries(cfg.KubernetesBinaries, p.sources)
	p.binaries = binaries
	errs = append(errs, binErrs...)

	var gateErrs []error
	p.gatePools, gateErrs = compileGates(cfg.Gates)
	errs = append(errs, gateErrs...)

	var osErrs []error
	p.osBackendPools, osErrs = compileOSBackends(cfg.OSBackends)
	errs = append(errs, osErrs...)

	var kubeadmErrs []error
	p.preflightGlobal, p.preflightPools, kubeadmErrs = compileKubeadm(cfg.Kubeadm)
	p.etcdRestore = cfg.Kubeadm.EtcdRestore
	errs = append(errs, kubeadmErrs...)

	var fleetErrs []error
	p.fleetPools, fleetErrs = compileFleet(cfg.Fleet)
	errs = append(errs, fleetErrs...)

	var regErrs []error
	p.registrySecrets, regErrs = compileRegistryCredentials(cfg.RegistryCredentials)
	errs = append(errs, regErrs...)

	var deadlineErrs []error
	p.deadlines, p.deadlinePools, deadlineErrs = compileDeadlines(cfg.Deadlines)
	p.verifyingDefault = cfg.Deadlines.VerifyingSeconds == nil
	errs = append(errs, deadlineErrs...)
	if len(deadlineErrs) == 0 {
		for i, gp := range p.gatePools {
			if protocol.ValidateGates(gp.gates) != nil {
				continue // refused above, with its own error
			}
			who := fmt.Sprintf("gates[%d] (%s)", i, gp.pool)
			if err := gatesFitVerifying(who, gp.gates, p.deadlines.Verifying, p.verifyingDefault); err != nil {
				errs = append(errs, err)
			}
		}
	}

	if len(errs) > 0 {
		return nil, &InvalidError{Problems: errs}
	}
	return p, nil
}

func compileKind(k InfraKindConfig) (InfraKind, error) {
	if k.Group == "" || k.Kind == "" {
		return InfraKind{}, errors.New("group and kind are required")
	}
	if strings.HasSuffix(k.Kind, TemplateSuffix) {
		return InfraKind{}, fmt.Errorf("kind %q must be the machine kind; its template kind is implied", k.Kind)
	}
	out := InfraKind{Group: k.Group, Kind: k.Kind}
	for _, p := range k.ImagePaths {
		segs, err := splitSpecPath(p)
		if err != nil {
			return InfraKind{}, fmt.Errorf("imagePaths: %w", err)
		}
		out.ImagePaths = append(out.ImagePaths, segs)
	}
	for _, p := range k.IgnorePaths {
		segs, err := splitSpecPath(p)
		if err != nil {
			return InfraKind{}, fmt.Errorf("ignorePaths: %w", err)
		}
		out.IgnorePaths = append(out.IgnorePaths, segs)
	}
	return out, nil
}

// splitSpecPath turns "spec.image.url" into ["image", "url"].
func splitSpecPath(p string) ([]string, error) {
	segs := strings.Split(p, ".")
	if len(segs) < 2 || segs[0] != "spec" || slices.Contains(segs, "") {
		return nil, fmt.Errorf("path %q must look like spec.<field>[.<field>...]", p)
	}
	return segs[1:], nil
}

// CanonicalImage returns the lookup key of an image value: a string as is, any
// other value as compact JSON (object keys sorted).
func CanonicalImage(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("canonical image value: %w", err)
	}
	return string(b), nil
}

// AcceptBootstrapOnlyFields reports whether bootstrap-only KubeadmConfig fields may
// change as no-ops.
func (p *Policy) AcceptBootstrapOnlyFields() bool { return p.acceptBootstrapOnly }

// Drain returns the drain policy.
func (p *Policy) Drain() Drain { return p.drain }

// BackendFor returns the OS backend of a cluster's nodes, or "" when none is
// configured.
func (p *Policy) BackendFor(namespace, cluster string) string {
	if b, ok := p.clusterBackends[namespace+"/"+cluster]; ok {
		return b
	}
	return p.defaultBackend
}

// InfraKindFor returns the entry for an infrastructure machine or machine template
// kind, and whether the kind is a template.
func (p *Policy) InfraKindFor(group, kind string) (entry InfraKind, template bool, ok bool) {
	if e, found := p.kinds[group+"/"+kind]; found {
		return e, false, true
	}
	if base, isTemplate := strings.CutSuffix(kind, TemplateSuffix); isTemplate {
		if e, found := p.kinds[group+"/"+base]; found {
			return e, true, true
		}
	}
	return InfraKind{}, false, false
}

// LookupArtifact returns the artifact an image value of a machine kind maps to: an
// entry for that kind wins over a kind-less one. ok is false when the value is not
// mapped at all.
func (p *Policy) LookupArtifact(machineKind string, image any) (Artifact, bool) {
	key, err := CanonicalImage(image)
	if err != nil {
		return Artifact{}, false
	}
	var fallback *Artifact
	for i, a := range p.artifacts[key] {
		if a.Kind == machineKind {
			return a, true
		}
		if a.Kind == "" {
			fallback = &p.artifacts[key][i]
		}
	}
	if fallback != nil {
		return *fallback, true
	}
	return Artifact{}, false
}

// OSImageFor resolves an image value of a machine kind in a cluster to the OS image
// a node plan carries. It returns a human-readable reason, and nil, when the value
// cannot be installed: not mapped, mapped without a digest, or no backend known.
func (p *Policy) OSImageFor(machineKind string, image any, namespace, cluster string) (*protocol.OSImage, string) {
	key, _ := CanonicalImage(image)
	a, ok := p.LookupArtifact(machineKind, image)
	if !ok {
		return nil, fmt.Sprintf("image %s is not mapped to a node-side OS artifact in the policy", key)
	}
	if a.Digest == "" {
		return nil, fmt.Sprintf("image %s maps to artifact %s, which has no digest: the node could not verify it", key, a.Ref)
	}
	backend := a.Backend
	if backend == "" {
		backend = p.BackendFor(namespace, cluster)
	}
	if backend == "" {
		return nil, fmt.Sprintf("image %s maps to artifact %s, but no OS backend is configured for cluster %s/%s", key, a.Ref, namespace, cluster)
	}
	img := &protocol.OSImage{Backend: backend, Ref: a.Ref, Digest: a.Digest}
	if a.Download != nil {
		d := *a.Download
		d.Mirrors = slices.Clone(d.Mirrors)
		d.SourceHosts = slices.Clone(d.SourceHosts)
		img.Download = &d
	}
	return img, ""
}
