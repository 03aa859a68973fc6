package kube

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

var testRescue = &RescuePod{Image: "registry.example/capi-inplace-agent:v1", Args: []string{"rescue", "--host-root=/host"}, HostRoot: "/host"}

// TestArmRescue: the rescue static pod is the agent's image, privileged, in
// the host's network and PID namespace with the host's root mounted, named
// after the attempt it was armed for; arming again changes nothing, disarming
// removes it, and a host without a rescue pod writes none.
func TestArmRescue(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Rescue: testRescue}
	g.Expect(h.ArmRescue("a1")).To(Succeed())

	var pod corev1.Pod
	g.Expect(yaml.Unmarshal([]byte(read(t, root, RescueManifest)), &pod)).To(Succeed())
	g.Expect(pod.Namespace).To(Equal("kube-system"))
	g.Expect(pod.Annotations).To(HaveKeyWithValue(rescueAttemptAnnotation, "a1"))
	g.Expect(pod.Spec.HostNetwork).To(BeTrue(), "etcd and the API server answer on the host's loopback")
	g.Expect(pod.Spec.HostPID).To(BeTrue(), "systemd answers a client whose PID it can read")
	g.Expect(pod.Spec.RestartPolicy).To(Equal(corev1.RestartPolicyOnFailure))
	g.Expect(pod.Spec.Containers).To(HaveLen(1))
	c := pod.Spec.Containers[0]
	g.Expect(c.Image).To(Equal(testRescue.Image))
	g.Expect(c.Args).To(Equal(testRescue.Args))
	g.Expect(c.SecurityContext.Privileged).To(HaveValue(BeTrue()))
	g.Expect(c.VolumeMounts).To(ConsistOf(corev1.VolumeMount{Name: "host", MountPath: "/host"}))
	g.Expect(pod.Spec.Volumes[0].HostPath.Path).To(Equal("/"))

	info, err := os.Stat(filepath.Join(root, RescueManifest))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.ArmRescue("a1")).To(Succeed())
	again, err := os.Stat(filepath.Join(root, RescueManifest))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.SameFile(info, again)).To(BeTrue(), "arming again rewrites nothing")

	first := read(t, root, RescueManifest)
	g.Expect(h.ArmRescue("a2")).To(Succeed())
	g.Expect(read(t, root, RescueManifest)).NotTo(Equal(first), "another attempt is another pod to the kubelet")

	g.Expect(h.DisarmRescue()).To(Succeed())
	g.Expect(filepath.Join(root, RescueManifest)).NotTo(BeAnExistingFile())
	g.Expect(h.DisarmRescue()).To(Succeed(), "nothing to remove")

	none := &Host{Root: root, Runner: &backendtest.Runner{}}
	g.Expect(none.ArmRescue("a1")).To(Succeed())
	g.Expect(filepath.Join(root, RescueManifest)).NotTo(BeAnExistingFile(), "no rescue pod without the agent's image")
}

// stoppedMember is a member that does not answer (stopped) and whose restore
// runs restore.
type stoppedMember struct {
	etcd.Local
	restore func(ctx context.Context, cfg etcd.RestoreConfig) error
}

func (*stoppedMember) Status(context.Context) (etcd.Status, error) {
	return etcd.Status{}, os.ErrDeadlineExceeded
}
func (*stoppedMember) Stopped(context.Context, string) (bool, error) { return true, nil }
func (m *stoppedMember) Restore(ctx context.Context, cfg etcd.RestoreConfig) error {
	return m.restore(ctx, cfg)
}

// TestRestoreRepeatsAfterAPowerCut: a restore that dies with etcd's and the API
// server's manifests out of the manifest directory (a power cut: nothing after
// that line runs) is finished by its repeat, which puts both back. The rescue
// pod that repeats it after a reboot is the executor's to arm and remove
// (state.RescueWanted): the restore leaves it as it is.
func TestRestoreRepeatsAfterAPowerCut(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	etcdManifest := "spec:\n  containers:\n  - name: etcd\n    command: [etcd, --name=cp-1, --data-dir=/var/lib/etcd, --initial-advertise-peer-urls=https://10.0.0.5:2380]\n"
	apiManifest := "spec:\n  containers:\n  - name: kube-apiserver\n    command: [kube-apiserver, --advertise-address=127.0.0.1, --secure-port=1]\n"
	write(t, root, EtcdManifest, etcdManifest, 0o600)
	write(t, root, APIServerManifest, apiManifest, 0o600)
	write(t, root, EtcdDataDir+"/member/snap/db", "current", 0o600)
	write(t, root, attemptDir("a1")+"/etcd-members.json", `{"members":[{"Name":"cp-1"}]}`, 0o600)
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Rescue: testRescue}
	g.Expect(h.ArmRescue("a1")).To(Succeed())

	// The process dies while etcd restores its data.
	var seen []string
	member := &stoppedMember{restore: func(context.Context, etcd.RestoreConfig) error {
		for _, p := range []string{EtcdManifest, APIServerManifest, RescueManifest} {
			if _, err := os.Stat(filepath.Join(root, p)); err == nil {
				seen = append(seen, p)
			}
		}
		runtime.Goexit()
		return nil
	}}
	h.Etcd = member
	died := make(chan struct{})
	go func() {
		defer close(died)
		_ = h.RestoreEtcd(context.Background(), "a1")
	}()
	<-died
	g.Expect(seen).To(Equal([]string{RescueManifest}), "while etcd and the API server are stopped, only the rescue pod is in the manifest directory")

	// The repeat (the rescue pod after the reboot, or the agent) finishes it.
	member.restore = func(_ context.Context, cfg etcd.RestoreConfig) error {
		return os.MkdirAll(filepath.Join(cfg.DataDir, "member", "snap"), 0o700)
	}
	g.Expect(h.RestoreEtcd(context.Background(), "a1")).To(Succeed())
	g.Expect(read(t, root, EtcdManifest)).To(Equal(etcdManifest))
	g.Expect(read(t, root, APIServerManifest)).To(Equal(apiManifest))
	g.Expect(filepath.Join(root, RescueManifest)).To(BeAnExistingFile(), "the rescue pod stays until the rollback ends")
}

// TestAPIServerReady: the probe asks /readyz at the manifest's port and counts
// only a ready answer, or a refusal of its identity (the server serves), as
// ready.
func TestAPIServerReady(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		noServer  bool
		noFile    bool
		wantReady bool
	}{
		{name: "ready", status: http.StatusOK, wantReady: true},
		{name: "not ready", status: http.StatusInternalServerError},
		{name: "anonymous refused: it serves", status: http.StatusUnauthorized, wantReady: true},
		{name: "forbidden: it serves", status: http.StatusForbidden, wantReady: true},
		{name: "nothing listens", noServer: true},
		{name: "no manifest", noFile: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var paths []string
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				paths = append(paths, r.URL.Path)
				w.WriteHeader(tt.status)
				_, _ = fmt.Fprint(w, "readyz check failed")
			}))
			_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
			g.Expect(err).NotTo(HaveOccurred())
			if tt.noServer {
				srv.Close()
			} else {
				defer srv.Close()
			}
			root := t.TempDir()
			if !tt.noFile {
				write(t, root, APIServerManifest, "spec:\n  containers:\n  - name: kube-apiserver\n    command: [kube-apiserver, --secure-port="+port+"]\n", 0o600)
			}
			err = (&Host{Root: root}).APIServerReady(context.Background())
			if tt.wantReady {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(paths).To(Equal([]string{"/readyz"}))
			} else {
				g.Expect(err).To(HaveOccurred())
			}
		})
	}
}
