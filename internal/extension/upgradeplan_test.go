package extension

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/topology/desiredstate"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// upgradeFixture is a management cluster with an opted-in namespace "in", a
// namespace "out" without the label, a ClusterClass listing v1.33..v1.36 in each,
// and a Cluster "c" of that class in each.
func upgradeFixture(t *testing.T) UpgradePlanReader {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	versions := []string{"v1.33.0", "v1.34.0", "v1.34.3", "v1.35.0", "v1.36.0"}
	objs := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "in", Labels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "out"}},
	}
	for _, ns := range []string{"in", "out"} {
		objs = append(objs,
			&clusterv1.ClusterClass{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chain"}, Spec: clusterv1.ClusterClassSpec{KubernetesVersions: versions}},
			&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}, Spec: clusterv1.ClusterSpec{Topology: clusterv1.Topology{
				ClassRef: clusterv1.ClusterClassRef{Name: "chain"}, Version: "v1.33.0"}}},
			&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}},
		)
	}
	return NewUpgradePlanReader(fake.NewClientBuilder().WithScheme(scheme).WithRuntimeObjects(objs...).Build())
}

func upgradeRequest(ns, name, cp, workers, to string) *runtimehooksv1.GenerateUpgradePlanRequest {
	req := &runtimehooksv1.GenerateUpgradePlanRequest{
		FromControlPlaneKubernetesVersion: cp, FromWorkersKubernetesVersion: workers, ToKubernetesVersion: to,
	}
	req.APIVersion, req.Kind = runtimehooksv1.GroupVersion.String(), "GenerateUpgradePlanRequest"
	req.Cluster.Namespace, req.Cluster.Name = ns, name
	return req
}

func versionsOf(steps []runtimehooksv1.UpgradeStep) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Version)
	}
	return out
}

func TestGenerateUpgradePlan(t *testing.T) {
	reader := upgradeFixture(t)
	tests := []struct {
		name        string
		req         *runtimehooksv1.GenerateUpgradePlanRequest
		settings    map[string]string
		noReader    bool
		wantCP      []string
		wantWorkers []string
		wantErr     string
	}{
		{
			name:        "opted in: control plane and workers step at every minor",
			req:         upgradeRequest("in", "c", "v1.33.0", "v1.33.0", "v1.36.0"),
			wantCP:      []string{"v1.34.3", "v1.35.0", "v1.36.0"},
			wantWorkers: []string{"v1.34.3", "v1.35.0", "v1.36.0"},
		},
		{
			name:   "namespace not opted in: Cluster API's own plan (workers left to it)",
			req:    upgradeRequest("out", "c", "v1.33.0", "v1.33.0", "v1.36.0"),
			wantCP: []string{"v1.34.3", "v1.35.0", "v1.36.0"},
		},
		{
			name:     "in-place updates disabled by the ExtensionConfig: Cluster API's own plan",
			req:      upgradeRequest("in", "c", "v1.33.0", "v1.33.0", "v1.36.0"),
			settings: map[string]string{inplacev1.SettingDisableInPlaceUpdates: "true"},
			wantCP:   []string{"v1.34.3", "v1.35.0", "v1.36.0"},
		},
		{name: "unknown cluster", req: upgradeRequest("in", "nope", "v1.33.0", "v1.33.0", "v1.36.0"), wantErr: "Cluster in/nope does not exist"},
		{name: "a cluster without topology", req: upgradeRequest("in", "plain", "v1.33.0", "v1.33.0", "v1.36.0"), wantErr: "has no ClusterClass topology"},
		{name: "no cluster in the request", req: upgradeRequest("", "", "v1.33.0", "v1.33.0", "v1.36.0"), wantErr: "no name or namespace"},
		{name: "downgrade", req: upgradeRequest("in", "c", "v1.36.0", "v1.36.0", "v1.35.0"), wantErr: "downgrade"},
		{name: "impossible version", req: upgradeRequest("in", "c", "v1.33.0", "v1.33.0", "1.36"), wantErr: "toKubernetesVersion"},
		{name: "a minor the class does not list", req: upgradeRequest("in", "c", "v1.33.0", "v1.33.0", "v1.38.0"), wantErr: "no version of minor 1.37"},
		{name: "no reader", req: upgradeRequest("in", "c", "v1.33.0", "v1.33.0", "v1.36.0"), noReader: true, wantErr: MessageNoClusterReader},
		{name: "wrong kind", req: func() *runtimehooksv1.GenerateUpgradePlanRequest {
			r := upgradeRequest("in", "c", "v1.33.0", "v1.33.0", "v1.36.0")
			r.Kind = "UpdateMachineRequest"
			return r
		}(), wantErr: "malformed request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			h, _ := newTestHandlers(t, nil)
			if !tt.noReader {
				h.upgrades = reader
			}
			tt.req.Settings = tt.settings
			resp := &runtimehooksv1.GenerateUpgradePlanResponse{}
			h.DoGenerateUpgradePlan(context.Background(), tt.req, resp)
			if tt.wantErr != "" {
				g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusFailure))
				g.Expect(resp.GetMessage()).To(ContainSubstring(tt.wantErr))
				g.Expect(resp.ControlPlaneUpgrades).To(BeEmpty())
				return
			}
			g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.GetMessage())
			g.Expect(versionsOf(resp.ControlPlaneUpgrades)).To(Equal(tt.wantCP))
			g.Expect(versionsOf(resp.WorkersUpgrades)).To(Equal(tt.wantWorkers))
			// Cluster API accepts the answer, and the workers' plan it ends up with
			// (ours, or its default when we leave it empty) is what we expect.
			workers, err := desiredstate.DefaultAndValidateUpgradePlans(tt.req.ToKubernetesVersion, tt.req.FromControlPlaneKubernetesVersion,
				tt.req.FromWorkersKubernetesVersion, versionsOf(resp.ControlPlaneUpgrades), versionsOf(resp.WorkersUpgrades))
			g.Expect(err).NotTo(HaveOccurred())
			if tt.wantWorkers != nil {
				g.Expect(workers).To(Equal(tt.wantWorkers))
			} else {
				// Cluster API's default moves the workers three minors in one step.
				g.Expect(workers).To(Equal([]string{"v1.36.0"}))
			}
		})
	}
}

// FuzzGenerateUpgradePlan feeds raw request bodies through the handler: it never
// panics or hangs, and every Success is a plan Cluster API accepts whose worker
// steps are each one the planner covers in place (patch or one minor).
func FuzzGenerateUpgradePlan(f *testing.F) {
	h := fuzzHandlers(f, nil)
	h.upgrades = fuzzReader{}
	for _, seed := range []string{
		`{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"GenerateUpgradePlanRequest","cluster":{"metadata":{"name":"c","namespace":"in"}},"fromControlPlaneKubernetesVersion":"v1.33.0","fromWorkersKubernetesVersion":"v1.33.0","toKubernetesVersion":"v1.36.0"}`,
		`{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"GenerateUpgradePlanRequest","cluster":{"metadata":{"name":"c","namespace":"in"}},"fromControlPlaneKubernetesVersion":"v1.34.0","fromWorkersKubernetesVersion":"v1.33.9","toKubernetesVersion":"v1.35.0"}`,
		`{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"GenerateUpgradePlanRequest","cluster":{"metadata":{"name":"c","namespace":"in"}},"fromControlPlaneKubernetesVersion":"v1.36.0","toKubernetesVersion":"v1.36.0+b"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := &runtimehooksv1.GenerateUpgradePlanRequest{}
		if err := json.Unmarshal(body, req); err != nil {
			return
		}
		resp := &runtimehooksv1.GenerateUpgradePlanResponse{}
		withinDeadline(t, body, func() { h.DoGenerateUpgradePlan(context.Background(), req, resp) })
		checkAnswer(t, resp)
		if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess {
			return
		}
		cp, workers := versionsOf(resp.ControlPlaneUpgrades), versionsOf(resp.WorkersUpgrades)
		if _, err := desiredstate.DefaultAndValidateUpgradePlans(req.ToKubernetesVersion, req.FromControlPlaneKubernetesVersion, req.FromWorkersKubernetesVersion, cp, workers); err != nil {
			t.Fatalf("Cluster API refuses our plan cp=%v workers=%v: %v", cp, workers, err)
		}
		from := req.FromWorkersKubernetesVersion
		for _, v := range workers {
			fv, _ := protocol.ParseVersion(from)
			tv, _ := protocol.ParseVersion(v)
			if !protocol.ClassifyVersionStep(fv, tv).Upgrade() {
				t.Fatalf("workers step %s -> %s is not one the planner covers in place", from, v)
			}
			from = v
		}
	})
}

// fuzzReader answers every Cluster as opted in, with a ClusterClass listing
// several versions per minor.
type fuzzReader struct{}

func (fuzzReader) ReadUpgradeContext(_ context.Context, namespace, _ string) (UpgradeContext, error) {
	if namespace == "gone" {
		return UpgradeContext{}, errors.New("gone")
	}
	return UpgradeContext{OptedIn: true, ClassVersions: []string{"v1.33.0", "v1.33.9", "v1.34.0", "v1.34.1+b", "v1.35.0", "v1.35.2", "v1.36.0", "v1.36.0+b", "v1.37.0-rc.1"}}, nil
}
