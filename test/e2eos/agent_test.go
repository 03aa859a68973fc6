//go:build e2eos

package e2eos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
	"github.com/capi-inplace/capi-inplace/test/e2eos/vmapi"
)

// The agent's scenarios run the real capi-inplace-agent in the VM as a systemd
// unit of the image (hack/osimage/rootfs/etc/systemd/system/capi-inplace-agent.service),
// not as the DaemonSet pod the extension installs: the VM has no kubelet and no
// container runtime (both under emulation would add minutes to every boot), and
// what these scenarios prove, the image switch across a real reboot, needs the
// agent on the host, not in a pod. The agent is the same binary with
// the same flags as in its pod but --host-root=/, which is what the pod's
// /host mount gives it. Its API server is a real kube-apiserver and etcd on the
// host, reached from the VM through QEMU's user-mode network; the agent talks
// to it with the RBAC and admission policy the extension installs and a token
// bound to its Node. The test plays the coordinator's part of an OS-only update
// (the plan sealed to the node's key, staged, then desired) and the kubelet's
// (the Node's status, which nothing in the VM updates).

const (
	// kubeletVersion is what the Node reports; the plan keeps it (OS image only).
	kubeletVersion = "v1.35.0"
	// serverName is in the serving certificate envtest makes (localhost and the
	// listen address); the VM reaches the host's loopback as hostFromVM.
	serverName = "localhost"
)

var (
	apiOnce sync.Once
	apiEnv  *testenv.Env
	apiErr  error
)

// apiServer starts, once for the lane, the API server the VMs' agents report to,
// with the agent's RBAC and admission policy installed; TestMain stops it.
func apiServer(t *testing.T) *rest.Config {
	t.Helper()
	apiOnce.Do(func() {
		// The lane needs the API server: a missing one fails, never skips.
		_, skip, err := testenv.Assets()
		if err == nil && skip != "" {
			err = errors.New(skip)
		}
		if err != nil {
			apiErr = err
			return
		}
		if apiEnv, apiErr = testenv.Start(testenv.Options{}); apiErr != nil {
			return
		}
		admin, err := ctrlclient.New(apiEnv.Config, ctrlclient.Options{})
		if err != nil {
			apiErr = err
			return
		}
		// The image is never pulled: no kubelet runs the DaemonSet here.
		_, apiErr = agentinstall.Ensure(context.Background(), admin, agentinstall.Config{Image: "registry.example/capi-inplace-agent:e2eos"})
	})
	if apiErr != nil {
		t.Fatalf("API server for the agents: %v", apiErr)
	}
	return rest.CopyConfig(apiEnv.Config)
}

func stopAPIServer() error {
	if apiEnv == nil {
		return nil
	}
	return apiEnv.Stop()
}

// agentLane is a scenario whose VM runs the agent against the lane's API server.
type agentLane struct {
	*lane
	node   string
	client kubernetes.Interface
}

// startAgentLane powers a VM of the RAUC image on into slot A, registers its Node
// and gives its agent a kubeconfig with a token bound to that Node; it returns
// once the agent has published its key.
func startAgentLane(t *testing.T, node string) *agentLane {
	t.Helper()
	return startAgentLaneOn(t, node, "disk.raw", func(f vmapi.Facts) { expectBooted(t, f, "A", "v1") }, nil)
}

// startAgentLaneOn is startAgentLane on the disk image named disk: first checks
// the first boot, remote (OSTree) is the bootstrap's remote.
func startAgentLaneOn(t *testing.T, node, disk string, first func(vmapi.Facts), remote *vmapi.OSTreeRemote) *agentLane {
	t.Helper()
	t.Parallel()
	cfg := apiServer(t)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &agentLane{lane: newLane(t, disk), node: node, client: client}
	// Before the VM powers off (cleanups run last first): the agent's log of the
	// boot that failed, for the reader.
	t.Cleanup(func() {
		if !t.Failed() || !l.vm.Running() {
			return
		}
		if data, err := l.vm.AgentLog(context.Background()); err == nil {
			_ = os.WriteFile(filepath.Join(artifactsDir, t.Name(), "agent.log"), data, 0o644)
		}
	})
	n := l.registerNode()
	kubeconfig := l.agentKubeconfig(cfg, n)
	first(l.powerOn())
	l.figure("power on to helper", time.Since(l.start))
	if err := l.vm.ConfigureAgent(l.ctx, vmapi.AgentConfig{Kubeconfig: kubeconfig, NodeName: node, OSTreeRemote: remote}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	l.waitNode("the agent's key", 5*time.Minute, func(n *corev1.Node) (bool, error) {
		_, err := nodeplan.AgentKey(n.Annotations)
		return err == nil, nil
	})
	l.figure("agent start to its key on the Node", time.Since(t0))
	return l
}

// registerNode creates the VM's Node as a kubelet would: Ready, at kubeletVersion.
func (l *agentLane) registerNode() *corev1.Node {
	l.t.Helper()
	nodes := l.client.CoreV1().Nodes()
	n, err := nodes.Create(l.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: l.node}}, metav1.CreateOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	now := metav1.Now()
	n.Status.NodeInfo.KubeletVersion = kubeletVersion
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: now, LastTransitionTime: now}}
	if n, err = nodes.UpdateStatus(l.ctx, n, metav1.UpdateOptions{}); err != nil {
		l.t.Fatal(err)
	}
	return n
}

// agentKubeconfig returns a kubeconfig for the agent in the VM: the API server at
// the host's address as the VM sees it, and a token of the agent's
// ServiceAccount bound to its Node, so that the admission policy confines it to
// that Node as it confines the DaemonSet pod's token.
func (l *agentLane) agentKubeconfig(cfg *rest.Config, n *corev1.Node) []byte {
	l.t.Helper()
	tr, err := l.client.CoreV1().ServiceAccounts(inplacev1.AgentNamespace).CreateToken(l.ctx, agentinstall.AgentName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(int64(2 * 3600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	// The API server sees the agent's ServiceAccount on this node.
	as, err := kubernetes.NewForConfig(&rest.Config{Host: cfg.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData}})
	if err != nil {
		l.t.Fatal(err)
	}
	review, err := as.AuthenticationV1().SelfSubjectReviews().Create(l.ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != agentinstall.ServiceAccountUsername() ||
		len(u.Extra[agentinstall.NodeNameExtra]) != 1 || u.Extra[agentinstall.NodeNameExtra][0] != n.Name {
		l.t.Fatalf("the agent's token authenticates as %+v, want %s on node %s", u, agentinstall.ServiceAccountUsername(), n.Name)
	}

	host, err := url.Parse(cfg.Host)
	if err != nil {
		l.t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lane"] = &clientcmdapi.Cluster{Server: "https://" + net.JoinHostPort(hostFromVM, host.Port()), CertificateAuthorityData: cfg.CAData, TLSServerName: serverName}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["lane"] = &clientcmdapi.Context{Cluster: "lane", AuthInfo: "agent"}
	kc.CurrentContext = "lane"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		l.t.Fatal(err)
	}
	return data
}

// osPlan is an OS-only plan for the lane's node: the bundle through the rauc
// backend, fetched by the agent from its URL, the Kubernetes part unchanged.
func (l *agentLane) osPlan(a protocol.BinaryArtifact) *protocol.NodePlan {
	l.t.Helper()
	p := protocol.NewPlan(l.node)
	p.Machine = protocol.MachineRef{Namespace: "default", Name: l.node, Cluster: "e2eos"}
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: kubeletVersion, Action: protocol.KubeadmNone}
	p.OS = &protocol.OSImage{Backend: "rauc", Ref: protocol.ArtifactPath(a.Digest), Digest: a.Digest, Download: &a}
	if err := p.Validate(); err != nil {
		l.t.Fatal(err)
	}
	return p
}

// publish does the coordinator's part of an update, in its order: the plan sealed
// to the key the agent published, in the node's plan Secret; the node asked to
// stage it; once staged (the new slot written beside the running one), the plan
// made the desired one. It returns the plan's hash and how long staging took.
func (l *agentLane) publish(p *protocol.NodePlan) (string, time.Duration) {
	l.t.Helper()
	hash := l.askToStage(p)
	t0 := time.Now()
	l.waitStaging(hash, "the plan staged", staged)
	took := time.Since(t0)
	l.makeDesired(hash)
	return hash, took
}

// askToStage seals the plan to the agent's key in the node's plan Secret and asks
// the node to stage it; it returns the plan's hash.
func (l *agentLane) askToStage(p *protocol.NodePlan) string {
	l.t.Helper()
	n, err := l.client.CoreV1().Nodes().Get(l.ctx, l.node, metav1.GetOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	key, err := nodeplan.AgentKey(n.Annotations)
	if err != nil {
		l.t.Fatal(err)
	}
	sealed, err := nodeplan.Seal(p, key)
	if err != nil {
		l.t.Fatal(err)
	}
	hash, err := p.Hash()
	if err != nil {
		l.t.Fatal(err)
	}
	secrets := l.client.CoreV1().Secrets(inplacev1.AgentNamespace)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName(l.node),
			Labels: map[string]string{inplacev1.PlanNodeLabel: l.node}},
		Data: map[string][]byte{inplacev1.PlanSecretDataKey: sealed},
	}
	// A node's next plan replaces its previous one in the same Secret.
	_, err = secrets.Create(l.ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(l.ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		l.t.Fatal(err)
	}
	l.annotate(map[string]any{inplacev1.StagePlanAnnotation: hash})
	return hash
}

// waitStaging waits until the node's staging status of plan hash satisfies done;
// a failed staging fails the test.
func (l *agentLane) waitStaging(hash, what string, done func(protocol.StagingStatus) bool) protocol.StagingStatus {
	l.t.Helper()
	var got protocol.StagingStatus
	l.waitNode(what, 20*time.Minute, func(n *corev1.Node) (bool, error) {
		st, err := protocol.DecodeStagingStatus(n.Annotations[inplacev1.StagingStatusAnnotation])
		if err != nil || st.PlanHash != hash {
			return false, nil
		}
		if st.Phase == protocol.StagePhaseFailed {
			return false, fmt.Errorf("staging failed: %s: %s", st.Reason, st.Message)
		}
		got = st
		return done(st), nil
	})
	return got
}

// staged is the staging status of a plan whose new slot is written.
func staged(st protocol.StagingStatus) bool { return st.Phase == protocol.StagePhaseStaged }

// makeDesired makes plan hash the node's desired plan, as the coordinator does
// once it is staged.
func (l *agentLane) makeDesired(hash string) {
	l.t.Helper()
	l.annotate(map[string]any{
		inplacev1.DesiredPlanAnnotation:   hash,
		inplacev1.PlanPublishedAnnotation: time.Now().UTC().Format(time.RFC3339),
	})
}

// retry does what the coordinator's retry of a failed update does on the Node
// (Coordinator.retry): the plan withdrawn, the agent's verdict and the staging
// removed; then, once the agent has forgotten the plan, the plan staged and made
// desired again, as a new publication.
func (l *agentLane) retry(hash string) {
	l.t.Helper()
	l.annotate(map[string]any{inplacev1.DesiredPlanAnnotation: nil, inplacev1.PlanPublishedAnnotation: nil,
		inplacev1.StatusAnnotation: nil, inplacev1.StagingStatusAnnotation: nil, inplacev1.StagePlanAnnotation: nil})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		j, err := l.vm.Journal(l.ctx)
		if err != nil {
			l.t.Fatal(err)
		}
		if j.State.Phase == "" { // forgotten: the journal holds no verdict
			break
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("the agent still journals plan %s (%s) 2 minutes after its withdrawal", hash, j.State.Phase)
		}
		time.Sleep(2 * time.Second)
	}
	l.annotate(map[string]any{inplacev1.StagePlanAnnotation: hash})
	l.waitStaging(hash, "the plan staged again", staged)
	l.makeDesired(hash)
}

// retryToCommitted retries the plan (retry), waits until the agent commits it,
// records how long that took and returns the VM's facts after.
func (l *agentLane) retryToCommitted(hash string) vmapi.Facts {
	l.t.Helper()
	t0 := time.Now()
	l.retry(hash)
	l.expectEnd(hash, 20*time.Minute, protocol.PhaseCommitted, "")
	l.figure("retry to Committed", time.Since(t0))
	return l.facts()
}

// annotate merges ann into the Node's annotations; a nil value removes one.
func (l *agentLane) annotate(ann map[string]any) {
	l.t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		l.t.Fatal(err)
	}
	if _, err := l.client.CoreV1().Nodes().Patch(l.ctx, l.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		l.t.Fatal(err)
	}
}

// waitNode polls the Node until done says so (or fails).
func (l *agentLane) waitNode(what string, timeout time.Duration, done func(*corev1.Node) (bool, error)) *corev1.Node {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, err := l.client.CoreV1().Nodes().Get(l.ctx, l.node, metav1.GetOptions{})
		if err != nil {
			l.t.Fatal(err)
		}
		ok, err := done(n)
		if err != nil {
			l.t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return n
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("no %s within %s (node annotations: %v)", what, timeout, n.Annotations)
		}
		select {
		case <-l.ctx.Done():
			l.t.Fatalf("waiting for %s: %v", what, l.ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// outcome is how an applied plan ended, as the Node and the VM show it.
type outcome struct {
	status protocol.NodeStatus
	node   *corev1.Node
	// rebootStart is when the Node first said the agent reboots; reboots lists,
	// in order, how long each reboot took from then (or from the previous boot)
	// to the helper answering from a new boot.
	rebootStart time.Time
	reboots     []time.Duration
}

// waitOutcome waits for the agent's terminal status of plan hash, watching the
// VM's boots on the way: the agent reboots the VM itself.
func (l *agentLane) waitOutcome(hash string, timeout time.Duration) outcome {
	l.t.Helper()
	var out outcome
	bootID, since := l.boot.BootID, time.Time{}
	out.node = l.waitNode("the plan's outcome", timeout, func(n *corev1.Node) (bool, error) {
		st, err := protocol.DecodeStatus(n.Annotations[inplacev1.StatusAnnotation])
		if err != nil || st.PlanHash != hash {
			return false, nil
		}
		if st.Action == "reboot" && out.rebootStart.IsZero() {
			out.rebootStart, since = time.Now(), time.Now()
		}
		// The helper answers between boots only: a failed request is a VM on its way.
		ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
		f, err := l.vm.Facts(ctx)
		cancel()
		if err == nil && f.BootID != bootID {
			if !since.IsZero() {
				out.reboots = append(out.reboots, time.Since(since))
			}
			bootID, since = f.BootID, time.Now()
			l.t.Logf("booted slot %s, image %s (agent at %s, step %d of %d: %s)", f.Slot, f.ImageVersion, st.Phase, st.Step, st.Steps, st.Action)
		}
		out.status = st
		return st.Phase.Terminal(), nil
	})
	return out
}

// expectEnd waits for plan hash's terminal status and requires phase and, when
// given, reason; the plan is the Node's current one exactly when it committed.
func (l *agentLane) expectEnd(hash string, timeout time.Duration, phase protocol.Phase, reason string) outcome {
	l.t.Helper()
	out := l.waitOutcome(hash, timeout)
	if out.status.Phase != phase || (reason != "" && out.status.Reason != reason) {
		l.t.Fatalf("plan %s ended %s (%s), want %s (%s): %s", hash, out.status.Phase, out.status.Reason, phase, reason, out.status.Message)
	}
	if phase != protocol.PhaseCommitted {
		l.t.Logf("%s: %s: %s", phase, out.status.Reason, out.status.Message)
	}
	if current := out.node.Annotations[inplacev1.CurrentPlanAnnotation]; (current == hash) != (phase == protocol.PhaseCommitted) {
		l.t.Fatalf("the Node's current plan is %q after plan %s ended %s", current, hash, phase)
	}
	return out
}

// expectRuns checks the journal's run count of every action the agent ran.
func (l *agentLane) expectRuns(want map[string]int) {
	l.t.Helper()
	j, err := l.vm.Journal(l.ctx)
	if err != nil {
		l.t.Fatal(err)
	}
	if !maps.Equal(j.Runs, want) {
		l.t.Fatalf("the agent's journal counts runs %v, want %v", j.Runs, want)
	}
}

// TestAgentSurvivesPowerCuts: the power fails while the agent writes the new
// slot, and again while the new slot boots for its trial. After the first cut
// slot A boots and the agent stages again from the start; after the second, GRUB
// boots slot A (B's trial began and never reached userspace), the agent there
// finds the old image, rolls back without a reboot and reports RolledBack; the
// coordinator's retry then brings slot B up, committed.
//
// It is the lane's longest scenario and comes first, so that it starts at once
// beside the others (two at a time: make e2e-os).
func TestAgentSurvivesPowerCuts(t *testing.T) {
	l := startAgentLane(t, "e2eos-agent-cuts")
	hash := l.askToStage(l.osPlan(bundle(t, "v2-good")))

	// The cut during the install: the bundle is downloaded and `rauc install`
	// writes slot B (the backend's stage, the last item).
	l.waitStaging(hash, "the download done", func(st protocol.StagingStatus) bool {
		return staged(st) || st.Done == st.Items-1
	})
	time.Sleep(15 * time.Second)
	if st := l.waitStaging(hash, "a staging status", func(protocol.StagingStatus) bool { return true }); staged(st) {
		t.Fatalf("the install ended before the power cut (%+v): lengthen the image or cut sooner", st)
	}
	l.vm.PowerCut()
	f := l.powerOn()
	expectBooted(t, f, "A", "v1")
	expectEnv(t, f, map[string]string{"ORDER": "A B"})
	t0 := time.Now()
	l.waitStaging(hash, "the plan staged after the cut", staged)
	l.figure("staging again after the cut", time.Since(t0))

	// The cut during the trial boot of slot B: the agent activates and reboots;
	// GRUB's line on the console says the trial has begun.
	l.makeDesired(hash)
	if err := l.vm.WaitConsole(l.ctx, "capi-inplace: booting slot B", 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	l.vm.PowerCut()
	expectBooted(t, l.powerOn(), "A", "v1")
	l.expectEnd(hash, 10*time.Minute, protocol.PhaseRolledBack, state.ReasonActionFailed)
	l.expectRollback("backend-rollback", "reboot (skipped)", "verify-rollback")

	// Retried to done.
	f = l.retryToCommitted(hash)
	expectBooted(t, f, "B", "v2-good")
	expectEnv(t, f, map[string]string{"ORDER": "B A", "B_OK": "1", "B_TRY": "0"})
	// Three boots of slot A (the power-on and one after each cut), the cut trial
	// of B never reaching userspace, then B.
	expectBoots(t, f, "A:v1 A:v1 A:v1 B:v2-good")
	l.figure("total", time.Since(l.start))
}

// TestAgentSwitchesImage: the agent in the VM stages the new image into slot B
// while slot A serves, activates it, reboots the VM, resumes from its journal in
// the new slot, verifies and commits, and reports Committed on its Node.
func TestAgentSwitchesImage(t *testing.T) {
	l := startAgentLane(t, "e2eos-agent-good")
	hash, staged := l.publish(l.osPlan(bundle(t, "v2-good")))
	l.figure("staging (download and rauc install into slot B)", staged)
	// Staged beside the running image: slot A still runs and boots next.
	f := l.facts()
	expectBooted(t, f, "A", "v1")
	expectEnv(t, f, map[string]string{"ORDER": "A B"})

	t0 := time.Now()
	out := l.expectEnd(hash, 20*time.Minute, protocol.PhaseCommitted, "")
	l.figure("desired to Committed (activate, reboot, verify, gates, commit)", time.Since(t0))
	if len(out.reboots) > 0 {
		l.figure("reboot by the agent into the new slot", out.reboots[0])
	}
	f = l.facts()
	expectBooted(t, f, "B", "v2-good")
	expectEnv(t, f, map[string]string{"ORDER": "B A", "B_OK": "1", "B_TRY": "0"})
	expectBoots(t, f, "A:v1 B:v2-good")
	// Every action once across the reboot: the agent of slot B resumed the journal
	// the agent of slot A wrote, after the reboot it asked for.
	runs := map[string]int{"backend-stage": 1, "backend-activate": 1, "reboot": 1, "backend-verify": 1, "gates": 1, "backend-commit": 1}
	l.expectRuns(runs)

	// Committed means the default from then on: GRUB boots slot B again (its trial
	// flag, set by every boot until userspace marks the slot good, was cleared by
	// the last boot's), and the agent of that boot runs nothing again.
	l.boot = f
	f, d := l.reboot()
	l.figure("ordinary reboot after the commit", d)
	expectBooted(t, f, "B", "v2-good")
	expectEnv(t, f, map[string]string{"ORDER": "B A", "B_OK": "1"})
	expectBoots(t, f, "A:v1 B:v2-good B:v2-good")
	l.expectRuns(runs)
	l.figure("total", time.Since(l.start))
}

// TestAgentRollsBackUnbootableImage: the agent switches to an image whose
// userspace never starts; GRUB falls back to slot A by itself, where the agent
// resumes, finds that the old image booted, rolls back (slot B marked bad) and
// reports RolledBack without rebooting again: slot A, which the rollback makes
// the next boot, already runs.
func TestAgentRollsBackUnbootableImage(t *testing.T) {
	l := startAgentLane(t, "e2eos-agent-broken")
	hash, _ := l.publish(l.osPlan(bundle(t, "v3-broken")))

	t0 := time.Now()
	// The cause is an action that failed (Verify: the old slot booted), not a gate.
	out := l.expectEnd(hash, 25*time.Minute, protocol.PhaseRolledBack, state.ReasonActionFailed)
	l.figure("desired to RolledBack (failed trial, fallback, rollback)", time.Since(t0))
	if len(out.reboots) > 0 {
		l.figure("reboot by the agent, failed trial and GRUB's fallback", out.reboots[0])
	}
	if len(out.reboots) > 1 {
		t.Fatalf("the helper saw %d boots after the agent's reboot, want one (GRUB's fallback; none by the rollback)", len(out.reboots))
	}
	// GRUB's own line on the serial console: it did start slot B's trial.
	if tried, err := l.vm.EverShowed("capi-inplace: booting slot B"); err != nil || !tried {
		t.Fatalf("GRUB never showed a boot of slot B on the console (%v): the fallback was not a failed trial", err)
	}
	f := l.facts()
	expectBooted(t, f, "A", "v1")
	// Slot B never reached userspace and is marked bad: GRUB skips it, whatever
	// ORDER says, until a new plan activates it.
	expectEnv(t, f, map[string]string{"A_OK": "1", "B_OK": "0"})
	// The power-on and GRUB's fallback: the rollback found slot A running and
	// booting next, so it did not reboot into it once more.
	expectBoots(t, f, "A:v1 A:v1")
	l.expectRuns(map[string]int{"backend-stage": 1, "backend-activate": 1, "reboot": 1, "backend-verify": 1,
		"rollback/backend-rollback": 1, "rollback/verify-rollback": 1})
	l.expectRollback("backend-rollback", "reboot (skipped)", "verify-rollback")
	l.figure("total", time.Since(l.start))
}

// TestAgentRollsBackWhenAGateFails: the new image boots and verifies, but a gate
// of the plan does not pass in it (the workload's readiness, which this image
// lacks); the agent rolls back, making slot A primary again and slot B bad, and
// reboots into slot A, where it reports RolledBack (GateFailed).
func TestAgentRollsBackWhenAGateFails(t *testing.T) {
	l := startAgentLane(t, "e2eos-agent-gate")
	p := l.osPlan(bundle(t, "v2-good"))
	p.Gates = []protocol.Gate{{Name: "app-ready", Command: []string{"/usr/bin/test", "-e", "/etc/lane-app-ready"}, PassWithinSeconds: 10}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	hash, _ := l.publish(p)

	t0 := time.Now()
	out := l.expectEnd(hash, 20*time.Minute, protocol.PhaseRolledBack, state.ReasonGateFailed)
	l.figure("desired to RolledBack (activate, reboot, gates, rollback, reboot)", time.Since(t0))
	if len(out.reboots) > 1 {
		l.figure("reboot by the rollback into the old slot", out.reboots[1])
	}
	f := l.facts()
	expectBooted(t, f, "A", "v1")
	expectEnv(t, f, map[string]string{"ORDER": "A B", "A_OK": "1", "B_OK": "0"})
	expectBoots(t, f, "A:v1 B:v2-good A:v1")
	l.expectRuns(map[string]int{"backend-stage": 1, "backend-activate": 1, "reboot": 1, "backend-verify": 1, "gates": 1,
		"rollback/backend-rollback": 1, "rollback/reboot": 1, "rollback/verify-rollback": 1})
	l.expectRollback("backend-rollback", "reboot", "verify-rollback")
	l.figure("total", time.Since(l.start))
}

// expectRollback checks the journal's rollback actions, in order: each done, a
// skipped one (recorded done without running) with " (skipped)" after its name.
func (l *agentLane) expectRollback(want ...string) {
	l.t.Helper()
	j, err := l.vm.Journal(l.ctx)
	if err != nil {
		l.t.Fatal(err)
	}
	var got []string
	for _, a := range j.State.Rollback {
		name := a.Name
		if a.Skipped {
			name += " (skipped)"
		}
		if !a.Done {
			name += " (not done)"
		}
		got = append(got, name)
	}
	if !slices.Equal(got, want) {
		l.t.Fatalf("the agent's journal lists rollback actions %q, want %q", got, want)
	}
}
