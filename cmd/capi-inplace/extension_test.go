package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/capi-inplace/capi-inplace/internal/extension"
	"github.com/capi-inplace/capi-inplace/internal/extension/extensiontest"
	"github.com/capi-inplace/capi-inplace/internal/guard"
	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

const (
	testImageOld = "registry.example.com/edge/node-os:1.35"
	testImageNew = "registry.example.com/edge/node-os:1.36"
	testDigest   = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// TestExtensionCommand runs `capi-inplace extension` in-process (the real cobra
// command, manager and hook server) against a real kube-apiserver, with a
// self-signed certificate made here, and talks to it over HTTPS as CAPI does.
func TestExtensionCommand(t *testing.T) {
	g := NewWithT(t)
	kubeconfig := startExtensionEnvtest(t)
	dir := t.TempDir()
	certDir := filepath.Join(dir, "certs")
	g.Expect(os.Mkdir(certDir, 0o700)).To(Succeed())
	ca, err := extensiontest.WriteSelfSignedCert(certDir)
	g.Expect(err).NotTo(HaveOccurred())
	policyFile := filepath.Join(dir, "policy.yaml")
	g.Expect(os.WriteFile(policyFile, []byte(fmt.Sprintf(`
backends: {default: bootc}
artifacts:
- image: %s
  ref: quay.io/edge/node-os:1.36
  digest: %s
`, testImageNew, testDigest)), 0o600)).To(Succeed())

	webhookPort, admissionPort, diagPort, healthPort := freeTCPPort(t), freeTCPPort(t), freeTCPPort(t), freeTCPPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newExtensionCommand()
	cmd.SetArgs([]string{
		"--kubeconfig", kubeconfig,
		"--webhook-host", "127.0.0.1",
		"--webhook-port", fmt.Sprint(webhookPort),
		"--admission-port", fmt.Sprint(admissionPort),
		"--webhook-cert-dir", certDir,
		"--diagnostics-address", fmt.Sprintf("127.0.0.1:%d", diagPort),
		"--insecure-diagnostics",
		"--health-addr", fmt.Sprintf("127.0.0.1:%d", healthPort),
		"--policy-file", policyFile,
		"--manage-agents=false",
	})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	g.Eventually(func() (int, error) {
		select {
		case err := <-done:
			return 0, fmt.Errorf("extension exited early: %w", err)
		default:
		}
		r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort))
		if err != nil {
			return 0, err
		}
		_ = r.Body.Close()
		return r.StatusCode, nil
	}, 30*time.Second, 100*time.Millisecond).Should(Equal(http.StatusOK))

	client, err := extensiontest.Client(ca)
	g.Expect(err).NotTo(HaveOccurred())
	base := fmt.Sprintf("https://127.0.0.1:%d", webhookPort)

	t.Run("discovery lists the four handlers", func(t *testing.T) {
		g := NewWithT(t)
		resp := &runtimehooksv1.DiscoveryResponse{}
		_, err := extensiontest.Call(ctx, client, base, runtimehooksv1.Discovery, "", &runtimehooksv1.DiscoveryRequest{}, resp)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess))
		var hooks []string
		for _, h := range resp.Handlers {
			hooks = append(hooks, h.RequestHook.Hook+"/"+h.Name)
			g.Expect(*h.FailurePolicy).To(Equal(runtimehooksv1.FailurePolicyFail))
		}
		g.Expect(hooks).To(ConsistOf(
			"CanUpdateMachine/"+extension.HandlerCanUpdateMachine,
			"CanUpdateMachineSet/"+extension.HandlerCanUpdateMachineSet,
			"UpdateMachine/"+extension.HandlerUpdateMachine,
			"GenerateUpgradePlan/"+extension.HandlerGenerateUpgradePlan,
		))
	})

	t.Run("the admission port serves the guard", func(t *testing.T) {
		g := NewWithT(t)
		review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","operation":"UPDATE"}}`
		resp, err := client.Post(fmt.Sprintf("https://127.0.0.1:%d%s", admissionPort, guard.WebhookPath), "application/json", strings.NewReader(review))
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK), string(body))
		g.Expect(string(body)).To(ContainSubstring(`"uid":"u1"`))
	})

	t.Run("patch and one-minor upgrade, files and OS image change are covered", func(t *testing.T) {
		g := NewWithT(t)
		req := machineSetRequest("v1.35.2", "v1.36.1", testImageNew, true)
		resp := callCanUpdateMachineSet(g, ctx, client, base, req)
		g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.GetMessage())
		g.Expect(resp.MachineSetPatch.IsDefined()).To(BeTrue())
		g.Expect(resp.BootstrapConfigTemplatePatch.IsDefined()).To(BeTrue())
		g.Expect(resp.InfrastructureMachineTemplatePatch.IsDefined()).To(BeTrue())
		expectPatchedEqualsDesired(g, req, resp, true, true, true)
	})

	for _, tt := range []struct{ name, from, to string }{
		{"two-minor jump", "v1.34.3", "v1.36.1"},
		{"downgrade", "v1.35.2", "v1.35.1"},
	} {
		t.Run(tt.name+" gets no version patch", func(t *testing.T) {
			g := NewWithT(t)
			req := machineSetRequest(tt.from, tt.to, testImageOld, true)
			resp := callCanUpdateMachineSet(g, ctx, client, base, req)
			g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.GetMessage())
			g.Expect(resp.MachineSetPatch.IsDefined()).To(BeFalse())
			// The files change is still covered: its patch is there, and only it.
			g.Expect(resp.BootstrapConfigTemplatePatch.IsDefined()).To(BeTrue())
			expectPatchedEqualsDesired(g, req, resp, false, true, true)
		})
	}

	t.Run("unmapped OS image gets no infrastructure patch", func(t *testing.T) {
		g := NewWithT(t)
		req := machineSetRequest("v1.35.2", "v1.35.3", "registry.example.com/edge/node-os:unknown", false)
		resp := callCanUpdateMachineSet(g, ctx, client, base, req)
		g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.GetMessage())
		g.Expect(resp.InfrastructureMachineTemplatePatch.IsDefined()).To(BeFalse())
		g.Expect(resp.MachineSetPatch.IsDefined()).To(BeTrue())
		expectPatchedEqualsDesired(g, req, resp, true, false, true)
	})

	t.Run("malformed requests get Failure, not a crash", func(t *testing.T) {
		path := base + mustPath(t, runtimehooksv1.CanUpdateMachineSet, extension.HandlerCanUpdateMachineSet)
		wrongKind := machineSetRequest("v1.35.2", "v1.36.1", testImageOld, true)
		wrongKind.SetGroupVersionKind(runtimehooksv1.GroupVersion.WithKind("CanUpdateMachineRequest"))
		wrongKindBody, _ := json.Marshal(wrongKind)
		wrongSlot := machineSetRequest("v1.35.2", "v1.36.1", testImageOld, true)
		wrongSlot.SetGroupVersionKind(runtimehooksv1.GroupVersion.WithKind("CanUpdateMachineSetRequest"))
		wrongSlot.Desired.MachineSet.Kind = "Machine"
		wrongSlotBody, _ := json.Marshal(wrongSlot)
		for _, c := range []struct {
			name, body, message string
		}{
			{"garbage JSON", `{"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": `, "error unmarshalling request"},
			{"empty body", ``, "error unmarshalling request"},
			{"request of another hook", string(wrongKindBody), `kind "CanUpdateMachineRequest", expected hooks.runtime.cluster.x-k8s.io/v1alpha1 CanUpdateMachineSetRequest`},
			{"Machine in the machineSet slot", string(wrongSlotBody), `desired.machineSet has apiVersion "cluster.x-k8s.io/v1beta2" kind "Machine"`},
		} {
			t.Run(c.name, func(t *testing.T) {
				g := NewWithT(t)
				resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
				code, err := extensiontest.Post(ctx, client, path, []byte(c.body), resp)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(Equal(http.StatusOK))
				g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusFailure))
				g.Expect(resp.GetMessage()).To(ContainSubstring(c.message))
				g.Expect(resp.MachineSetPatch.IsDefined()).To(BeFalse())
			})
		}
		// Still serving.
		resp := callCanUpdateMachineSet(NewWithT(t), ctx, client, base, machineSetRequest("v1.35.2", "v1.35.3", testImageOld, false))
		NewWithT(t).Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	})

	t.Run("UpdateMachine reaches the coordinator and fails clearly on an empty request", func(t *testing.T) {
		g := NewWithT(t)
		resp := &runtimehooksv1.UpdateMachineResponse{}
		_, err := extensiontest.Call(ctx, client, base, runtimehooksv1.UpdateMachine, extension.HandlerUpdateMachine, &runtimehooksv1.UpdateMachineRequest{}, resp)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusFailure))
		g.Expect(resp.GetMessage()).NotTo(Equal(extension.MessageNoCoordinator))
		g.Expect(resp.GetMessage()).To(ContainSubstring("achine"))
		g.Expect(resp.GetRetryAfterSeconds()).To(BeZero())
	})

	t.Run("metrics are served", func(t *testing.T) {
		g := NewWithT(t)
		r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", diagPort))
		g.Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		g.Expect(string(body)).To(ContainSubstring(`capi_inplace_hook_calls_total{hook="CanUpdateMachineSet",status="Success"}`))
		g.Expect(string(body)).To(ContainSubstring(`capi_inplace_hook_calls_total{hook="CanUpdateMachineSet",status="Failure"}`))
		g.Expect(string(body)).To(ContainSubstring(`capi_inplace_planner_decisions_total{covered="false",hook="CanUpdateMachineSet",object="MachineSet"}`))
		g.Expect(string(body)).To(ContainSubstring(`capi_inplace_hook_duration_seconds_bucket`))
	})

	t.Run("a rotated certificate is picked up without a restart", func(t *testing.T) {
		g := NewWithT(t)
		newCA, err := extensiontest.WriteSelfSignedCert(certDir)
		g.Expect(err).NotTo(HaveOccurred())
		newClient, err := extensiontest.Client(newCA)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() error {
			resp := &runtimehooksv1.DiscoveryResponse{}
			_, err := extensiontest.Call(ctx, newClient, base, runtimehooksv1.Discovery, "", &runtimehooksv1.DiscoveryRequest{}, resp)
			return err
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		// And the old certificate is gone: a fresh client trusting only the old CA
		// is refused.
		oldClient, err := extensiontest.Client(ca)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = extensiontest.Call(ctx, oldClient, base, runtimehooksv1.Discovery, "", &runtimehooksv1.DiscoveryRequest{}, &runtimehooksv1.DiscoveryResponse{})
		g.Expect(err).To(MatchError(ContainSubstring("certificate signed by unknown authority")))
	})

	cancel()
	select {
	case err := <-done:
		g.Expect(err).NotTo(HaveOccurred())
	case <-time.After(30 * time.Second):
		t.Fatal("extension did not stop after its context was cancelled")
	}
}

// machineSetRequest builds a CanUpdateMachineSet request: a MachineDeployment
// rollout from version from to version to, the Dev (in-memory) infrastructure
// template switching to image, and, with filesChange, a new file.
func machineSetRequest(from, to, image string, filesChange bool) *runtimehooksv1.CanUpdateMachineSetRequest {
	cur := pt.KubeadmConfigSpec()
	des := pt.KubeadmConfigSpec()
	if strings.HasPrefix(to, "v1.36") {
		// KCP and the topology controller drop this gate from 1.36 on.
		des.ClusterConfiguration.FeatureGates = nil
	}
	if !strings.HasPrefix(from, "v1.35") {
		cur.ClusterConfiguration.FeatureGates = des.ClusterConfiguration.FeatureGates
	}
	if filesChange {
		des.Files = append(des.Files, bootstrapv1.File{Path: "/etc/edge/site.conf", Content: "site=42\n", Permissions: "0644"})
	}
	raw := func(v any) runtime.RawExtension { b, _ := json.Marshal(v); return runtime.RawExtension{Raw: b} }
	return &runtimehooksv1.CanUpdateMachineSetRequest{
		Current: runtimehooksv1.CanUpdateMachineSetRequestObjects{
			MachineSet:                    *pt.MachineSet("md-0-7f9c", from, "md-0-infra-a", "md-0-bootstrap-a"),
			InfrastructureMachineTemplate: raw(pt.DevMachineTemplate("md-0-infra-a", pt.DevMachineSpec(testImageOld)).Object),
			BootstrapConfigTemplate:       raw(pt.KubeadmConfigTemplate("md-0-bootstrap-a", cur)),
		},
		Desired: runtimehooksv1.CanUpdateMachineSetRequestObjects{
			MachineSet:                    *pt.MachineSet("md-0-5d2b", to, "md-0-infra-b", "md-0-bootstrap-b"),
			InfrastructureMachineTemplate: raw(pt.DevMachineTemplate("md-0-infra-b", pt.DevMachineSpec(image)).Object),
			BootstrapConfigTemplate:       raw(pt.KubeadmConfigTemplate("md-0-bootstrap-b", des)),
		},
	}
}

func callCanUpdateMachineSet(g Gomega, ctx context.Context, c *http.Client, base string, req *runtimehooksv1.CanUpdateMachineSetRequest) *runtimehooksv1.CanUpdateMachineSetResponse {
	resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
	code, err := extensiontest.Call(ctx, c, base, runtimehooksv1.CanUpdateMachineSet, extension.HandlerCanUpdateMachineSet, req, resp)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK))
	return resp
}

// expectPatchedEqualsDesired applies the answer's patches to current as CAPI does
// and checks, per object, that the compared part (spec.template.spec) became equal
// to desired where the answer covers it (sameX), and stayed different otherwise.
func expectPatchedEqualsDesired(g Gomega, req *runtimehooksv1.CanUpdateMachineSetRequest, resp *runtimehooksv1.CanUpdateMachineSetResponse, sameMachineSet, sameInfra, sameBootstrap bool) {
	base := []string{"spec", "template", "spec"}
	check := func(name string, cur, des *unstructured.Unstructured, patch runtimehooksv1.Patch, machine, same bool) {
		var p []byte
		if patch.IsDefined() {
			g.Expect(patch.PatchType).To(Equal(runtimehooksv1.JSONPatchType))
			p = patch.Patch
		}
		patched, err := pt.Apply(cur, p, base)
		g.Expect(err).NotTo(HaveOccurred(), name)
		got, want := pt.Compared(patched, base, machine), pt.Compared(des, base, machine)
		if same {
			g.Expect(got).To(Equal(want), "%s: patched current must equal desired", name)
		} else {
			g.Expect(got).NotTo(Equal(want), "%s: an uncovered change must stay a difference", name)
		}
	}
	fromRaw := func(r runtime.RawExtension) *unstructured.Unstructured {
		m := map[string]any{}
		g.Expect(json.Unmarshal(r.Raw, &m)).To(Succeed())
		return &unstructured.Unstructured{Object: m}
	}
	check("MachineSet", pt.ToUnstructured(req.Current.MachineSet), pt.ToUnstructured(req.Desired.MachineSet), resp.MachineSetPatch, true, sameMachineSet)
	check("DevMachineTemplate", fromRaw(req.Current.InfrastructureMachineTemplate), fromRaw(req.Desired.InfrastructureMachineTemplate), resp.InfrastructureMachineTemplatePatch, false, sameInfra)
	check("KubeadmConfigTemplate", fromRaw(req.Current.BootstrapConfigTemplate), fromRaw(req.Desired.BootstrapConfigTemplate), resp.BootstrapConfigTemplatePatch, false, sameBootstrap)
}

func mustPath(t *testing.T, hook any, name string) string {
	t.Helper()
	p, err := extensiontest.Path(hook, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startExtensionEnvtest starts a real kube-apiserver and etcd and returns a
// kubeconfig file for them. Skipped only outside CI when KUBEBUILDER_ASSETS is unset.
func startExtensionEnvtest(t *testing.T) string {
	t.Helper()
	env := testenv.StartT(t, testenv.Options{})
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, env.Environment.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func TestExtensionCommandRejectsBadPolicy(t *testing.T) {
	g := NewWithT(t)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	g.Expect(os.WriteFile(policyFile, []byte("artifacts: [{image: x, ref: r, digest: md5:1}]\n"), 0o600)).To(Succeed())
	cmd := newExtensionCommand()
	cmd.SetArgs([]string{"--policy-file", policyFile, "--kubeconfig", filepath.Join(t.TempDir(), "missing")})
	err := cmd.ExecuteContext(context.Background())
	g.Expect(err).To(MatchError(ContainSubstring("policy file " + policyFile)))
	g.Expect(err).To(MatchError(ContainSubstring("is not sha256:<64 lowercase hex>")))
}

func TestGCPercentUnlessGOGCIsSet(t *testing.T) {
	g := NewWithT(t)
	unset := func(string) (string, bool) { return "", false }
	percent, ok := gcPercent(unset)
	g.Expect(ok).To(BeTrue())
	g.Expect(percent).To(Equal(extensionGCPercent))
	_, ok = gcPercent(func(k string) (string, bool) { return "100", k == "GOGC" })
	g.Expect(ok).To(BeFalse(), "an operator's GOGC wins")
}
