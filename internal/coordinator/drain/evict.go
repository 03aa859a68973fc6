package drain

import (
	"context"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// oneShotEvictions is the workload client Cluster API's drain helper evicts
// through, with one change: an eviction is sent once and its answer returned at
// once. client-go honours the API server's Retry-After on a 429 (a PDB refusal
// carries one) by sleeping and retrying up to ten times, so a single blocked pod
// would eat the whole attempt budget and report a rate-limiter timeout instead of
// the PodDisruptionBudget that refused it.
type oneShotEvictions struct {
	client.Client
	cs kubernetes.Interface
}

func (c oneShotEvictions) SubResource(sub string) client.SubResourceClient {
	if sub != "eviction" {
		return c.Client.SubResource(sub)
	}
	return oneShotEviction{SubResourceClient: c.Client.SubResource(sub), cs: c.cs}
}

type oneShotEviction struct {
	client.SubResourceClient
	cs kubernetes.Interface
}

func (e oneShotEviction) Create(ctx context.Context, obj client.Object, sub client.Object, opts ...client.SubResourceCreateOption) error {
	in, ok := sub.(*policyv1.Eviction)
	if !ok || len(opts) > 0 {
		return e.SubResourceClient.Create(ctx, obj, sub, opts...)
	}
	ev := in.DeepCopy()
	ev.APIVersion, ev.Kind = policyv1.SchemeGroupVersion.String(), "Eviction"
	return e.cs.PolicyV1().RESTClient().Post().
		AbsPath("/api/v1").
		Namespace(obj.GetNamespace()).
		Resource("pods").
		Name(obj.GetName()).
		SubResource("eviction").
		Body(ev).
		MaxRetries(0).
		Do(ctx).
		Error()
}
