package agent

import (
	"context"
	"crypto/ecdh"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent/artifact"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/registry"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Stager fetches and verifies what a plan needs while the node still serves: the
// coordinator names the plan in the Node's StagePlanAnnotation before it cordons
// the node, and cordons only once the Stager reports StagePhaseStaged on the Node
// (StagingStatusAnnotation). Staging changes nothing the node runs: files go to
// the artifact store, and an OS backend stages its image only beside the running
// one (Capabilities.CanStage); a failure is reported before the node is touched.
type Stager struct {
	Store *artifact.Store
	// Backends finds an OS backend by name (the executor's lookup).
	Backends func(name string) (backend.Backend, error)
	Client   kubernetes.Interface
	NodeName string
	// Platform is the node's "<os>/<arch>"; "" means runtime.GOOS/runtime.GOARCH.
	Platform string
	// Timeout bounds one staging; 0 means an hour.
	Timeout time.Duration
	// ReportEvery spaces progress reports; 0 means 2 s.
	ReportEvery time.Duration
	// Images pulls the control-plane images of a plan's new release with its staged
	// kubeadm (kube.Host); nil leaves them to `kubeadm upgrade` after the cordon.
	Images ImagePuller
	Log    logr.Logger
}

// ImagePuller pulls the control-plane images the plan's kubeadm needs onto the
// node, running kubeadm from its host path; it returns the images pulled. The
// plan is whole because the images depend on more than its Kubernetes part: its
// ClusterConfiguration's image repository and etcd image overrides.
type ImagePuller interface {
	PullControlPlaneImages(ctx context.Context, kubeadm string, plan *protocol.NodePlan) ([]string, error)
}

func (s *Stager) platform() string {
	if s.Platform != "" {
		return s.Platform
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

// Reconcile stages the plan the Node asks for, unless it is already staged,
// failed, or past staging (desired or committed).
func (s *Stager) Reconcile(ctx context.Context, node *corev1.Node, secret *corev1.Secret, key *ecdh.PrivateKey) error {
	ann := node.Annotations
	hash := ann[inplacev1.StagePlanAnnotation]
	if hash == "" || hash == ann[inplacev1.DesiredPlanAnnotation] || hash == ann[inplacev1.CurrentPlanAnnotation] {
		return nil
	}
	if st, err := protocol.DecodeStagingStatus(ann[inplacev1.StagingStatusAnnotation]); err == nil && st.PlanHash == hash && st.Phase != protocol.StagePhaseStaging {
		return nil // staged or failed; a retry clears the status first
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = time.Hour
	}
	// The coordinator fails the update at its staging deadline; staging on past it
	// only holds the node's disk and network for nothing. Its timeout is a duration,
	// timed here on the node's clock (protocol.EncodeStageTimeout).
	if d, ok := protocol.DecodeStageTimeout(ann[inplacev1.StageTimeoutAnnotation]); ok && d < timeout {
		timeout = d
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep := &stageReport{s: s, st: protocol.StagingStatus{PlanHash: hash, Phase: protocol.StagePhaseStaging}}
	if secret == nil {
		return nil // the Secret's event follows (the coordinator writes it first)
	}
	sealed, err := protocol.DecodeSealedPlan(secret.Data[inplacev1.PlanSecretDataKey])
	if err == nil && sealed.PlanHash != hash {
		return nil // the Secret is about to be updated
	}
	var plan *protocol.NodePlan
	if err == nil {
		plan, err = sealed.Open(key)
	}
	if err != nil {
		// A plan sealed to an older key is sealed again by the coordinator's next
		// call, which then asks for staging again.
		return rep.fail(ctx, "", protocol.StageReasonInvalidPlan, fmt.Errorf("the plan in Secret %s/%s cannot be used: %w", secret.Namespace, secret.Name, err))
	}
	final := s.stage(ctx, plan, rep)
	if ctx.Err() != nil && final == nil {
		return ctx.Err()
	}
	return final
}

// stage runs the staging of one plan and reports its end.
func (s *Stager) stage(ctx context.Context, plan *protocol.NodePlan, rep *stageReport) error {
	log := s.Log.WithValues("plan", rep.st.PlanHash)
	items := plan.StageItems()
	rep.st.Items = len(items)
	if plan.OS != nil {
		rep.st.Items++
	}
	if s.pullsImages(plan) {
		rep.st.Items++
	}
	if plan.OS != nil && len(plan.OSBackends) > 0 {
		changed, err := writeOSBackends(s.Store.Root, plan.OSBackends)
		if err != nil {
			return rep.fail(ctx, protocol.StageOSImage, protocol.StageReasonNodeConfig, err)
		}
		if changed {
			// The backends are built from the file when the agent starts.
			log.Info("Wrote the pool's OS backend configuration; restarting to load it", "path", registry.ConfigPath)
			return ErrNodeConfigChanged
		}
	}
	if b := plan.Kubernetes.Binaries; b != nil && b.Platform != s.platform() {
		return rep.fail(ctx, protocol.StageKubeadm, protocol.StageReasonWrongArchitecture,
			fmt.Errorf("the plan's kubeadm and kubelet are for %s, this node is %s", b.Platform, s.platform()))
	}
	keep := make([]string, 0, len(items))
	for _, it := range items {
		keep = append(keep, it.Artifact.Digest)
	}
	if err := s.Store.Prune(keep); err != nil {
		log.Info("Could not prune the artifact store", "error", err.Error())
	}
	start := time.Now()
	rep.send(ctx, true)
	for _, it := range items {
		rep.st.Item, rep.st.Bytes, rep.st.Size = it.Name, 0, 0
		rep.send(ctx, true)
		if _, err := s.Store.Fetch(ctx, it, func(n, size int64) {
			rep.st.Bytes, rep.st.Size = n, size
			rep.send(ctx, false)
		}); err != nil {
			return rep.fail(ctx, it.Name, fetchReason(err), err)
		}
		rep.st.Done++
	}
	if plan.OS != nil {
		rep.st.Item, rep.st.Bytes, rep.st.Size = protocol.StageOSImage, 0, 0
		b, err := s.Backends(plan.OS.Backend)
		if err != nil {
			return rep.fail(ctx, protocol.StageOSImage, protocol.StageReasonOSStage, err)
		}
		if b.Capabilities().CanStage {
			rep.send(ctx, true)
			if err := b.Stage(ctx, backend.Artifact{Ref: plan.OS.Ref, Digest: plan.OS.Digest}); err != nil {
				reason := protocol.StageReasonOSStage
				if errors.Is(err, backend.ErrArtifactRefused) {
					reason = protocol.StageReasonDigestMismatch
				}
				return rep.fail(ctx, protocol.StageOSImage, reason, err)
			}
		}
		rep.st.Done++
	}
	images := 0
	if s.pullsImages(plan) {
		// After the files: the new kubeadm is in the store by now, verified.
		rep.st.Item, rep.st.Bytes, rep.st.Size = protocol.StageImages, 0, 0
		rep.send(ctx, true)
		pulled, err := s.Images.PullControlPlaneImages(ctx, protocol.ArtifactPath(plan.Kubernetes.Binaries.Kubeadm.Digest), plan)
		if err != nil {
			reason := protocol.StageReasonImagePull
			if ctx.Err() != nil {
				reason = protocol.StageReasonDeadline
			}
			return rep.fail(ctx, protocol.StageImages, reason, err)
		}
		images = len(pulled)
		rep.st.Done++
	}
	rep.st.Phase, rep.st.Item, rep.st.Bytes, rep.st.Size = protocol.StagePhaseStaged, "", 0, 0
	rep.st.Message = fmt.Sprintf("staged %d artifacts in %s", rep.st.Items, time.Since(start).Round(100*time.Millisecond))
	if images > 0 {
		rep.st.Message += fmt.Sprintf(" (%d control-plane images present)", images)
	}
	log.Info("Staged plan", "artifacts", rep.st.Items, "images", images, "seconds", time.Since(start).Seconds())
	return rep.sendFinal(ctx)
}

// pullsImages reports whether staging pulls the plan's control-plane images
// (kube.StagesControlPlaneImages).
func (s *Stager) pullsImages(plan *protocol.NodePlan) bool {
	return s.Images != nil && kube.StagesControlPlaneImages(plan.Kubernetes)
}

// ErrNodeConfigChanged is returned by Stager.Reconcile after it wrote a new OS
// backend configuration to the host: the agent exits so that it is restarted (by
// its DaemonSet) with backends built from it, and stages the plan then.
var ErrNodeConfigChanged = errors.New("the node's OS backend configuration changed: the agent restarts to load it")

// writeOSBackends writes the pool's OS backend configuration to the host unless
// the file holds the same configuration; changed reports a write. Its directory
// is resolved inside the host root as every host path is (kube.Host.PinDir).
func writeOSBackends(root string, raw json.RawMessage) (bool, error) {
	want, err := registry.Parse(raw)
	if err != nil {
		return false, err
	}
	dir, release, err := (&kube.Host{Root: root}).PinDir(path.Dir(registry.ConfigPath), 0o755)
	if err != nil {
		return false, fmt.Errorf("write %s: %w", registry.ConfigPath, err)
	}
	defer release()
	file := filepath.Join(dir, path.Base(registry.ConfigPath))
	if cur, err := os.ReadFile(file); err == nil {
		if have, err := registry.Parse(cur); err == nil && reflect.DeepEqual(have, want) {
			return false, nil
		}
	}
	data, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		return false, err
	}
	if err := atomicfile.Write(file, append(data, '\n'), 0o644); err != nil {
		return false, fmt.Errorf("write %s: %w", registry.ConfigPath, err)
	}
	return true, nil
}

func fetchReason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return protocol.StageReasonDeadline
	case errors.Is(err, artifact.ErrDigestMismatch):
		return protocol.StageReasonDigestMismatch
	case errors.Is(err, artifact.ErrSizeMismatch):
		return protocol.StageReasonSizeMismatch
	case errors.Is(err, artifact.ErrWrongArchitecture):
		return protocol.StageReasonWrongArchitecture
	case errors.Is(err, artifact.ErrDiskFull):
		return protocol.StageReasonDiskFull
	case errors.Is(err, artifact.ErrTooLarge):
		return protocol.StageReasonTooLarge
	}
	return protocol.StageReasonUnreachable
}

// stageReport patches the staging status on the Node: progress at most every
// ReportEvery, the final status until it lands.
type stageReport struct {
	s    *Stager
	st   protocol.StagingStatus
	last time.Time
}

func (r *stageReport) fail(ctx context.Context, item protocol.StageItemName, reason string, err error) error {
	r.st.Phase, r.st.Item, r.st.Reason = protocol.StagePhaseFailed, item, reason
	r.st.Message = backend.RedactKnownSecrets(err.Error())
	r.s.Log.Info("Staging failed", "plan", r.st.PlanHash, "item", item, "reason", reason, "error", r.st.Message)
	return r.sendFinal(ctx)
}

func (r *stageReport) send(ctx context.Context, force bool) {
	every := r.s.ReportEvery
	if every == 0 {
		every = 2 * time.Second
	}
	if !force && time.Since(r.last) < every {
		return
	}
	if err := r.patch(ctx); err != nil {
		r.s.Log.V(1).Info("Staging progress report failed", "error", err.Error())
		return
	}
	r.last = time.Now()
}

// sendFinal retries the final status for a while: the coordinator waits for it.
func (r *stageReport) sendFinal(ctx context.Context) error {
	var err error
	for i := range 5 {
		if err = r.patch(context.WithoutCancel(ctx)); err == nil {
			return nil
		}
		time.Sleep(time.Duration(i+1) * 500 * time.Millisecond)
	}
	return fmt.Errorf("report staging status: %w", err)
}

func (r *stageReport) patch(ctx context.Context) error {
	r.st.Updated = time.Now().UTC().Truncate(time.Second)
	value, err := protocol.EncodeStagingStatus(r.st)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{inplacev1.StagingStatusAnnotation: value}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = r.s.Client.CoreV1().Nodes().Patch(ctx, r.s.NodeName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "capi-inplace-agent"})
	return err
}

// defaultStager gives an agent built without a Stager the one every agent needs:
// the artifact store in the host's artifact directory (pinned inside the host
// root: kube.Host.PinDir), the executor's OS backends, and the kubeadm/kubelet
// installer reading from that store. Without it the coordinator would wait
// forever for a staging report. release unpins the store's directory.
func (a *Agent) defaultStager() (release func(), err error) {
	if a.Stager != nil || a.Executor == nil || a.Host == nil {
		return func() {}, nil
	}
	k := a.Host
	dir, release, err := k.PinDir(protocol.ArtifactDir, 0o700)
	if err != nil {
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	store := &artifact.Store{Root: k.Root, Dir: dir}
	a.Stager = &Stager{Store: store, Backends: a.Executor.Backends, Client: a.Client, NodeName: a.NodeName, Images: k, Log: a.Log.WithName("stage")}
	if k.Store == nil {
		k.Store = store // one store: the installer copies what staging fetched
	}
	return release, nil
}
