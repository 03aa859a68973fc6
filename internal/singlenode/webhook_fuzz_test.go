package singlenode

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// FuzzHoldWebhook: the hold webhook decodes whatever AdmissionReview reaches it
// (from the API server, or anyone who can reach the Service). Any body is answered
// with an AdmissionReview, never a panic (recovery is off here, so a panic fails the
// target), and an allowed answer with a patch only touches metadata.annotations and
// applies to the object it came with. The Cluster is read from a fake client (an
// opted-in single-node Cluster in an enabled namespace): the point is decoding and the decision, which the
// envtest suite covers against a real API server. Seeds:
// testdata/fuzz/FuzzHoldWebhook (version change, release, no-op, non-UPDATE).
func FuzzHoldWebhook(f *testing.F) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(scheme); err != nil {
			f.Fatal(err)
		}
	}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1",
		Annotations: map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cluster, ns).Build()
	wh := &admission.Webhook{Handler: &holdWebhook{reader: reader, decoder: admission.NewDecoder(scheme), controllerUser: "system:serviceaccount:capi-inplace-system:capi-inplace"}}
	wh.WithRecoverPanic(false)

	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, DefaultWebhookPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		wh.ServeHTTP(rec, req)

		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil || review.Response == nil {
			t.Fatalf("answer is not an AdmissionReview (status %d): %v\n%s", rec.Code, err, rec.Body.Bytes())
		}
		resp := review.Response
		if !resp.Allowed || len(resp.Patch) == 0 {
			return
		}
		var in admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
			t.Fatalf("patched an undecodable review: %s", body)
		}
		var ops []struct {
			Path string `json:"path"`
		}
		if err := json.Unmarshal(resp.Patch, &ops); err != nil {
			t.Fatalf("patch is not a JSON patch: %v\n%s", err, resp.Patch)
		}
		for _, op := range ops {
			if op.Path != "/metadata/annotations" && !strings.HasPrefix(op.Path, "/metadata/annotations/") {
				t.Fatalf("patch touches %s, outside metadata.annotations: %s", op.Path, resp.Patch)
			}
		}
		patch, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatalf("decode patch: %v", err)
		}
		if _, err := patch.Apply(in.Request.Object.Raw); err != nil {
			t.Fatalf("patch does not apply to the object: %v\n%s", err, resp.Patch)
		}
	})
}
