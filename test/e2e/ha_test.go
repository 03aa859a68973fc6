//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/internal/singlenode"
)

const (
	// extHA labels the namespace the two-replica extension serves.
	extHA = "capi-inplace-ha"
	// haSingleNodeLabel routes the namespace's KubeadmControlPlanes to the replicas'
	// hold webhook (through the forwarder), not to the shared extension's.
	haSingleNodeLabel = "e2e.capi-inplace.dev/single-node-ha"
	// haLease is the extension's leader election lease (cmd/capi-inplace LeaderElectionID).
	haLease = "capi-inplace-extension"
)

// haReplicas are two `capi-inplace extension --leader-elect` processes behind one
// loopback forwarder (localstack.ExtensionReplicas), each with its own metrics port so
// that the test can ask each which one leads (controller-runtime's
// leader_election_master_status gauge).
type haReplicas struct {
	*localstack.ExtensionReplicas
	metrics map[int]int // hook port -> metrics port
}

// TestTwoReplicasSurviveLeaderKill (issue 16 §5): the extension runs as two replicas
// behind one address, as config/default ships it. A plain cluster of 1 control plane
// (single-node path: the leader's controller updates it) and 1 worker (upstream's
// MachineDeployment in-place path: the hooks) moves one minor up with a file change.
// While the control-plane node is in the middle of its update (its agent paused before
// restart-kubelet), the lease holder is killed with SIGKILL. Asserted on the API: the
// other replica takes the Lease (new holderIdentity, one more transition, its own
// leader gauge 1), the control plane finishes and is released, the workers then update
// through hooks that only the survivor can answer (new forwarder connections after the
// kill go to it alone), every Node reports the target, no Machine is created or
// deleted, names and UIDs are kept, both hosts carry the file.
func TestTwoReplicasSurviveLeaderKill(t *testing.T) {
	requireBinary(t)
	stopSharedExtension(t)
	s := newScenario(t, "ha", extHA)
	if err := s.stack.CreateNamespace(s.ctx, s.ns, map[string]string{haSingleNodeLabel: "true"}); err != nil {
		t.Fatal(err)
	}
	reps := s.startHAReplicas()

	const cluster = "ha"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Version: fromVersion,
		ControlPlaneReplicas: 1, WorkerReplicas: 1, MDMaxSurge: 0, MDMaxUnavailable: 1,
		Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}},
	}); err != nil {
		t.Fatal(err)
	}
	s.optIn(cluster)
	s.waitClusterReady(cluster, 2)
	agents := s.startAgents(cluster, 2)
	before := machineIDs(s.machines(cluster))
	watch := s.watchMachines()
	const pause = ".sim/pause-before-restart-kubelet"
	for _, n := range agents.Nodes() {
		if err := writeHostFile(agents, n, pause, ""); err != nil {
			t.Fatal(err)
		}
	}
	file := localstack.File{Path: "/etc/capi-inplace-e2e/round", Content: "1"}

	roundStart := time.Now()
	kcpName := cluster + "-control-plane"
	kcp := s.kcp(kcpName)
	base := kcp.DeepCopy()
	kcp.Spec.Version = toVersion
	for i := range kcp.Spec.KubeadmConfigSpec.Files {
		if kcp.Spec.KubeadmConfigSpec.Files[i].Path == file.Path {
			kcp.Spec.KubeadmConfigSpec.Files[i].Content = file.Content
		}
	}
	if err := s.stack.Client.Patch(s.ctx, kcp, client.MergeFrom(base)); err != nil {
		t.Fatalf("patch KCP: %v", err)
	}
	if _, held := kcp.Annotations[inplacev1.HoldAnnotation]; !held {
		t.Fatalf("the KCP write was not held by the replicas' webhook: %v", kcp.Annotations)
	}

	var paused string
	s.eventually(rolloutTimeout, "the control-plane node paused mid-update (before restart-kubelet)", func() error {
		for _, n := range agents.Nodes() {
			if _, err := hostFile(agents, n, ".sim/paused-at"); err == nil {
				paused = n
				return nil
			}
		}
		return fmt.Errorf("no node paused yet")
	})
	leader, survivor := reps.leader(s)
	lease := s.lease()
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("Lease %s/%s has no holder while a replica leads", s.ns, haLease)
	}
	oldHolder, oldTransitions := *lease.Spec.HolderIdentity, ptrInt32(lease.Spec.LeaseTransitions)
	countsAtKill, answeredAtKill := reps.Forwarder.Counts(), reps.Forwarder.Answered()
	s.logf("node %s paused mid-update; killing the lease holder %s (pid %d, holder %s) with SIGKILL",
		paused, leader.Spec.Name, leader.Process().Pid(), oldHolder)
	killedAt := time.Now()
	leader.Kill()

	s.eventually(time.Minute, "the surviving replica holds the Lease", func() error {
		l := s.lease()
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == oldHolder {
			return fmt.Errorf("holder still %v", l.Spec.HolderIdentity)
		}
		if got := ptrInt32(l.Spec.LeaseTransitions); got <= oldTransitions {
			return fmt.Errorf("leaseTransitions %d, was %d", got, oldTransitions)
		}
		if !reps.leads(survivor) {
			return fmt.Errorf("%s does not report leader_election_master_status 1", survivor.Spec.Name)
		}
		return nil
	})
	takeover := time.Since(killedAt)
	newLease := s.lease()
	s.logf("EVIDENCE Lease %s/%s: holder %s -> %s, transitions %d -> %d, %s after the SIGKILL of %s; %s reports itself leader",
		s.ns, haLease, oldHolder, *newLease.Spec.HolderIdentity, oldTransitions, ptrInt32(newLease.Spec.LeaseTransitions),
		takeover.Round(100*time.Millisecond), leader.Spec.Name, survivor.Spec.Name)
	for _, n := range agents.Nodes() {
		_ = os.Remove(filepath.Join(agents.HostRoot(n), pause))
	}

	s.waitReleased(kcpName, rolloutTimeout)
	cpDone := time.Since(roundStart)
	s.setWorkerVersionAndFiles(cluster, toVersion, "v2", file)
	s.waitInPlace(cluster, toVersion, 2, true, before, file, agents)
	round := time.Since(roundStart)
	s.assertNoMachineChurn(watch)

	if exited, err := survivor.Process().Exited(); exited {
		t.Fatalf("the surviving replica exited: %v", err)
	}
	final, answered := reps.Forwarder.Counts(), reps.Forwarder.Answered()
	leaderAddr, survivorAddr := addrOf(leader), addrOf(survivor)
	s.logf("EVIDENCE forwarder connections at the kill %v, at the end %v; bytes answered at the kill %v, at the end %v (%s killed, %s survived)",
		countsAtKill, final, answeredAtKill, answered, leaderAddr, survivorAddr)
	if final[leaderAddr] != countsAtKill[leaderAddr] || answered[leaderAddr] != answeredAtKill[leaderAddr] {
		t.Fatalf("the killed replica got connections or answered after the kill: connections %d -> %d, bytes %d -> %d",
			countsAtKill[leaderAddr], final[leaderAddr], answeredAtKill[leaderAddr], answered[leaderAddr])
	}
	// The workers' UpdateMachine calls and the release's hold-webhook call came after
	// the kill, through the forwarder: only the survivor can have answered them.
	if answered[survivorAddr] <= answeredAtKill[survivorAddr] {
		t.Fatalf("the surviving replica answered nothing after the kill (%d bytes): nothing proves it served the hooks", answered[survivorAddr])
	}
	s.logf("EVIDENCE round: 1 CP (single-node path, leader killed mid-update) + 1 worker (hooks on the survivor), %s -> %s + files, took %s (control plane %s, lease takeover %s)",
		fromVersion, toVersion, round.Round(time.Second), cpDone.Round(time.Second), takeover.Round(100*time.Millisecond))
}

// stopSharedExtension kills the shared extension process, if a scenario before started
// it, for the rest of the test, and starts it again afterwards: it runs the single-node
// controller without leader election, and it would otherwise drive the HA scenario's
// held KubeadmControlPlane and hide whether the survivor took over.
func stopSharedExtension(t *testing.T) {
	t.Helper()
	if ours.ext == nil {
		return
	}
	ours.ext.Kill()
	t.Cleanup(func() {
		if err := ours.ext.Start(suite.ctx); err != nil {
			t.Errorf("restart the shared extension: %v", err)
		}
	})
}

// startHAReplicas starts two leader-electing replicas of our extension (lease in the
// scenario's namespace) behind one forwarder, registered as ExtensionConfig extHA and
// as the hold webhook of namespaces labelled haSingleNodeLabel, and waits until one of
// them leads. Everything is removed when the test ends.
func (s *scenario) startHAReplicas() *haReplicas {
	s.t.Helper()
	r := &haReplicas{metrics: map[int]int{}}
	spec, err := withE2EPolicy(localstack.OurExtension(suite.stack.BinDir(), extHA, map[string]string{extensionLabel: extHA}, nil))
	if err != nil {
		s.t.Fatal(err)
	}
	args := spec.Args
	spec.Args = func(port int, certDir, kubeconfig string) []string {
		mp, ok := r.metrics[port]
		if !ok {
			if mp, err = freeLoopbackPort(); err != nil {
				s.t.Fatal(err)
			}
			r.metrics[port] = mp
		}
		return append(args(port, certDir, kubeconfig),
			"--leader-elect", "--leader-elect-namespace="+s.ns,
			fmt.Sprintf("--diagnostics-address=127.0.0.1:%d", mp), "--insecure-diagnostics")
	}
	reps, err := s.stack.StartExtensionReplicas(s.ctx, spec, 2)
	if err != nil {
		s.t.Fatalf("start two extension replicas: %v", err)
	}
	r.ExtensionReplicas = reps
	url := reps.URL() + strings.TrimPrefix(singlenode.DefaultWebhookPath, "/")
	hook := singlenode.MutatingWebhook(admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: reps.Cert.CAPEM})
	hook.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{haSingleNodeLabel: "true"}}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-single-node-ha"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook},
	}
	if err := s.stack.Client.Create(s.ctx, mwc); err != nil {
		s.t.Fatalf("register the replicas' hold webhook: %v", err)
	}
	s.t.Cleanup(func() {
		ctx := context.Background()
		_ = s.stack.Client.Delete(ctx, mwc)
		_ = s.stack.Client.Delete(ctx, &runtimev1.ExtensionConfig{ObjectMeta: metav1.ObjectMeta{Name: extHA}})
		for _, e := range reps.Replicas {
			e.Kill()
		}
		reps.Forwarder.Close()
	})
	s.eventually(time.Minute, "one replica leads", func() error {
		_, _, err := r.leaderErr()
		return err
	})
	s.logf("two replicas %s and %s behind %s", reps.Replicas[0].Spec.Name, reps.Replicas[1].Spec.Name, reps.Forwarder.Addr())
	return r
}

// leader returns the replica that reports itself leader and the other one; it fails
// unless exactly one leads.
func (r *haReplicas) leader(s *scenario) (leader, other *localstack.Extension) {
	s.t.Helper()
	l, o, err := r.leaderErr()
	if err != nil {
		s.t.Fatal(err)
	}
	return l, o
}

func (r *haReplicas) leaderErr() (leader, other *localstack.Extension, err error) {
	var leaders []*localstack.Extension
	for _, e := range r.Replicas {
		if r.leads(e) {
			leaders = append(leaders, e)
		} else {
			other = e
		}
	}
	if len(leaders) != 1 || other == nil {
		return nil, nil, fmt.Errorf("%d of %d replicas lead", len(leaders), len(r.Replicas))
	}
	return leaders[0], other, nil
}

// leads reads the replica's controller-runtime gauge
// leader_election_master_status{name="capi-inplace-extension"}.
func (r *haReplicas) leads(e *localstack.Extension) bool {
	if exited, _ := e.Process().Exited(); exited {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", r.metrics[e.Port]), nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if sc.Text() == `leader_election_master_status{name="`+haLease+`"} 1` {
			return true
		}
	}
	return false
}

// lease reads the extension's leader election Lease in the scenario's namespace.
func (s *scenario) lease() *coordinationv1.Lease {
	s.t.Helper()
	l := &coordinationv1.Lease{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: haLease}, l); err != nil {
		s.t.Fatalf("read Lease %s/%s: %v", s.ns, haLease, err)
	}
	return l
}

func addrOf(e *localstack.Extension) string { return fmt.Sprintf("127.0.0.1:%d", e.Port) }

func ptrInt32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
