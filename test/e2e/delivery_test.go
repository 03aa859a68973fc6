//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	ggcrtypes "github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// extDelivery labels the namespaces served by the delivery scenario's own extension
// process: it runs with a policy file that maps the declared OS images to the
// artifacts of the test's loopback servers (the shared extension has the built-in
// policy, which maps no image).
const extDelivery = "capi-inplace-delivery"

// OS image names the scenario declares in /etc/capi-inplace/os-image.
const (
	osImageInitial = "e2e-os-1" // what every simulated host boots first (sim:initial)
	osImageHTTP    = "e2e-os-2" // served by the loopback HTTP server
	osImageOCI     = "e2e-os-3" // a blob in the loopback OCI registry
	osImageBytes   = 8 << 20
)

// TestDeclaredOSImageInPlace (issue 14 §1, §2): on the Dev provider, whose
// DevMachine image field is immutable, the OS image is declared in the
// KubeadmConfig file /etc/capi-inplace/os-image and changes in place.
//   - A ClusterClass cluster (3 CP + 1 worker) changes its files variable (the
//     class's patch writes it into the KubeadmControlPlaneTemplate and the
//     KubeadmConfigTemplate): control plane and worker move to e2e-os-2, an 8 MiB
//     image served by a loopback HTTP server.
//   - A plain cluster (KubeadmControlPlane 3 + MachineDeployment 1) changes the KCP's
//     files and points the MachineDeployment at a copy of its KubeadmConfigTemplate:
//     every node moves to e2e-os-3, a blob in a loopback OCI registry.
//
// Asserted on the system: no Machine created or deleted, names and UIDs kept; every
// host boots the new image (simulated A/B store: booted slot's digest and bytes), has
// it in its artifact store and the declared name in /etc/capi-inplace/os-image;
// every node downloaded it from the servers before it was cordoned (the n-th
// cordon of a cluster follows at least n complete downloads). Measured: per node the
// disruption (Node spec.unschedulable true to false) apart from the whole update
// (CAPI's update-in-progress annotation) and the staging (stage-plan to Staged).
// The two clusters are created and rolled at the same time to bound wall time.
func TestDeclaredOSImageInPlace(t *testing.T) {
	t.Parallel()
	requireBinary(t)
	src := startArtifactSources(t)
	startExtensionWithPolicy(t, extDelivery, src.policyYAML())
	s := newScenario(t, "delivery", extDelivery)
	if err := s.stack.CreateClusterClass(s.ctx, s.ns, "inplace"); err != nil {
		t.Fatal(err)
	}
	const ccName, plainName = "dcc", "dplain"
	initial := []localstack.File{{Path: policy.OSImageFile, Content: osImageInitial}}
	for _, spec := range []localstack.ClusterSpec{
		{Namespace: s.ns, Name: ccName, Class: "inplace", Version: fromVersion,
			ControlPlaneReplicas: 3, WorkerReplicas: 1, MDMaxSurge: 0, MDMaxUnavailable: 1, Files: initial},
		{Namespace: s.ns, Name: plainName, Version: fromVersion,
			ControlPlaneReplicas: 3, WorkerReplicas: 1, MDMaxSurge: 0, MDMaxUnavailable: 1, Files: initial},
	} {
		if err := s.stack.CreateCluster(s.ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	s.waitClusterReady(ccName, 4)
	s.waitClusterReady(plainName, 4)
	ccAgents := s.startAgents(ccName, 4)
	plainAgents := s.startAgents(plainName, 4)
	ccBefore, plainBefore := machineIDs(s.machines(ccName)), machineIDs(s.machines(plainName))
	watch := s.watchMachines()
	ccNodes := s.recordNodes(ccAgents.Kubeconfig())
	plainNodes := s.recordNodes(plainAgents.Kubeconfig())

	ccFile := localstack.File{Path: policy.OSImageFile, Content: osImageHTTP}
	plainFile := localstack.File{Path: policy.OSImageFile, Content: osImageOCI}
	start := time.Now()
	s.setTopology(ccName, "", []localstack.File{ccFile})
	s.setKCPFile(plainName, plainFile)
	s.setWorkerFile(plainName, "os3", plainFile)
	s.logf("declared %s on cluster %s (ClusterClass variable) and %s on cluster %s (KCP files, new KubeadmConfigTemplate)",
		osImageHTTP, ccName, osImageOCI, plainName)

	s.waitInPlace(ccName, fromVersion, 4, true, ccBefore, ccFile, ccAgents)
	ccDone := time.Since(start)
	s.waitInPlace(plainName, fromVersion, 4, true, plainBefore, plainFile, plainAgents)
	total := time.Since(start)
	ccNodes.stop()
	plainNodes.stop()
	s.assertNoMachineChurn(watch)

	for _, c := range []struct {
		name   string
		agents *localstack.Agents
		digest string
		nodes  *nodeRecorder
		served *serveLog
	}{
		{ccName, ccAgents, src.httpDigest, ccNodes, &src.httpServed},
		{plainName, plainAgents, src.ociDigest, plainNodes, &src.ociServed},
	} {
		for _, n := range c.agents.Nodes() {
			if err := bootsImage(c.agents.HostRoot(n), c.digest); err != nil {
				t.Errorf("cluster %s node %s: %v", c.name, n, err)
			}
			if err := stagedArtifact(c.agents.HostRoot(n), c.digest); err != nil {
				t.Errorf("cluster %s node %s: %v", c.name, n, err)
			}
		}
		s.logf("EVIDENCE cluster %s: every host boots %s (booted slot's image hashes to it) and holds it at %s",
			c.name, c.digest, protocol.ArtifactPath(c.digest))
		if err := c.nodes.stagedBeforeCordon(c.served.completed(), len(c.agents.Nodes())); err != nil {
			t.Errorf("cluster %s: %v", c.name, err)
		}
		s.logf("EVIDENCE cluster %s: %d complete downloads (%d nodes), each cordon preceded by one more", c.name, len(c.served.completed()), len(c.agents.Nodes()))
		took := watch.durations()
		for _, n := range c.agents.Nodes() {
			r := c.nodes.node(n)
			s.logf("EVIDENCE disruption %s/%s: staging %s (max %d bytes reported), cordoned %s, whole update %s",
				c.name, n, r.staging().Round(100*time.Millisecond), r.maxBytes, r.disruption().Round(100*time.Millisecond), took[machineOf(s, c.name, n)])
		}
	}
	s.logf("EVIDENCE round: declared OS image in place, ClusterClass 3 CP + 1 worker (HTTP) done after %s, plain 3 CP + 1 worker (OCI) after %s, both rolled at once; per machine %v",
		ccDone.Round(time.Second), total.Round(time.Second), watch.durations())
}

// artifactSources are the scenario's loopback servers: an HTTP file server and a
// go-containerregistry registry, each with one OS image, logging complete downloads.
type artifactSources struct {
	httpURL, httpDigest string
	ociURL, ociDigest   string
	httpServed          serveLog
	ociServed           serveLog
}

// serveLog records when each complete download of an artifact ended.
type serveLog struct {
	mu   sync.Mutex
	ends []time.Time
}

func (l *serveLog) add() {
	l.mu.Lock()
	l.ends = append(l.ends, time.Now())
	l.mu.Unlock()
}

func (l *serveLog) completed() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.ends...)
}

func randomImage(t *testing.T) ([]byte, string) {
	t.Helper()
	b := make([]byte, osImageBytes)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return b, "sha256:" + hex.EncodeToString(sum[:])
}

// countingWriter notes a complete body: every byte of a GET of the artifact written.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func startArtifactSources(t *testing.T) *artifactSources {
	t.Helper()
	src := &artifactSources{}
	httpImage, httpDigest := randomImage(t)
	src.httpDigest = httpDigest
	mux := http.NewServeMux()
	mux.HandleFunc("/os/"+osImageHTTP+".img", func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w}
		http.ServeContent(cw, r, osImageHTTP+".img", time.Time{}, strings.NewReader(string(httpImage)))
		if r.Method == http.MethodGet && cw.n == int64(len(httpImage)) {
			src.httpServed.add()
		}
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	src.httpURL = hs.URL + "/os/" + osImageHTTP + ".img"

	ociImage, ociDigest := randomImage(t)
	src.ociDigest = ociDigest
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	blobPath := "/v2/os/e2e-os/blobs/" + ociDigest
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w}
		reg.ServeHTTP(cw, r)
		if r.Method == http.MethodGet && r.URL.Path == blobPath && cw.n == int64(len(ociImage)) {
			src.ociServed.add()
		}
	}))
	t.Cleanup(rs.Close)
	host := strings.TrimPrefix(rs.URL, "http://")
	repo, err := name.NewRepository(host+"/os/e2e-os", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteLayer(repo, static.NewLayer(ociImage, ggcrtypes.MediaType("application/vnd.capi-inplace.e2e.os-image"))); err != nil {
		t.Fatalf("push the OS image to the loopback registry: %v", err)
	}
	src.ociURL = protocol.SchemeOCIHTTP + "://" + host + "/os/e2e-os"
	return src
}

// policyYAML maps the three declared images to artifacts of the simulated backend.
func (src *artifactSources) policyYAML() string {
	return fmt.Sprintf(`backends: {default: %s}
artifacts:
- {image: %s, ref: %q, digest: %q}
- {image: %s, url: %q, digest: %q}
- {image: %s, url: %q, digest: %q}
`, simulated.Name,
		osImageInitial, simulated.InitialRef, simulated.DigestOf([]byte(simulated.InitialRef)),
		osImageHTTP, src.httpURL, src.httpDigest,
		osImageOCI, src.ociURL, src.ociDigest)
}

// startExtensionWithPolicy starts an extension of our own for one scenario, named
// and serving namespaces labelled name, with the policy, and removes it when the
// test ends.
func startExtensionWithPolicy(t *testing.T, name, policyYAML string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policyYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := localstack.OurExtension(suite.stack.BinDir(), name, map[string]string{extensionLabel: name}, nil)
	args := spec.Args
	spec.Args = func(port int, certDir, kubeconfig string) []string {
		return append(args(port, certDir, kubeconfig), "--policy-file="+path)
	}
	ext, err := suite.stack.StartExtension(suite.ctx, spec)
	if err != nil {
		t.Fatalf("start extension %s: %v", name, err)
	}
	t.Cleanup(func() {
		ec := &runtimev1.ExtensionConfig{}
		ec.Name = name
		_ = suite.stack.Client.Delete(suite.ctx, ec)
		ext.Kill()
	})
}

// setKCPFile sets file in a plain cluster's KubeadmControlPlane files (replacing the
// entry of its path).
func (s *scenario) setKCPFile(cluster string, file localstack.File) {
	s.t.Helper()
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster + "-control-plane"}, kcp); err != nil {
		s.t.Fatal(err)
	}
	base := kcp.DeepCopy()
	files := []bootstrapv1.File{{Path: file.Path, Content: file.Content}}
	for _, f := range kcp.Spec.KubeadmConfigSpec.Files {
		if f.Path != file.Path {
			files = append(files, f)
		}
	}
	kcp.Spec.KubeadmConfigSpec.Files = files
	if err := s.stack.Client.Patch(s.ctx, kcp, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("patch KCP files: %v", err)
	}
}

// setWorkerFile points a plain cluster's MachineDeployment at a copy of its
// KubeadmConfigTemplate (<cluster>-worker-<suffix>) with file set, nothing else changed.
func (s *scenario) setWorkerFile(cluster, suffix string, file localstack.File) {
	s.t.Helper()
	s.addMDFile(cluster+"-md-0", cluster+"-worker-"+suffix, file)
}

// bootsImage checks the simulated host's A/B store: the booted slot holds the
// image with digest (its recorded digest and the sha256 of its bytes).
func bootsImage(hostRoot, digest string) error {
	dir := filepath.Join(hostRoot, simulated.Dir)
	var st struct {
		Booted string `json:"booted"`
		Next   string `json:"next"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("decode simulated OS state: %w", err)
	}
	var meta struct {
		Ref    string `json:"ref"`
		Digest string `json:"digest"`
	}
	raw, err = os.ReadFile(filepath.Join(dir, "slots", st.Booted, "meta.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		return fmt.Errorf("decode slot %s: %w", st.Booted, err)
	}
	image, err := os.ReadFile(filepath.Join(dir, "slots", st.Booted, "image"))
	if err != nil {
		return err
	}
	if meta.Digest != digest || simulated.DigestOf(image) != digest || st.Next != st.Booted {
		return fmt.Errorf("boots slot %s (next %s) with %s (%s), image bytes %s; want %s",
			st.Booted, st.Next, meta.Ref, meta.Digest, simulated.DigestOf(image), digest)
	}
	return nil
}

// stagedArtifact checks the host's artifact store holds the image.
func stagedArtifact(hostRoot, digest string) error {
	b, err := os.ReadFile(filepath.Join(hostRoot, protocol.ArtifactPath(digest)))
	if err != nil {
		return fmt.Errorf("artifact store: %w", err)
	}
	if simulated.DigestOf(b) != digest {
		return fmt.Errorf("artifact store: %s holds %s", protocol.ArtifactPath(digest), simulated.DigestOf(b))
	}
	return nil
}

func machineOf(s *scenario, cluster, node string) string {
	for _, m := range s.machines(cluster) {
		if m.Status.NodeRef.Name == node {
			return m.Name
		}
	}
	return ""
}

// nodeRecorder polls a workload cluster's Nodes every 200 ms and records, per
// node, when it was asked to stage, when it reported Staged, and its
// spec.unschedulable transitions: the disruption is cordon to uncordon.
type nodeRecorder struct {
	mu    sync.Mutex
	nodes map[string]*nodeTimes
	done  chan struct{}
	wg    sync.WaitGroup
}

type nodeTimes struct {
	stageAsked, staged   time.Time
	cordoned, uncordoned time.Time
	maxBytes             int64
}

func (n *nodeTimes) staging() time.Duration {
	if n.stageAsked.IsZero() || n.staged.IsZero() {
		return 0
	}
	return n.staged.Sub(n.stageAsked)
}

func (n *nodeTimes) disruption() time.Duration {
	if n.cordoned.IsZero() || n.uncordoned.IsZero() {
		return 0
	}
	return n.uncordoned.Sub(n.cordoned)
}

// recordNodes follows the workload cluster's Nodes by a watch (a list, then every
// event from its resourceVersion; again after the watch ends), so a cordon and the
// uncordon that follows a fraction of a second later are both seen: each is its own
// write and its own event. (A 200 ms poll missed a worker cordoned and uncordoned
// between two polls once the coordinator answered within one call.)
func (s *scenario) recordNodes(kubeconfig string) *nodeRecorder {
	wc := s.workloadClient(kubeconfig)
	r := &nodeRecorder{nodes: map[string]*nodeTimes{}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(s.ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		go func() {
			select {
			case <-r.done:
			case <-ctx.Done():
			}
			cancel()
		}()
		followNodes(ctx, wc, r.observe)
	}()
	s.t.Cleanup(r.stop)
	return r
}

func (r *nodeRecorder) observe(nodes []corev1.Node, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range nodes {
		t := r.nodes[n.Name]
		if t == nil {
			t = &nodeTimes{}
			r.nodes[n.Name] = t
		}
		if n.Annotations[inplacev1.StagePlanAnnotation] != "" && t.stageAsked.IsZero() {
			t.stageAsked = now
		}
		if st, err := protocol.DecodeStagingStatus(n.Annotations[inplacev1.StagingStatusAnnotation]); err == nil {
			if st.Bytes > t.maxBytes {
				t.maxBytes = st.Bytes
			}
			if st.Phase == protocol.StagePhaseStaged && t.staged.IsZero() {
				t.staged = now
			}
		}
		switch {
		case n.Spec.Unschedulable && t.cordoned.IsZero():
			t.cordoned = now
		case !n.Spec.Unschedulable && !t.cordoned.IsZero() && t.uncordoned.IsZero():
			t.uncordoned = now
		}
	}
}

func (r *nodeRecorder) stop() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	r.wg.Wait()
}

func (r *nodeRecorder) node(name string) nodeTimes {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.nodes[name]; t != nil {
		return *t
	}
	return nodeTimes{}
}

// stagedBeforeCordon checks that all nodes were cordoned and uncordoned, and
// that the k-th cordon (in time) came after at least k complete downloads.
func (r *nodeRecorder) stagedBeforeCordon(downloads []time.Time, nodes int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var cordons []time.Time
	for n, t := range r.nodes {
		if t.cordoned.IsZero() || t.uncordoned.IsZero() {
			return fmt.Errorf("node %s: cordoned at %v, uncordoned at %v (both expected)", n, t.cordoned, t.uncordoned)
		}
		cordons = append(cordons, t.cordoned)
	}
	if len(cordons) != nodes {
		return fmt.Errorf("%d nodes seen cordoned, want %d", len(cordons), nodes)
	}
	sort.Slice(cordons, func(i, j int) bool { return cordons[i].Before(cordons[j]) })
	for k, c := range cordons {
		before := 0
		for _, d := range downloads {
			if d.Before(c) {
				before++
			}
		}
		if before < k+1 {
			return fmt.Errorf("cordon %d at %s followed only %d complete downloads (downloads %v)", k+1, c.Format(time.RFC3339Nano), before, downloads)
		}
	}
	return nil
}
