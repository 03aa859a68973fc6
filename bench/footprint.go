package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// Binaries of the footprint section, in the bench's bin directory.
const (
	AgentBinary     = "capi-inplace-agent"        // cmd/capi-inplace-agent
	ExtensionBinary = "capi-inplace"              // cmd/capi-inplace
	InformerBinary  = "capi-inplace-nodeinformer" // bench/cmd/capi-inplace-nodeinformer
	// EtcdHelperBinary is the agent's etcd helper (cmd/capi-inplace-etcd), in the
	// agent's image; it runs only during a control-plane node's update.
	EtcdHelperBinary = "capi-inplace-etcd"
	// CELHelperBinary is the agent's CEL helper (cmd/capi-inplace-cel), in the
	// agent's image; it runs only for a poll of a CEL gate.
	CELHelperBinary = "capi-inplace-cel"
)

// footprintNode is the Node both processes of the footprint section watch.
const footprintNode = "bench-footprint-0"

// Footprint is the product agent's idle footprint beside a bare client-go Node
// informer measured in the same run, and the product binaries' sizes.
type Footprint struct {
	Agent, Informer       ProcStat
	AgentCPU, InformerCPU time.Duration // utime+stime in the idle window
	Window                time.Duration
	// Sizes of the binaries on disk, in bytes, by name.
	Sizes map[string]int64
}

// MeasureFootprint runs the product agent (capi-inplace-agent, real host mode on an
// empty host root under dir: no plan, so it only watches its Node and its plan
// Secret) and the bare informer for the same Node, side by side against env, and
// reads both processes' memory and CPU after idle.
func MeasureFootprint(ctx context.Context, env *Env, binDir, dir, logDir string, idle time.Duration) (Footprint, error) {
	res := Footprint{Sizes: map[string]int64{}}
	for _, b := range []string{AgentBinary, ExtensionBinary, InformerBinary, EtcdHelperBinary, CELHelperBinary} {
		st, err := os.Stat(filepath.Join(binDir, b))
		if err != nil {
			return res, fmt.Errorf("binary %s (make build; the bench builds %s): %w", b, InformerBinary, err)
		}
		res.Sizes[b] = st.Size()
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return res, err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: inplacev1.AgentNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, err
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: footprintNode}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, fmt.Errorf("create node: %w", err)
	}
	agent, err := localstack.StartProcess(localstack.ProcessSpec{
		Name: "footprint-agent", Path: filepath.Join(binDir, AgentBinary), LogDir: logDir,
		Args: []string{"--host-root", filepath.Join(dir, "footprint-host"), "--node-name", footprintNode,
			"--kubeconfig", env.Kubeconfig, "--health-addr=0"},
	})
	if err != nil {
		return res, err
	}
	defer agent.Stop(10 * time.Second)
	informer, err := localstack.StartProcess(localstack.ProcessSpec{
		Name: "footprint-informer", Path: filepath.Join(binDir, InformerBinary), LogDir: logDir,
		Args: []string{"--kubeconfig", env.Kubeconfig, "--node-name", footprintNode},
	})
	if err != nil {
		return res, err
	}
	defer informer.Stop(10 * time.Second)

	// The agent is running (not idle in a crash loop) once its key is on its Node;
	// start-up work (first lists, the key) is not idle, hence the settle after it.
	const keyWait = 30 * time.Second
	deadline := time.Now().Add(keyWait)
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, footprintNode, metav1.GetOptions{})
		if err == nil && n.Annotations[inplacev1.AgentKeyAnnotation] != "" {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("the agent published no key on its Node within %s (log %s)", keyWait, agent.LogPath)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return res, err
		}
	}
	if err := sleep(ctx, 5*time.Second); err != nil {
		return res, err
	}
	a0, err := ReadProc(agent.Pid())
	if err != nil {
		return res, err
	}
	i0, err := ReadProc(informer.Pid())
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := sleep(ctx, idle); err != nil {
		return res, err
	}
	if res.Agent, err = ReadProc(agent.Pid()); err != nil {
		return res, fmt.Errorf("agent (log %s): %w", agent.LogPath, err)
	}
	if res.Informer, err = ReadProc(informer.Pid()); err != nil {
		return res, fmt.Errorf("informer (log %s): %w", informer.LogPath, err)
	}
	res.Window = time.Since(t0)
	res.AgentCPU, res.InformerCPU = res.Agent.CPU-a0.CPU, res.Informer.CPU-i0.CPU
	return res, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
