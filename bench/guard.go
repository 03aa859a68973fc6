package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/guard"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/preview/previewtest"
)

// GuardMeasure is the in-place-only guard's latency for a KubeadmControlPlane update:
// an AdmissionReview over HTTPS to the guard as the binary wires it (cached reader,
// the extension's planner), against a Cluster of 3 control-plane Machines and 2
// workers in a real API server. Allowed is an in-place version change (the full path:
// read the Cluster, plan it as it is and with the write); Refused is a
// bootstrap-only field (the same, plus the refusal message).
type GuardMeasure struct {
	// Cold plans the stored objects on every request (the first write after any change
	// of the Cluster); Allowed and Refused are repeated writes on unchanged objects,
	// whose plan of the stored objects the guard remembers.
	Cold, Allowed, Refused Summary
}

// MeasureGuard runs the guard against env at rate requests/s for duration per case.
func MeasureGuard(ctx context.Context, env *Env, rate float64, duration time.Duration) (GuardMeasure, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme, bootstrapv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return GuardMeasure{}, fmt.Errorf("guard bench scheme: %w", err)
		}
	}
	admin, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return GuardMeasure{}, err
	}
	if err := labelContracts(ctx, admin); err != nil {
		return GuardMeasure{}, err
	}
	fx := previewtest.Default()
	fx.Namespace, fx.Topology = "guard-bench", false
	if err := createGuardFixture(ctx, admin, fx); err != nil {
		return GuardMeasure{}, err
	}

	// The binary's reader: a cache, typed and unstructured.
	informers, err := cache.New(env.Config, cache.Options{Scheme: scheme})
	if err != nil {
		return GuardMeasure{}, err
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = informers.Start(cctx) }()
	if !informers.WaitForCacheSync(cctx) {
		return GuardMeasure{}, fmt.Errorf("guard bench: cache did not sync")
	}
	reader, err := client.New(env.Config, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: informers, Unstructured: true}})
	if err != nil {
		return GuardMeasure{}, err
	}
	pol := policy.Builtin()
	pl, err := planner.New(pol)
	if err != nil {
		return GuardMeasure{}, err
	}
	// The fixture's KubeadmConfigs reference no Secret: none is read.
	opts := guard.Options{Reader: reader, Secrets: admin, Planner: pl, Policy: pol, Recorder: discardEvents{}}
	h, err := guard.NewHandler(opts)
	if err != nil {
		return GuardMeasure{}, err
	}
	srv := httptest.NewUnstartedServer(&webhook.Admission{Handler: h})
	srv.StartTLS()
	defer srv.Close()
	hc := srv.Client()
	// A fresh handler per request: no plan of the stored objects remembered from an
	// earlier request, as for the first write after any change of the Cluster.
	cold := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fresh, err := guard.NewHandler(opts)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		(&webhook.Admission{Handler: fresh}).ServeHTTP(w, r)
	}))
	cold.StartTLS()
	defer cold.Close()
	coldClient := cold.Client()

	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: fx.Namespace, Name: fx.KCPName()}, kcp); err != nil {
		return GuardMeasure{}, err
	}
	inPlace := kcp.DeepCopy()
	inPlace.Spec.Version = "v1.35.2"
	replacing := kcp.DeepCopy()
	replacing.Spec.KubeadmConfigSpec.PreKubeadmCommands = []string{"echo hi"}

	var out GuardMeasure
	for _, c := range []struct {
		written *controlplanev1.KubeadmControlPlane
		allowed bool
		url     string
		client  *http.Client
		into    *Summary
	}{
		{inPlace, true, cold.URL, coldClient, &out.Cold},
		{inPlace, true, srv.URL, hc, &out.Allowed},
		{replacing, false, srv.URL, hc, &out.Refused},
	} {
		body, err := kcpReview(kcp, c.written)
		if err != nil {
			return GuardMeasure{}, err
		}
		do := func(ctx context.Context) error { return postReview(ctx, c.client, c.url, body, c.allowed) }
		// Warm up: the first reads start the informers of the kinds the guard reads.
		for range 20 {
			if err := do(ctx); err != nil {
				return GuardMeasure{}, fmt.Errorf("guard bench warm-up: %w", err)
			}
		}
		res := OpenLoop(ctx, rate, duration, 64, do)
		if res.FirstErr != nil {
			return GuardMeasure{}, fmt.Errorf("guard bench: %w", res.FirstErr)
		}
		*c.into = Summarize(res)
	}
	return out, nil
}

// labelContracts adds the contract labels clusterctl puts on provider CRDs, through
// which the guard (as Cluster API) finds a reference's served version.
func labelContracts(ctx context.Context, c client.Client) error {
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := c.List(ctx, crds); err != nil {
		return fmt.Errorf("list CRDs: %w", err)
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels["cluster.x-k8s.io/v1beta1"] = "v1beta1"
		crd.Labels["cluster.x-k8s.io/v1beta2"] = "v1beta2"
		if err := c.Update(ctx, crd); err != nil {
			return fmt.Errorf("label CRD %s: %w", crd.Name, err)
		}
	}
	return nil
}

func createGuardFixture(ctx context.Context, c client.Client, fx previewtest.Options) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fx.Namespace, Labels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}}
	if err := c.Create(ctx, ns); err != nil {
		return fmt.Errorf("create namespace %s: %w", fx.Namespace, err)
	}
	objs, err := fx.Objects()
	if err != nil {
		return err
	}
	for _, obj := range objs {
		obj.SetUID("")
		var status *clusterv1.MachineStatus
		if m, ok := obj.(*clusterv1.Machine); ok {
			status = m.Status.DeepCopy()
		}
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
		if status != nil {
			m := obj.(*clusterv1.Machine)
			m.Status = *status
			if err := c.Status().Update(ctx, m); err != nil {
				return fmt.Errorf("write status of Machine %s: %w", m.Name, err)
			}
		}
	}
	return nil
}

// kcpReview encodes the AdmissionReview the API server sends for an update.
func kcpReview(old, written *controlplanev1.KubeadmControlPlane) ([]byte, error) {
	encode := func(k *controlplanev1.KubeadmControlPlane) ([]byte, error) {
		k = k.DeepCopy()
		k.APIVersion, k.Kind = controlplanev1.GroupVersion.String(), "KubeadmControlPlane"
		return json.Marshal(k)
	}
	o, err := encode(old)
	if err != nil {
		return nil, err
	}
	n, err := encode(written)
	if err != nil {
		return nil, err
	}
	gvk := metav1.GroupVersionKind{Group: controlplanev1.GroupVersion.Group, Version: controlplanev1.GroupVersion.Version, Kind: "KubeadmControlPlane"}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("guard-bench"), Kind: gvk, RequestKind: &gvk,
			Resource:  metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: "kubeadmcontrolplanes"},
			Namespace: old.Namespace, Name: old.Name, Operation: admissionv1.Update,
			Object: runtime.RawExtension{Raw: n}, OldObject: runtime.RawExtension{Raw: o},
		},
	}
	return json.Marshal(review)
}

func postReview(ctx context.Context, hc *http.Client, url string, body []byte, wantAllowed bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
		return fmt.Errorf("decode AdmissionReview: %w", err)
	}
	if review.Response == nil || review.Response.Allowed != wantAllowed {
		return fmt.Errorf("guard answered %+v, want allowed=%t", review.Response, wantAllowed)
	}
	if !wantAllowed && (review.Response.Result == nil || review.Response.Result.Code != http.StatusForbidden) {
		return fmt.Errorf("guard refused with %+v, want a denial", review.Response.Result)
	}
	return nil
}

type discardEvents struct{}

func (discardEvents) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {}

// GuardRows turns the guard measure into rows.
func GuardRows(section string, rate float64, m GuardMeasure, target time.Duration) []Row {
	row := func(name string, s Summary) Row {
		return Row{Section: section, Measurement: fmt.Sprintf("guard: KubeadmControlPlane update, %s, p50 / p99 at %.0f req/s over HTTPS (n=%d)", name, rate, s.Count),
			Ours: latency(s), Baseline: "-", Ratio: "-", Target: "p99 < " + ms(target),
			Verdict: Verdict(s.P99 < target && s.Errors == 0 && s.Dropped == 0)}
	}
	return []Row{
		row("in-place change admitted, first write on the stored objects", m.Cold),
		row("in-place change admitted, repeated", m.Allowed),
		row("replacing change refused, repeated", m.Refused),
	}
}
