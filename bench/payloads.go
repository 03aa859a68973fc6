package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
)

// Versions of the measured change: one minor up, as in the e2e rounds.
const (
	FromVersion = "v1.35.2"
	ToVersion   = "v1.36.1"
)

// Call is one encoded hook request: its handler path and body.
type Call struct {
	Hook string // the hook's name, e.g. CanUpdateMachineSet
	Path string // URL path of the handler
	Body []byte
}

// encode sets the request's apiVersion and kind as CAPI's runtime client does and
// returns the Call for the named handler.
func encode(hook runtimecatalog.Hook, handler string, req runtime.Object) (Call, error) {
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return Call{}, err
	}
	gvh, err := catalog.GroupVersionHook(hook)
	if err != nil {
		return Call{}, err
	}
	gvk, err := catalog.Request(gvh)
	if err != nil {
		return Call{}, err
	}
	req.GetObjectKind().SetGroupVersionKind(gvk)
	body, err := json.Marshal(req)
	if err != nil {
		return Call{}, fmt.Errorf("encode %s request: %w", runtimecatalog.HookName(hook), err)
	}
	return Call{Hook: runtimecatalog.HookName(hook), Path: runtimecatalog.GVHToPath(gvh, handler), Body: body}, nil
}

func raw(v any) runtime.RawExtension {
	b, err := json.Marshal(v)
	if err != nil {
		// Only fixtures of known types are encoded here.
		return runtime.RawExtension{}
	}
	return runtime.RawExtension{Raw: b}
}

// desiredSpec is the KubeadmConfig spec after the change: a new file and a changed
// one (the MachineDeployment case of the e2e files round).
func desiredSpec() bootstrapv1.KubeadmConfigSpec {
	s := pt.KubeadmConfigSpec()
	s.Files[0].Content = "edge fleet, updated in place\n"
	s.Files = append(s.Files, bootstrapv1.File{Path: "/etc/edge/site.conf", Content: "site=42\n", Permissions: "0644"})
	return s
}

// CanUpdateMachineSetRequest is what CAPI's MachineDeployment controller sends for a
// version + files change: MachineSets with their KubeadmConfigTemplate (files,
// users, NTP, component args) and DevMachineTemplate.
func CanUpdateMachineSetRequest() *runtimehooksv1.CanUpdateMachineSetRequest {
	req := &runtimehooksv1.CanUpdateMachineSetRequest{
		Current: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *pt.MachineSet("md-0-a", FromVersion, "infra-a", "boot-a")},
		Desired: runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *pt.MachineSet("md-0-b", ToVersion, "infra-b", "boot-b")},
	}
	req.Current.InfrastructureMachineTemplate = raw(pt.DevMachineTemplate("infra-a", pt.DevMachineSpec("")).Object)
	req.Desired.InfrastructureMachineTemplate = raw(pt.DevMachineTemplate("infra-b", pt.DevMachineSpec("")).Object)
	req.Current.BootstrapConfigTemplate = raw(pt.KubeadmConfigTemplate("boot-a", pt.KubeadmConfigSpec()))
	req.Desired.BootstrapConfigTemplate = raw(pt.KubeadmConfigTemplate("boot-b", desiredSpec()))
	return req
}

// CanUpdateMachineRequest is what KubeadmControlPlane sends for one control-plane
// Machine: Machine, KubeadmConfig and DevMachine, current and desired.
func CanUpdateMachineRequest() *runtimehooksv1.CanUpdateMachineRequest {
	req := &runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *pt.Machine("cp-0", FromVersion)},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *pt.Machine("cp-0", ToVersion)},
	}
	req.Current.InfrastructureMachine = raw(pt.DevMachine("cp-0", pt.DevMachineSpec("")).Object)
	req.Desired.InfrastructureMachine = raw(pt.DevMachine("cp-0", pt.DevMachineSpec("")).Object)
	req.Current.BootstrapConfig = raw(pt.KubeadmConfig("cp-0", pt.KubeadmConfigSpec()))
	req.Desired.BootstrapConfig = raw(pt.KubeadmConfig("cp-0", desiredSpec()))
	return req
}

// WorkerMachine is a MachineDeployment worker Machine of cluster in namespace.
func WorkerMachine(namespace, cluster, name, version string) *clusterv1.Machine {
	m := pt.Machine(name, version)
	m.Namespace = namespace
	m.Labels = map[string]string{clusterv1.ClusterNameLabel: cluster, clusterv1.MachineDeploymentNameLabel: "md-0"}
	m.Spec.ClusterName = cluster
	m.Spec.ReadinessGates = nil
	return m
}

// UpdateMachineRequest is what the Machine controller sends for a Machine seeded by
// ClusterObjects: the stored Machine, KubeadmConfig (files, one from a Secret) and
// DevMachine, trimmed to metadata and spec as upstream's cleanupMachine and
// cleanupUnstructured trim them. The coordinator compares it with what is stored.
func UpdateMachineRequest(ctx context.Context, c client.Reader, m *clusterv1.Machine) (*runtimehooksv1.UpdateMachineRequest, error) {
	stored := &clusterv1.Machine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), stored); err != nil {
		return nil, fmt.Errorf("read Machine %s: %w", m.Name, err)
	}
	desired := clusterv1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Namespace: stored.Namespace, Name: stored.Name, Labels: stored.Labels, Annotations: stored.Annotations},
		Spec:       stored.Spec,
	}
	req := &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{Machine: desired}}
	for _, o := range []struct {
		ref clusterv1.ContractVersionedObjectReference
		gvk schema.GroupVersionKind
		dst *runtime.RawExtension
	}{
		{stored.Spec.Bootstrap.ConfigRef, bootstrapv1.GroupVersion.WithKind("KubeadmConfig"), &req.Desired.BootstrapConfig},
		{stored.Spec.InfrastructureRef, pt.DevMachine("", pt.DevMachineSpec("")).GroupVersionKind(), &req.Desired.InfrastructureMachine},
	} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(o.gvk)
		if err := c.Get(ctx, client.ObjectKey{Namespace: stored.Namespace, Name: o.ref.Name}, u); err != nil {
			return nil, fmt.Errorf("read %s %s: %w", o.ref.Kind, o.ref.Name, err)
		}
		trimmed := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "spec": u.Object["spec"]}}
		trimmed.SetName(u.GetName())
		trimmed.SetNamespace(u.GetNamespace())
		trimmed.SetLabels(u.GetLabels())
		trimmed.SetAnnotations(u.GetAnnotations())
		*o.dst = runtime.RawExtension{Object: trimmed}
	}
	return req, nil
}

// Encode returns the Call of a typed request for the named handler.
func Encode(hook runtimecatalog.Hook, handler string, req runtime.Object) (Call, error) {
	return encode(hook, handler, req)
}

// HookClient posts hook calls over HTTPS with keep-alive connections, as CAPI's
// runtime client does, trusting only the extension's CA.
type HookClient struct {
	http *http.Client
	base string
}

// NewHookClient returns a client of https://addr trusting caPEM. The pool keeps
// enough idle connections for the load's concurrency, so the measurement is the
// hook, not TLS handshakes.
func NewHookClient(addr string, caPEM []byte) (*HookClient, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in CA PEM")
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	return &HookClient{http: &http.Client{Transport: tr, Timeout: 30 * time.Second}, base: "https://" + addr}, nil
}

// Answer is the part of every hook response the load checks.
type Answer struct {
	Status            string `json:"status"`
	Message           string `json:"message"`
	RetryAfterSeconds int32  `json:"retryAfterSeconds"`
}

// Do posts c and decodes the response body into out (nil: into an Answer, and a
// status other than Success is an error).
func (h *HookClient) Do(ctx context.Context, c Call, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+c.Path, bytes.NewReader(c.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read %s answer: %w", c.Hook, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", c.Hook, resp.StatusCode, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	var a Answer
	if err := json.Unmarshal(data, &a); err != nil {
		return fmt.Errorf("decode %s answer: %w", c.Hook, err)
	}
	if a.Status != string(runtimehooksv1.ResponseStatusSuccess) {
		return fmt.Errorf("%s answered %s: %s", c.Hook, a.Status, a.Message)
	}
	return nil
}
