//go:build e2eos

package e2eos

import (
	"slices"
	"strings"
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
	// v3Entry is GRUB's line when it boots v3's deployment (ostree's title of its
	// boot entry).
	v3Entry = "Booting `Debian GNU/Linux 12 (bookworm) v3-broken (ostree:0)"
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
	for _, line := range []string{v3Entry, "capi-inplace: booting ostree entry 1 (boot_counter=-1)"} {
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
