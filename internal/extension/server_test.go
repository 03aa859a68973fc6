package extension_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/capi-inplace/capi-inplace/internal/extension"
	"github.com/capi-inplace/capi-inplace/internal/extension/extensiontest"
	"github.com/capi-inplace/capi-inplace/internal/freeport"
	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// startServer runs the hook server on a free port with a fresh self-signed
// certificate and returns its base URL and a client that trusts it.
func startServer(tb testing.TB) (string, *http.Client) {
	tb.Helper()
	base, client, _ := startServers(tb, nil)
	return base, client
}

// startServers runs the hook server and, when admission is not nil, an admission
// server (NewAdmissionServer) with admission registered on it, each on a free port
// with one self-signed certificate; it returns their base URLs and a client that
// trusts them.
func startServers(tb testing.TB, admission func(webhook.Server)) (hooks string, client *http.Client, admissionBase string) {
	tb.Helper()
	dir := tb.TempDir()
	ca, err := extensiontest.WriteSelfSignedCert(dir)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := extension.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	h, err := extension.NewHandlers(extension.Options{Policy: policy.Builtin(), Metrics: m})
	if err != nil {
		tb.Fatal(err)
	}
	client, err = extensiontest.Client(ca)
	if err != nil {
		tb.Fatal(err)
	}
	opts := func() extension.ServerOptions {
		return extension.ServerOptions{Host: "127.0.0.1", Port: freePort(tb), CertDir: dir,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}}
	}
	hookOpts := opts()
	srv, err := extension.NewServer(h, hookOpts)
	if err != nil {
		tb.Fatal(err)
	}
	run(tb, srv.Start, hookOpts.Port, client)
	if admission != nil {
		admOpts := opts()
		adm, err := extension.NewAdmissionServer(srv, admOpts)
		if err != nil {
			tb.Fatal(err)
		}
		admission(adm)
		run(tb, adm.Start, admOpts.Port, client)
		admissionBase = fmt.Sprintf("https://127.0.0.1:%d", admOpts.Port)
	}
	return fmt.Sprintf("https://127.0.0.1:%d", hookOpts.Port), client, admissionBase
}

// run starts a server until the test ends and waits until it accepts TLS
// connections on port.
func run(tb testing.TB, start func(context.Context) error, port int, client *http.Client) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), client.Transport.(*http.Transport).TLSClientConfig)
		if err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("server did not come up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(tb testing.TB) int {
	tb.Helper()
	port, err := freeport.Port()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

func TestServerDiscoveryAndFailurePolicies(t *testing.T) {
	g := NewWithT(t)
	base, client := startServer(t)
	resp := &runtimehooksv1.DiscoveryResponse{}
	code, err := extensiontest.Call(context.Background(), client, base, runtimehooksv1.Discovery, "", &runtimehooksv1.DiscoveryRequest{}, resp)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	byName := map[string]runtimehooksv1.ExtensionHandler{}
	for _, h := range resp.Handlers {
		byName[h.Name] = h
	}
	g.Expect(byName).To(HaveLen(4))
	for name, hook := range map[string]string{
		extension.HandlerCanUpdateMachine: "CanUpdateMachine", extension.HandlerCanUpdateMachineSet: "CanUpdateMachineSet", extension.HandlerUpdateMachine: "UpdateMachine",
		extension.HandlerGenerateUpgradePlan: "GenerateUpgradePlan",
	} {
		g.Expect(byName).To(HaveKey(name))
		g.Expect(byName[name].RequestHook.Hook).To(Equal(hook))
		g.Expect(byName[name].FailurePolicy).NotTo(BeNil())
		g.Expect(*byName[name].FailurePolicy).To(Equal(runtimehooksv1.FailurePolicyFail), name)
	}
	g.Expect(*byName[extension.HandlerUpdateMachine].TimeoutSeconds).To(Equal(int32(30)))
}

func TestServerUpdateMachineWithoutCoordinator(t *testing.T) {
	g := NewWithT(t)
	base, client := startServer(t)
	resp := &runtimehooksv1.UpdateMachineResponse{}
	_, err := extensiontest.Call(context.Background(), client, base, runtimehooksv1.UpdateMachine, extension.HandlerUpdateMachine, &runtimehooksv1.UpdateMachineRequest{}, resp)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.GetMessage()).To(Equal(extension.MessageNoCoordinator))
}

// TestServerGenerateUpgradePlan: the hook is served on the same TLS server, answers
// Failure with a clear message without a management-cluster reader, and a body
// over the request limit is refused before it is decoded.
func TestServerGenerateUpgradePlan(t *testing.T) {
	g := NewWithT(t)
	base, client := startServer(t)
	req := &runtimehooksv1.GenerateUpgradePlanRequest{
		FromControlPlaneKubernetesVersion: "v1.33.0", FromWorkersKubernetesVersion: "v1.33.0", ToKubernetesVersion: "v1.36.0",
	}
	req.Cluster.Name, req.Cluster.Namespace = "c", "ns"
	resp := &runtimehooksv1.GenerateUpgradePlanResponse{}
	_, err := extensiontest.Call(context.Background(), client, base, runtimehooksv1.GenerateUpgradePlan, extension.HandlerGenerateUpgradePlan, req, resp)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.GetMessage()).To(ContainSubstring(extension.MessageNoClusterReader))

	huge := &runtimehooksv1.GenerateUpgradePlanRequest{ToKubernetesVersion: strings.Repeat("9", int(extension.DefaultMaxRequestBodyBytes))}
	code, _ := extensiontest.Call(context.Background(), client, base, runtimehooksv1.GenerateUpgradePlan, extension.HandlerGenerateUpgradePlan, huge, &runtimehooksv1.GenerateUpgradePlanResponse{})
	g.Expect(code).To(Equal(http.StatusRequestEntityTooLarge))
}

// BenchmarkCanUpdateMachineSetHTTPS measures one full CanUpdateMachineSet round trip
// over HTTPS (keep-alive connection): encode, TLS, decode, plan, encode the answer.
func BenchmarkCanUpdateMachineSetHTTPS(b *testing.B) {
	base, client := startServer(b)
	spec := pt.KubeadmConfigSpec()
	des := pt.KubeadmConfigSpec()
	des.ClusterConfiguration.FeatureGates = nil
	des.Files = append(des.Files, bootstrapv1.File{Path: "/etc/edge/site.conf", Content: "site=42\n"})
	raw := func(v any) []byte { bs, _ := json.Marshal(v); return bs }
	req := &runtimehooksv1.CanUpdateMachineSetRequest{
		Current: runtimehooksv1.CanUpdateMachineSetRequestObjects{
			MachineSet: *pt.MachineSet("md-0-a", "v1.35.2", "infra-a", "boot-a"),
		},
		Desired: runtimehooksv1.CanUpdateMachineSetRequestObjects{
			MachineSet: *pt.MachineSet("md-0-b", "v1.36.1", "infra-b", "boot-b"),
		},
	}
	req.Current.InfrastructureMachineTemplate.Raw = raw(pt.DevMachineTemplate("infra-a", pt.DevMachineSpec("")).Object)
	req.Desired.InfrastructureMachineTemplate.Raw = raw(pt.DevMachineTemplate("infra-b", pt.DevMachineSpec("")).Object)
	req.Current.BootstrapConfigTemplate.Raw = raw(pt.KubeadmConfigTemplate("boot-a", spec))
	req.Desired.BootstrapConfigTemplate.Raw = raw(pt.KubeadmConfigTemplate("boot-b", des))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
		if _, err := extensiontest.Call(ctx, client, base, runtimehooksv1.CanUpdateMachineSet, extension.HandlerCanUpdateMachineSet, req, resp); err != nil {
			b.Fatal(err)
		}
		if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess || !resp.MachineSetPatch.IsDefined() {
			b.Fatalf("unexpected answer: %+v", resp)
		}
	}
}
