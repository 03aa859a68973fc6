package coordinator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/artifact"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/none"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func TestStagingVerdict(t *testing.T) {
	const hash = "0123456789abcdef0123456789abcdef"
	enc := func(st protocol.StagingStatus) string {
		v, err := protocol.EncodeStagingStatus(st)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	asked := map[string]string{inplacev1.StagePlanAnnotation: hash}
	with := func(st string) map[string]string {
		return map[string]string{inplacev1.StagePlanAnnotation: hash, inplacev1.StagingStatusAnnotation: st}
	}
	tests := []struct {
		name      string
		ann       map[string]string
		want      Action
		wantInMsg string
	}{
		{name: "not asked yet", ann: map[string]string{}, want: ActWait, wantInMsg: "asked the agent"},
		{name: "asked, no report", ann: asked, want: ActWait, wantInMsg: "asked the agent"},
		{name: "staging in progress", ann: with(enc(protocol.StagingStatus{PlanHash: hash, Phase: protocol.StagePhaseStaging, Item: protocol.StageKubelet, Items: 2, Done: 1, Bytes: 3 << 20, Size: 6 << 20})),
			want: ActWait, wantInMsg: "kubelet 3.0 of 6.0 MiB, 1 of 2 artifacts staged"},
		{name: "staged", ann: with(enc(protocol.StagingStatus{PlanHash: hash, Phase: protocol.StagePhaseStaged, Items: 2, Done: 2})), want: ActSucceed},
		{name: "failed", ann: with(enc(protocol.StagingStatus{PlanHash: hash, Phase: protocol.StagePhaseFailed, Item: protocol.StageKubeadm, Reason: protocol.StageReasonDigestMismatch, Message: "mismatch"})),
			want: ActReportFailure, wantInMsg: "(kubeadm, DigestMismatch): mismatch; the node was not cordoned"},
		{name: "report about another plan", ann: with(enc(protocol.StagingStatus{PlanHash: "other", Phase: protocol.StagePhaseStaged})), want: ActWait},
		{name: "report for a plan no longer asked for", ann: map[string]string{inplacev1.StagePlanAnnotation: "other",
			inplacev1.StagingStatusAnnotation: enc(protocol.StagingStatus{PlanHash: hash, Phase: protocol.StagePhaseStaged})}, want: ActWait},
		{name: "garbled report", ann: with("{"), want: ActWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d := StagingVerdict("n1", hash, tt.ann)
			g.Expect(d.Action).To(Equal(tt.want))
			g.Expect(d.Message).To(ContainSubstring(tt.wantInMsg))
			if tt.want == ActReportFailure {
				g.Expect(d.Cause).To(Equal(CauseStagingFailed))
			}
		})
	}
}

// otherArch returns a copy of an ELF executable whose header names another
// machine than this one's.
func otherArch(t *testing.T, exe []byte) []byte {
	t.Helper()
	b := bytes.Clone(exe)
	machine := uint16(183) // EM_AARCH64
	if runtime.GOARCH == "arm64" {
		machine = 62 // EM_X86_64
	}
	binary.LittleEndian.PutUint16(b[18:20], machine)
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// TestStageBeforeCordon: with binaries to download, the coordinator asks the node
// to stage them and cordons only after the real agent-side Stager (real downloads
// from a loopback HTTP server, into a host directory) reports them staged. A
// corrupted artifact or one for another architecture fails the update before the
// node is cordoned, with nothing installed on the host.
func TestStageBeforeCordon(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	cfg := testEnv.Require(t)
	self, err := os.Executable()
	g.Expect(err).NotTo(HaveOccurred())
	exe, err := os.ReadFile(self)
	g.Expect(err).NotTo(HaveOccurred())
	foreign := otherArch(t, exe)

	var corrupt atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := exe
		if r.URL.Path == "/v1.36.4/kubelet" {
			body = foreign
		}
		if corrupt.Load() {
			body = bytes.Clone(body)
			body[len(body)/2] ^= 0xff
		}
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	pol, err := policy.Parse(fmt.Appendf(nil, `
kubernetesBinaries:
  v1.36.3:
    %[1]s:
      kubeadm: {url: "%[2]s/v1.36.3/kubeadm", digest: "%[3]s"}
      kubelet: {url: "%[2]s/v1.36.3/kubelet", digest: "%[3]s"}
  v1.36.4:
    %[1]s:
      kubeadm: {url: "%[2]s/v1.36.4/kubeadm", digest: "%[3]s"}
      kubelet: {url: "%[2]s/v1.36.4/kubelet", digest: "%[4]s"}
`, platform, srv.URL, sha(exe), sha(foreign)))
	g.Expect(err).NotTo(HaveOccurred())

	f.node("st1", "v1.35.0", false)
	f.node("st1-peer", "v1.35.0", false)
	n := f.getNode("st1")
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
	g.Expect(f.wl.Status().Update(f.ctx, n)).To(Succeed())

	hostRoot := t.TempDir()
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	store := &artifact.Store{Root: hostRoot}
	stager := &agent.Stager{Store: store, Client: cs, NodeName: "st1", Log: logr.Discard(),
		Backends: func(string) (backend.Backend, error) { return none.New(), nil }}
	agentStages := func() {
		t.Helper()
		err := stager.Reconcile(context.Background(), f.getNode("st1"), f.planSecret("st1"), testAgentKey)
		g.Expect(err).NotTo(HaveOccurred())
	}
	c := f.coordinator(func(o *Options) { o.Binaries = pol })

	// A corrupted download: refused before the node is touched.
	m := f.machine("m-st1", "st1", "v1.36.3", false)
	req := f.request(m, nil)
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.RetryAfterSeconds).To(BeNumerically(">", 0))
	g.Expect(resp.Message).To(ContainSubstring("asked the agent on node st1 to stage plan"))
	node := f.getNode("st1")
	g.Expect(node.Spec.Unschedulable).To(BeFalse(), "not cordoned while the node stages")
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
	g.Expect(node.Annotations).To(HaveKey(inplacev1.StagePlanAnnotation))
	corrupt.Store(true)
	agentStages()
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("could not stage plan"))
	g.Expect(resp.Message).To(ContainSubstring("DigestMismatch"))
	g.Expect(resp.Message).To(ContainSubstring("the node was not cordoned"))
	node = f.getNode("st1")
	g.Expect(node.Spec.Unschedulable).To(BeFalse())
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
	entries, _ := os.ReadDir(filepath.Join(hostRoot, protocol.ArtifactDir, "sha256"))
	g.Expect(entries).To(BeEmpty(), "nothing corrupt kept on the host")

	// A digest mismatch is final (not downloaded again and again) until an
	// operator retries: the source is repaired and the Machine annotated, the
	// next request stages, then the node is cordoned.
	g.Expect(call(c, req).Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	corrupt.Store(false)
	f.annotate(m, inplacev1.RetryAnnotation, "true")
	g.Expect(call(c, req).Message).To(ContainSubstring("retrying node st1"))
	resp = call(c, req)
	g.Expect(resp.Message).To(ContainSubstring("asked the agent"))
	agentStages()
	g.Expect(store.Has(sha(exe))).To(BeTrue())
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	node = f.getNode("st1")
	g.Expect(node.Spec.Unschedulable).To(BeTrue(), "cordoned once staged: %s", resp.Message)
	g.Expect(node.Annotations[inplacev1.DesiredPlanAnnotation]).To(Equal(node.Annotations[inplacev1.StagePlanAnnotation]))

	// Binaries for another architecture: refused before cordon.
	f.node("st2", "v1.35.0", false)
	n = f.getNode("st2")
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
	g.Expect(f.wl.Status().Update(f.ctx, n)).To(Succeed())
	stager2 := &agent.Stager{Store: &artifact.Store{Root: t.TempDir()}, Client: cs, NodeName: "st2", Log: logr.Discard(),
		Backends: func(string) (backend.Backend, error) { return none.New(), nil }}
	req2 := f.request(f.machine("m-st2", "st2", "v1.36.4", false), nil)
	g.Expect(call(c, req2).Message).To(ContainSubstring("asked the agent"))
	g.Expect(stager2.Reconcile(context.Background(), f.getNode("st2"), f.planSecret("st2"), testAgentKey)).To(Succeed())
	resp = call(c, req2)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("(kubelet, WrongArchitecture)"))
	g.Expect(f.getNode("st2").Spec.Unschedulable).To(BeFalse())
}
