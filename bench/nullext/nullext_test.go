package nullext

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
)

func TestUpdateMachineCompletesOnFirstCall(t *testing.T) {
	g := NewWithT(t)
	h, err := NewHandlers(prometheus.NewRegistry())
	g.Expect(err).NotTo(HaveOccurred())
	req := &runtimehooksv1.UpdateMachineRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "UpdateMachineRequest"},
		Desired:  runtimehooksv1.UpdateMachineRequestObjects{Machine: clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}}},
	}
	resp := &runtimehooksv1.UpdateMachineResponse{}
	h.DoUpdateMachine(context.Background(), req, resp)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.RetryAfterSeconds).To(BeZero())
	g.Expect(resp.Message).To(Equal(Message))
}
