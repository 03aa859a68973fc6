//go:build e2ereal

package e2ereal

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
	"github.com/capi-inplace/capi-inplace/test/realcapi"
)

// TestKubeadmBaseline is what TestSingleNodeControlPlane is measured against, in
// the same run: kubeadm's own upgrade procedure for a control plane, by hand, on a
// cluster of the same shape (one control-plane node, a workload on it) that no
// in-place path manages. Drain the node, install the new kubeadm, `kubeadm upgrade
// apply` (the flags the agent uses), install the new kubelet and restart it,
// uncordon. It asserts the node ends at the new release, and reports the time, the
// disruption (cordon to uncordon) and the workload's and API server's availability.
func TestKubeadmBaseline(t *testing.T) {
	// The scenarios run at once, each on clusters of its own: CI time.
	t.Parallel()
	g := newG(t)
	ctx := suite.ctx
	const ns, name = "real-baseline", "baseline"
	createCluster(t, clusterSpec{Namespace: ns, Name: name, Version: from, ControlPlanes: 1})
	node := waitMachinesRunning(t, ns, name, 1)[0].Status.NodeRef.Name
	wc, err := workloadClient(ctx, ns, name)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := suite.stack.WorkloadKubeconfig(ctx, ns, name)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfigFile := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfigFile, kubeconfig, 0o600)).To(Succeed())
	// kubectl runs a command as an operator would: again while the API server
	// does not answer (the new kubelet restarts the control plane's static pods,
	// so the API server goes away for a while after the kubelet's restart).
	kubectl := func(args ...string) {
		t.Helper()
		g.Eventually(func() error {
			out, err := exec.CommandContext(ctx, filepath.Join(suite.root, "bin", "kubectl"), append([]string{"--kubeconfig", kubeconfigFile}, args...)...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
			}
			return nil
		}, 3*time.Minute, 5*time.Second).Should(Succeed())
	}
	// install puts the target release's binary in place as a package manager does:
	// a new file renamed over the old one, which may be running.
	install := func(binary string) {
		t.Helper()
		src := filepath.Join(suite.root, "_cache", "realnode", "k8s", to, binary)
		out, err := exec.CommandContext(ctx, dockerCLI, "cp", src, node+":/usr/bin/"+binary+".new").CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "docker cp %s: %s", binary, out)
		mustNodeExec(t, node, "mv", "/usr/bin/"+binary+".new", "/usr/bin/"+binary)
	}

	deployWorkload(t, wc, "web", 1, true)
	waitControlPlaneHealthy(t, ns, name)
	ip, err := nodeIP(ctx, node)
	g.Expect(err).NotTo(HaveOccurred())
	web := probeAny([]string{fmt.Sprintf("http://%s:%d/", ip, workloadPort)})
	api := lanekit.ProbeAPI(wc)

	start := time.Now()
	cordon := lanekit.WatchCordon(wc, node)
	kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m")
	drained := time.Now()
	install("kubeadm")
	kctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	out, err := nodeExec(kctx, node, "kubeadm", "upgrade", "apply", to, "--yes", "--ignore-preflight-errors="+strings.Join(realcapi.ManualUpgradePreflightIgnores, ","))
	cancel()
	g.Expect(err).NotTo(HaveOccurred(), "kubeadm upgrade apply: %s", out)
	upgraded := time.Now()
	install("kubelet")
	mustNodeExec(t, node, "systemctl", "daemon-reload")
	mustNodeExec(t, node, "systemctl", "restart", "kubelet")
	g.Eventually(func() error { return nodeReadyAt(context.WithoutCancel(ctx), wc, node, to) }, 5*time.Minute).Should(Succeed())
	kubectl("uncordon", node)
	took := time.Since(start)
	g.Eventually(func() error {
		if err := probeOnce(ctx, ip); err != nil {
			return fmt.Errorf("%w; %s", err, podsState(ctx, wc, "web"))
		}
		return nil
	}, 10*time.Minute).Should(Succeed(), "the workload serves again")
	webDown, webLongest, _ := web.Stop()
	ok, all := web.Availability()
	apiDown, apiLongest, apiWindows := api.Stop()

	suite.figures.Add("baseline (kubeadm by hand, same cluster shape): drain -> uncordon at "+to, took)
	suite.figures.Add("baseline: drain, kubeadm upgrade apply, kubelet and uncordon", fmt.Sprintf("%s, %s, %s",
		drained.Sub(start).Round(100*time.Millisecond), upgraded.Sub(drained).Round(100*time.Millisecond), (took-upgraded.Sub(start)).Round(100*time.Millisecond)))
	suite.figures.Add("baseline: cordon -> uncordon", cordon.Stop())
	suite.figures.Add("baseline: workload probes answered (every 100 ms)", fmt.Sprintf("%d of %d (%.2f %%), down %s, longest gap %s", ok, all, 100*float64(ok)/float64(max(all, 1)), webDown.Round(100*time.Millisecond), webLongest.Round(100*time.Millisecond)))
	suite.figures.Add("baseline: API server unavailable (total, longest window, windows)", fmt.Sprintf("%s, %s, %d", apiDown.Round(100*time.Millisecond), apiLongest.Round(100*time.Millisecond), apiWindows))
	g.Expect(mustNodeExec(t, node, "kubelet", "--version")).To(ContainSubstring(to))
}

// nodeReadyAt checks the Node is Ready with its kubelet at version.
func nodeReadyAt(ctx context.Context, wc kubernetes.Interface, name, version string) error {
	n, err := wc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !nodeReady(n) || n.Status.NodeInfo.KubeletVersion != version {
		return fmt.Errorf("node %s: ready %v, kubelet %s", name, nodeReady(n), n.Status.NodeInfo.KubeletVersion)
	}
	return nil
}

// probeOnce asks the workload on the node's host port once.
func probeOnce(ctx context.Context, ip string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d/", ip, workloadPort), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// podsState says, in a line, where the pods of app stand: what a failed wait on
// the workload needs to show when only the end of the output is kept.
func podsState(ctx context.Context, wc kubernetes.Interface, app string) string {
	pods, err := wc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return "pods: " + err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, ", %s=%s %s %s", c.Type, c.Status, c.Reason, protocol.BoundText(c.Message, 200))
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, ", %s waiting %s %s", cs.Name, w.Reason, protocol.BoundText(w.Message, 200))
			}
		}
		b.WriteString("; ")
	}
	if len(pods.Items) == 0 {
		b.WriteString("no pods")
	}
	return b.String()
}
