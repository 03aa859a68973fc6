//go:build e2eos

package e2eos

import (
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/test/e2eos/vmapi"
)

// The OSTree scenarios run the same agent, API server and coordinator's part as
// the RAUC ones, on the OSTree image (hack/osimage/build.sh: ostree-disk.raw): a
// sysroot with stateroot "capi" and v1 deployed, GRUB loading the menu that
// libostree's grub2 backend regenerates at every deploy and undeploy, and boot
// counting in the ESP's grubenv (boot_counter, greenboot's contract). The agent
// pulls commits from the repository the test serves (remote "lane", added by the
// node's bootstrap) through the product's ostree backend.

const (
	// ostreeRemote is the remote's name in the plans' refs.
	ostreeRemote = "lane"
	// v2Entry and v3Entry are GRUB's lines when it boots v2's or v3's deployment
	// as the default (ostree's title of its boot entry).
	v2Entry = "Booting `Debian GNU/Linux 12 (bookworm) v2-good (ostree:0)"
	v3Entry = "Booting `Debian GNU/Linux 12 (bookworm) v3-broken (ostree:0)"
	// ostreeTrial is GRUB's line when it boots the default deployment for its
	// trial (grub-ostree.cfg counted boot_counter down from 1), ostreeFallback its
	// line when the trial is used up and it boots the previous deployment.
	ostreeTrial    = "capi-inplace: booting ostree entry 0 (boot_counter=0)"
	ostreeFallback = "capi-inplace: booting ostree entry 1 (boot_counter=-1)"
)

// ostreePlan is an OS-only plan for the lane's node: commit version of the lane's
// repository through the ostree backend, pinned by its checksum.
func (l *agentLane) ostreePlan(version string) *protocol.NodePlan {
	l.t.Helper()
	commit := ostreeCommits[version]
	if commit == "" {
		l.t.Fatalf("no OSTree commit %s in %s", version, imageDir)
	}
	p := protocol.NewPlan(l.node)
	p.Machine = protocol.MachineRef{Namespace: "default", Name: l.node, Cluster: "e2eos"}
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: kubeletVersion, Action: protocol.KubeadmNone}
	p.OS = &protocol.OSImage{Backend: "ostree", Ref: ostreeRemote + ":lane/" + version, Digest: "sha256:" + commit}
	if err := p.Validate(); err != nil {
		l.t.Fatal(err)
	}
	return p
}

// expectDeployed checks, from inside the VM, the booted deployment's commit and
// image version and the deployment list (`ostree admin status`, default first).
func expectDeployed(t *testing.T, f vmapi.Facts, booted, image string, deployments ...string) {
	t.Helper()
	if f.Deployment != booted || f.ImageVersion != image {
		t.Fatalf("booted deployment %s image %q, want %s (%s)", f.Deployment, f.ImageVersion, booted, image)
	}
	if !slices.Equal(f.Deployments, deployments) {
		t.Fatalf("deployments %v, want %v", f.Deployments, deployments)
	}
	if !strings.Contains(" "+f.Cmdline+" ", " ostree=") {
		t.Fatalf("cmdline %q has no ostree= argument", f.Cmdline)
	}
}

// expectOSTreeBoots checks the image of every boot that reached userspace and
// that each ran the commit of that image.
func expectOSTreeBoots(t *testing.T, f vmapi.Facts, want string) {
	t.Helper()
	var got []string
	for _, b := range f.Boots {
		got = append(got, b.ImageVersion)
		if c := ostreeCommits[b.ImageVersion]; c != b.Deployment {
			t.Fatalf("boot %s ran image %s from deployment %s, want commit %s", b.ID, b.ImageVersion, b.Deployment, c)
		}
	}
	if strings.Join(got, " ") != want {
		t.Fatalf("boots that reached userspace: %s, want %s", strings.Join(got, " "), want)
	}
}

// TestOSTreeDeploysAndFallsBack: on the OSTree image, the agent pulls v2 while v1
// serves (nothing deployed yet), deploys it when it is desired, reboots, verifies
// the booted deployment and commits; an ordinary reboot boots v2 again. The next
// plan, v3, whose kernel panics, is deployed and tried once: GRUB boots the
// previous deployment (v2) by itself, the agent there rolls back (undeploys v3)
// without another reboot and reports RolledBack; the next plan's boots run v1 and
// v2 only.
// The last plan's image boots but fails a gate: the agent deploys the previous
// commit again and reboots into it, RolledBack. The updates run one after the
// other in one VM: a power-on under emulation costs a minute.
func TestOSTreeDeploysAndFallsBack(t *testing.T) {
	v1, v2, v3 := ostreeCommits["v1"], ostreeCommits["v2-good"], ostreeCommits["v3-broken"]
	l := startAgentLaneOn(t, "e2eos-ostree", "ostree-disk.raw", func(f vmapi.Facts) { expectDeployed(t, f, v1, "v1", v1) },
		&vmapi.OSTreeRemote{Name: ostreeRemote, URL: ostreeRemoteURL})

	// The good image: pulled beside the running deployment, which stays the only one.
	hash, took := l.publish(l.ostreePlan("v2-good"))
	l.figure("staging (ostree pull of v2)", took)
	f := l.facts()
	expectDeployed(t, f, v1, "v1", v1)
	expectEnv(t, f, map[string]string{"boot_counter": ""})

	t0 := time.Now()
	out := l.expectEnd(hash, 20*time.Minute, protocol.PhaseCommitted, "")
	l.figure("v2: desired to Committed (deploy, reboot, verify, gates, commit)", time.Since(t0))
	if len(out.reboots) > 0 {
		l.figure("v2: reboot by the agent into the new deployment", out.reboots[0])
	}
	f = l.facts()
	// The trial ended: the new default reached userspace and was marked good.
	expectDeployed(t, f, v2, "v2-good", v2, v1)
	expectEnv(t, f, map[string]string{"boot_counter": ""})
	expectOSTreeBoots(t, f, "v1 v2-good")
	runs := map[string]int{"backend-stage": 1, "backend-activate": 1, "reboot": 1, "backend-verify": 1, "gates": 1, "backend-commit": 1}
	l.expectRuns(runs)

	// Committed means the default from then on, with nothing run again.
	l.boot = f
	f, d := l.reboot()
	l.figure("ordinary reboot after the commit", d)
	expectDeployed(t, f, v2, "v2-good", v2, v1)
	expectOSTreeBoots(t, f, "v1 v2-good v2-good")
	l.expectRuns(runs)
	l.figure("v2: total from power-on", time.Since(l.start))

	// The unbootable image, the node's next plan.
	t0 = time.Now()
	hash, took = l.publish(l.ostreePlan("v3-broken"))
	l.figure("staging (ostree pull of v3)", took)
	out = l.expectEnd(hash, 25*time.Minute, protocol.PhaseRolledBack, state.ReasonActionFailed)
	l.figure("v3: published to RolledBack (deploy, failed trial, fallback, rollback)", time.Since(t0))
	if len(out.reboots) > 0 {
		l.figure("v3: reboot by the agent, failed trial and GRUB's fallback", out.reboots[0])
	}
	if len(out.reboots) > 1 {
		t.Fatalf("the helper saw %d boots after the agent's reboot, want one (GRUB's fallback; none by the rollback)", len(out.reboots))
	}
	// GRUB's own lines on the serial console: it booted v3's entry (ostree's title
	// of the deployment), then, the trial used up, the previous deployment.
	for _, line := range []string{v3Entry, ostreeFallback} {
		if shown, err := l.vm.EverShowed(line); err != nil || !shown {
			t.Fatalf("GRUB never showed %q on the console (%v)", line, err)
		}
	}
	f = l.facts()
	// v3 is undeployed and the trial's state gone with it: v2 is the default again.
	expectDeployed(t, f, v2, "v2-good", v2)
	if slices.Contains(f.Deployments, v3) {
		t.Fatalf("v3 is still deployed: %v", f.Deployments)
	}
	expectEnv(t, f, map[string]string{"boot_counter": ""})
	expectOSTreeBoots(t, f, "v1 v2-good v2-good v2-good")
	l.expectRuns(map[string]int{"backend-stage": 1, "backend-activate": 1, "reboot": 1, "backend-verify": 1,
		"rollback/backend-rollback": 1, "rollback/verify-rollback": 1})
	l.expectRollback("backend-rollback", "reboot (skipped)", "verify-rollback")

	// A gate that fails once the new image runs: the next plan takes the node
	// back to v1 with a gate (the workload's readiness) that v1 does not pass.
	// v1 boots and verifies, the gate fails, the agent deploys v2 again (the
	// booted v1 stays as the rollback deployment) and reboots into it.
	p := l.ostreePlan("v1")
	p.Gates = []protocol.Gate{{Name: "app-ready", Command: []string{"/usr/bin/test", "-e", "/etc/lane-app-ready"}, PassWithinSeconds: 10}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	hash, _ = l.publish(p)
	out = l.expectEnd(hash, 20*time.Minute, protocol.PhaseRolledBack, state.ReasonGateFailed)
	l.figure("v1 with a failing gate: published to RolledBack (deploy, reboot, gates, re-deploy, reboot)", time.Since(t0))
	if len(out.reboots) > 1 {
		l.figure("reboot by the rollback into the re-deployed v2", out.reboots[1])
	}
	f = l.facts()
	if f.Deployment != v2 || f.ImageVersion != "v2-good" || len(f.Deployments) < 2 || f.Deployments[0] != v2 || f.Deployments[1] != v1 {
		t.Fatalf("after the rollback: booted %s (%s), deployments %v; want v2 %s booted and the default, v1 %s next", f.Deployment, f.ImageVersion, f.Deployments, v2, v1)
	}
	expectEnv(t, f, map[string]string{"boot_counter": ""})
	expectOSTreeBoots(t, f, "v1 v2-good v2-good v2-good v1 v2-good")
	// v3 was booted once, for its trial, never again: GRUB's lines of every power-on.
	if n, err := l.vm.Showings(v3Entry); err != nil || n != 1 {
		t.Fatalf("GRUB booted v3's entry in %d power-ons (%v), want 1", n, err)
	}
	l.expectRuns(map[string]int{"backend-stage": 1, "backend-activate": 1, "reboot": 1, "backend-verify": 1, "gates": 1,
		"rollback/backend-rollback": 1, "rollback/reboot": 1, "rollback/verify-rollback": 1})
	l.expectRollback("backend-rollback", "reboot", "verify-rollback")
	l.figure("total", time.Since(l.start))
}

// heldRepo serves the lane's OSTree repository to one test's VM and holds every
// request for a content object (a file, .filez in an archive repository) until
// release: a pull of a commit then fetches the commit and its directory objects
// and none of its files, for as long as the test needs to cut the power in the
// middle of it. The pull of v2 takes seconds unhindered, too short for a cut
// timed from outside to land in it.
type heldRepo struct {
	// url is the repository as the VM reaches it.
	url   string
	srv   *http.Server
	files http.Handler
	// held is closed by the first request held; released once the test lets
	// every request through.
	held, released        chan struct{}
	heldOnce, releaseOnce sync.Once
	// objects counts the objects served (held ones once answered).
	objects atomic.Int64
}

// serveHeldRepo serves the repository for the test, closed when it ends.
func serveHeldRepo(t *testing.T) *heldRepo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &heldRepo{
		url:   "http://" + net.JoinHostPort(hostFromVM, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)),
		files: http.FileServer(http.Dir(filepath.Join(imageDir, "ostree-repo"))),
		held:  make(chan struct{}), released: make(chan struct{}),
	}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	// Close drops the connections of requests still held; a VM powered off
	// dropped them already (cleanups run last first: the VM's cut ran before).
	t.Cleanup(func() {
		r.release()
		_ = r.srv.Close()
	})
	return r
}

func (r *heldRepo) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if strings.HasSuffix(req.URL.Path, ".filez") {
		select {
		case <-r.released:
		default:
			r.heldOnce.Do(func() { close(r.held) })
			select {
			case <-r.released:
			case <-req.Context().Done(): // the VM lost its power
				return
			}
		}
	}
	if strings.HasPrefix(req.URL.Path, "/objects/") {
		r.objects.Add(1)
	}
	r.files.ServeHTTP(w, req)
}

// release lets every request through, those held and those to come.
func (r *heldRepo) release() { r.releaseOnce.Do(func() { close(r.released) }) }

// waitHeld waits until a pull asks for a file the repository holds.
func (r *heldRepo) waitHeld(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-r.held:
	case <-time.After(timeout):
		t.Fatalf("no pull asked the repository for a file within %s", timeout)
	}
}

// TestOSTreeSurvivesPowerCuts: on the OSTree image, the power fails while the
// agent pulls v2, and again while GRUB boots v2's deployment for its trial.
// After the first cut v1 boots, nothing of v2 is deployed, and the agent stages
// again until the pull completes; after the second, GRUB's boot counter, used up
// by the trial that never reached userspace, boots v1, where the agent finds the
// old deployment booted, undeploys v2 without a reboot and reports RolledBack;
// the coordinator's retry then brings v2 up as the default, committed.
func TestOSTreeSurvivesPowerCuts(t *testing.T) {
	v1, v2 := ostreeCommits["v1"], ostreeCommits["v2-good"]
	repo := serveHeldRepo(t)
	l := startAgentLaneOn(t, "e2eos-ostree-cuts", "ostree-disk.raw", func(f vmapi.Facts) { expectDeployed(t, f, v1, "v1", v1) },
		&vmapi.OSTreeRemote{Name: ostreeRemote, URL: repo.url})
	t0 := time.Now()
	hash := l.askToStage(l.ostreePlan("v2-good"))

	// The cut during `ostree pull`: the repository holds the commit's files, so
	// the pull has fetched the commit and directory objects, and none of the
	// files, when the power fails.
	repo.waitHeld(t, 5*time.Minute)
	l.figure("asked to stage to the pull's first file (held)", time.Since(t0))
	if st := l.waitStaging(hash, "a staging status", func(protocol.StagingStatus) bool { return true }); st.Phase != protocol.StagePhaseStaging {
		t.Fatalf("the staging is %s (%+v) at the power cut, want %s: the cut must land in the pull", st.Phase, st, protocol.StagePhaseStaging)
	}
	l.vm.PowerCut()
	l.figure("objects the pull had fetched at the cut", repo.objects.Load())
	repo.release()
	f := l.powerOn()
	expectDeployed(t, f, v1, "v1", v1)
	expectEnv(t, f, map[string]string{"boot_counter": ""})
	// The product's backend reads the sysroot after the cut as before it.
	if f.BackendErr != "" || f.Backend.Booted != v1 || f.Backend.Staged != "" {
		t.Fatalf("the ostree backend's status after the cut: %+v (%s), want v1 %s booted, nothing staged", f.Backend, f.BackendErr, v1)
	}
	t0 = time.Now()
	l.waitStaging(hash, "the plan staged after the cut", staged)
	l.figure("staging again after the cut (ostree pull of v2)", time.Since(t0))
	// Staged beside the running deployment: v1 still the only one, no trial armed.
	f = l.facts()
	expectDeployed(t, f, v1, "v1", v1)
	expectEnv(t, f, map[string]string{"boot_counter": ""})

	// The cut during the trial boot of v2: the agent deploys and reboots; GRUB's
	// lines on the console say it counted the trial down and boots v2's entry.
	l.makeDesired(hash)
	t0 = time.Now()
	for _, line := range []string{ostreeTrial, v2Entry} {
		if err := l.vm.WaitConsole(l.ctx, line, 15*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	l.figure("desired to GRUB booting v2 for its trial (deploy, reboot)", time.Since(t0))
	l.vm.PowerCut()
	f = l.powerOn()
	if f.Deployment != v1 || f.ImageVersion != "v1" {
		t.Fatalf("after the cut in v2's trial: booted deployment %s image %q, want v1 %s", f.Deployment, f.ImageVersion, v1)
	}
	// GRUB's own line of this power-on: the trial was used up, it booted entry 1.
	if err := l.vm.WaitConsole(l.ctx, ostreeFallback, time.Second); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	l.expectEnd(hash, 10*time.Minute, protocol.PhaseRolledBack, state.ReasonActionFailed)
	l.figure("power-on after the trial's cut to RolledBack", time.Since(t0))
	f = l.facts()
	// v2 is undeployed and the trial's state gone with it.
	expectDeployed(t, f, v1, "v1", v1)
	expectEnv(t, f, map[string]string{"boot_counter": ""})
	// The power-on and one boot after each cut: v2's trial never reached userspace.
	expectOSTreeBoots(t, f, "v1 v1 v1")
	l.expectRuns(map[string]int{"backend-stage": 1, "backend-activate": 1, "reboot": 1, "backend-verify": 1,
		"rollback/backend-rollback": 1, "rollback/verify-rollback": 1})
	l.expectRollback("backend-rollback", "reboot (skipped)", "verify-rollback")

	// Retried to done.
	f = l.retryToCommitted(hash)
	expectDeployed(t, f, v2, "v2-good", v2, v1)
	expectEnv(t, f, map[string]string{"boot_counter": ""})
	expectOSTreeBoots(t, f, "v1 v1 v1 v2-good")
	l.expectRuns(map[string]int{"backend-stage": 1, "backend-activate": 1, "reboot": 1, "backend-verify": 1, "gates": 1, "backend-commit": 1})
	// GRUB booted v2's entry in two power-ons, the cut trial and the retry's, and
	// fell back once.
	for line, want := range map[string]int{v2Entry: 2, ostreeFallback: 1} {
		if n, err := l.vm.Showings(line); err != nil || n != want {
			t.Fatalf("GRUB showed %q in %d power-ons (%v), want %d", line, n, err, want)
		}
	}
	l.figure("total", time.Since(l.start))
}
