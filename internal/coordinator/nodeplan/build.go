package nodeplan

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/template"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// maxFileBytes bounds one resolved file; CABPK bounds rendered templates the same way
// (bootstrap/kubeadm/reconcilers/kubeadmconfig/template.go: maxRenderedTemplateBytes,
// enforced by a writer that fails once the limit is crossed).
const maxFileBytes = 1 << 20

// maxPlanBytes bounds the encoded plan: it is published in one Secret, which the API
// server caps at 1 MiB, and file contents travel base64-encoded inside it (4/3), so
// the headroom is left for that Secret's own overhead and any sealing of the plan.
const maxPlanBytes = 768 << 10

// ErrInput is wrapped by every error caused by the desired objects themselves (a
// missing Secret key, undecodable content, an impossible version): retrying the same
// input cannot succeed, so the coordinator answers Failure with the message.
var ErrInput = errors.New("cannot build node plan")

// ErrTooLarge is wrapped (together with ErrInput) when a file, a rendered template or
// the whole plan would exceed its size limit; rendering stops at the limit.
var ErrTooLarge = errors.New("size limit exceeded")

// NodeFacts are what the coordinator observed in the workload cluster.
type NodeFacts struct {
	// KubeletVersion is Node.status.nodeInfo.kubeletVersion of the machine's node.
	KubeletVersion string
	// ControlPlaneAtTarget is true when some other control-plane Node of the workload
	// cluster already reports the target version: `kubeadm upgrade apply` has run.
	ControlPlaneAtTarget bool
}

// Input is everything Build needs.
type Input struct {
	// Machine is the desired Machine (spec from the hook request, identity from the
	// management cluster).
	Machine *clusterv1.Machine
	// NodeName is the name of the Machine's Node in the workload cluster.
	NodeName string
	// KubeadmConfig is the desired bootstrap config; nil when the Machine is not
	// bootstrapped by kubeadm, in which case only version and OS are planned.
	KubeadmConfig *bootstrapv1.KubeadmConfig
	// Secrets holds the data of the Secrets the KubeadmConfig references
	// (secretbudget.Refs), by name, from the KubeadmConfig's namespace. A missing
	// name means the Secret does not exist.
	Secrets map[string]map[string][]byte
	// ControlPlaneVersion feeds {{ .controlPlane.version }} in files with
	// contentFormat Template, as CABPK does; empty omits the key.
	ControlPlaneVersion string
	// OS is the OS image to switch to; nil when the OS image does not change.
	OS *protocol.OSImage
	// Binaries are kubeadm and kubelet of the version for the node's platform,
	// from the policy; nil when the policy lists none (the OS image brings them).
	Binaries *protocol.KubernetesBinaries
	// Gates are the user-defined health gates of the Machine's pools, from the
	// policy, in the order they run; nil when none.
	Gates []protocol.Gate
	// OSBackends is the OS backend configuration of the Machine's pool, from the
	// policy; the plan carries it only with an OS image change.
	OSBackends json.RawMessage
	// Node are the observed facts that decide the kubeadm action.
	Node NodeFacts
	// IgnorePreflightErrors are the kubeadm preflight checks the policy lets this
	// Machine's pool skip.
	IgnorePreflightErrors []string
	// EtcdRestore is the policy's choice for a single-member etcd on rollback,
	// carried by the plans of nodes with a local etcd member.
	EtcdRestore protocol.EtcdRestore
}

// NeedsControlPlaneVersion reports whether some file is a template, so that the caller
// only looks up the control plane's version when it matters.
func NeedsControlPlaneVersion(cfg *bootstrapv1.KubeadmConfig) bool {
	if cfg == nil {
		return false
	}
	for _, f := range cfg.Spec.Files {
		if f.ContentFormat == bootstrapv1.FileContentFormatTemplate {
			return true
		}
	}
	return false
}

// RoleOf returns the node role of a Machine, from CAPI's control-plane label.
func RoleOf(m *clusterv1.Machine) protocol.Role {
	if _, ok := m.Labels[clusterv1.MachineControlPlaneLabel]; ok {
		return protocol.RoleControlPlane
	}
	return protocol.RoleWorker
}

// SameVersion compares two Kubernetes versions ignoring build metadata ("+k0s"): the
// kubelet reports what it was built as, the Machine what was asked. It is
// protocol.SameRelease, the rule the agent's gates use too.
func SameVersion(a, b string) bool { return protocol.SameRelease(a, b) }

// KubeadmActionFor decides the kubeadm command: none when the version does not change,
// `upgrade apply` on the first control-plane node of the upgrade (no other control-plane
// node reports the target yet), `upgrade node` everywhere else.
func KubeadmActionFor(role protocol.Role, target string, facts NodeFacts) protocol.KubeadmAction {
	if target == "" || SameVersion(target, facts.KubeletVersion) {
		return protocol.KubeadmNone
	}
	if role == protocol.RoleControlPlane && !facts.ControlPlaneAtTarget {
		return protocol.KubeadmUpgradeApply
	}
	return protocol.KubeadmUpgradeNode
}

// Build returns the node plan for the input. Errors wrap ErrInput (bad desired
// objects) or protocol.ErrInvalidPlan (the result does not validate).
func Build(in Input) (*protocol.NodePlan, error) {
	if in.Machine == nil {
		return nil, fmt.Errorf("%w: no machine", ErrInput)
	}
	m := in.Machine
	role := RoleOf(m)
	version := m.Spec.Version
	if version == "" {
		// A Machine without a version keeps whatever the kubelet runs.
		version = in.Node.KubeletVersion
	}
	if version == "" {
		return nil, fmt.Errorf("%w: machine %s/%s has no spec.version and node %s reports no kubelet version", ErrInput, m.Namespace, m.Name, in.NodeName)
	}
	action := KubeadmActionFor(role, m.Spec.Version, in.Node)

	p := protocol.NewPlan(in.NodeName)
	p.Machine = protocol.MachineRef{Namespace: m.Namespace, Name: m.Name, UID: string(m.UID), Cluster: m.Spec.ClusterName}
	p.Kubernetes = protocol.KubernetesPlan{Role: role, Version: version, Action: action, IgnorePreflightErrors: in.IgnorePreflightErrors, Binaries: in.Binaries}
	p.OS = in.OS
	p.Gates = in.Gates
	if in.OS != nil {
		p.OSBackends = in.OSBackends
	}

	if cfg := in.KubeadmConfig; cfg != nil {
		if err := addKubeadmConfig(p, cfg, in); err != nil {
			return nil, err
		}
	}
	if p.Kubernetes.LocalEtcd() {
		p.Kubernetes.EtcdRestore = in.EtcdRestore
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	encoded, err := protocol.EncodePlan(p)
	if err != nil {
		return nil, err
	}
	if len(encoded) > maxPlanBytes {
		return nil, fmt.Errorf("%w: %w: encoded plan is %d bytes, more than the %d a plan Secret can carry", ErrInput, ErrTooLarge, len(encoded), maxPlanBytes)
	}
	return p, nil
}

func addKubeadmConfig(p *protocol.NodePlan, cfg *bootstrapv1.KubeadmConfig, in Input) error {
	spec := &cfg.Spec
	files, err := resolveFiles(spec.Files, in.Secrets, in.ControlPlaneVersion)
	if err != nil {
		return err
	}
	p.Files = files

	users, err := resolveUsers(spec.Users, in.Secrets)
	if err != nil {
		return err
	}
	p.Users = users

	if spec.NTP.IsDefined() {
		b, err := json.Marshal(spec.NTP)
		if err != nil {
			return fmt.Errorf("%w: ntp: %w", ErrInput, err)
		}
		p.NTP = b
	}

	// KCP and MachineSets hand the desired config with joinConfiguration (the init
	// configuration is dropped for in-place updates); a config that only has an init
	// configuration is a first control-plane node seen outside that flow.
	nodeReg := spec.InitConfiguration.NodeRegistration
	if spec.JoinConfiguration.IsDefined() {
		nodeReg = spec.JoinConfiguration.NodeRegistration
	}
	for _, a := range nodeReg.KubeletExtraArgs {
		v := ""
		if a.Value != nil {
			v = *a.Value
		}
		p.KubeletExtraArgs = append(p.KubeletExtraArgs, protocol.Arg{Name: a.Name, Value: v})
	}

	if p.Kubernetes.Role == protocol.RoleControlPlane {
		if spec.ClusterConfiguration.IsDefined() {
			b, err := json.Marshal(spec.ClusterConfiguration)
			if err != nil {
				return fmt.Errorf("%w: clusterConfiguration: %w", ErrInput, err)
			}
			p.ClusterConfiguration = b
		}
		// An external etcd is not on this node: nothing to snapshot or check here.
		p.Kubernetes.ExternalEtcd = spec.ClusterConfiguration.Etcd.External.IsDefined()
		p.Kubernetes.EtcdSnapshot = !p.Kubernetes.ExternalEtcd
	}
	return nil
}

func secretValue(secrets map[string]map[string][]byte, name, key string) ([]byte, error) {
	data, ok := secrets[name]
	if !ok {
		return nil, fmt.Errorf("secret %s not found", name)
	}
	v, ok := data[key]
	if !ok {
		return nil, fmt.Errorf("secret %s has no key %q", name, key)
	}
	return v, nil
}

// resolveFiles turns KubeadmConfig files into plan files with their final bytes, in
// the order CABPK and cloud-init use: inline content is rendered as a template first,
// then the encoding is decoded.
func resolveFiles(in []bootstrapv1.File, secrets map[string]map[string][]byte, cpVersion string) ([]protocol.File, error) {
	var out []protocol.File
	for _, f := range in {
		if f.Append != nil && *f.Append {
			// An append file was appended once at bootstrap; appending it again on every
			// update would duplicate its content, and rewriting the whole file would drop
			// what the host had. It stays a bootstrap-time file.
			continue
		}
		var content []byte
		if f.ContentFrom.Secret.Name != "" {
			v, err := secretValue(secrets, f.ContentFrom.Secret.Name, f.ContentFrom.Secret.Key)
			if err != nil {
				return nil, fmt.Errorf("%w: file %s: %w", ErrInput, f.Path, err)
			}
			content = v
		} else {
			text := f.Content
			if f.ContentFormat == bootstrapv1.FileContentFormatTemplate {
				rendered, err := renderTemplate(f.Path, text, cpVersion)
				if err != nil {
					return nil, fmt.Errorf("%w: file %s: %w", ErrInput, f.Path, err)
				}
				text = rendered
			}
			content = []byte(text)
		}
		decoded, err := decode(f.Encoding, content)
		if err != nil {
			return nil, fmt.Errorf("%w: file %s: %w", ErrInput, f.Path, err)
		}
		if len(decoded) > maxFileBytes {
			return nil, fmt.Errorf("%w: file %s: %w: content is %d bytes, more than %d", ErrInput, f.Path, ErrTooLarge, len(decoded), maxFileBytes)
		}
		out = append(out, protocol.File{Path: f.Path, Content: decoded, Permissions: f.Permissions, Owner: f.Owner})
	}
	return out, nil
}

func renderTemplate(name, text, cpVersion string) (string, error) {
	data := map[string]any{}
	if cpVersion != "" {
		data["controlPlane"] = map[string]any{"version": cpVersion}
	}
	tpl, err := template.New(name).Option("missingkey=zero").Funcs(boundedFuncs()).Parse(text)
	if err != nil {
		return "", fmt.Errorf("parse template: %w", err)
	}
	if err := checkTemplateWork(tpl); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&limitedWriter{w: &buf, remaining: maxFileBytes}, data); err != nil {
		return "", fmt.Errorf("render template: %w", err)
	}
	return buf.String(), nil
}

func decode(enc bootstrapv1.Encoding, content []byte) ([]byte, error) {
	switch enc {
	case "":
		return content, nil
	case bootstrapv1.Base64:
		return decodeBase64(content)
	case bootstrapv1.Gzip:
		return gunzip(content)
	case bootstrapv1.GzipBase64:
		raw, err := decodeBase64(content)
		if err != nil {
			return nil, err
		}
		return gunzip(raw)
	default:
		return nil, fmt.Errorf("unknown encoding %q", enc)
	}
}

func decodeBase64(content []byte) ([]byte, error) {
	out, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(content)))
	if err != nil {
		return nil, fmt.Errorf("decode base64: %w", err)
	}
	return out, nil
}

func gunzip(content []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(content))
	if err != nil {
		return nil, fmt.Errorf("decode gzip: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("decode gzip: %w", err)
	}
	if len(out) > maxFileBytes {
		return nil, fmt.Errorf("%w: decoded content exceeds %d bytes", ErrTooLarge, maxFileBytes)
	}
	return out, nil
}

// resolveUsers inlines Secret-sourced passwords, so the agent needs no Secret access
// beyond its own plan.
func resolveUsers(in []bootstrapv1.User, secrets map[string]map[string][]byte) (json.RawMessage, error) {
	if len(in) == 0 {
		return nil, nil
	}
	users := make([]bootstrapv1.User, len(in))
	copy(users, in)
	for i := range users {
		ref := users[i].PasswdFrom.Secret
		if ref.Name == "" {
			continue
		}
		v, err := secretValue(secrets, ref.Name, ref.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: user %s password: %w", ErrInput, users[i].Name, err)
		}
		users[i].Passwd = string(v)
		users[i].PasswdFrom = bootstrapv1.PasswdSource{}
	}
	b, err := json.Marshal(users)
	if err != nil {
		return nil, fmt.Errorf("%w: users: %w", ErrInput, err)
	}
	return b, nil
}

// Pin keeps the kubeadm action and etcd snapshot choice of the published plan when the
// newly built plan asks for the same desired content. Those two fields follow from
// observations that the update itself changes (after `kubeadm upgrade apply` the node
// reports the target version), so recomputing them mid-update would make a new hash
// for the same update. published may be nil.
func Pin(built, published *protocol.NodePlan) *protocol.NodePlan {
	if built == nil || published == nil {
		return built
	}
	strip := func(p protocol.NodePlan) ([]byte, error) {
		p.Kubernetes.Action = ""
		p.Kubernetes.EtcdSnapshot = false
		return json.Marshal(p)
	}
	a, errA := strip(*built)
	b, errB := strip(*published)
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		return built
	}
	pinned := *built
	pinned.Kubernetes.Action = published.Kubernetes.Action
	pinned.Kubernetes.EtcdSnapshot = published.Kubernetes.EtcdSnapshot
	return &pinned
}
