package extension

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/secretbudget"
)

// countingSecrets reads Secrets from a fake management cluster holding count
// Secrets s0..s<count-1> of size bytes in the fixtures' namespace, counting the
// bodies it serves; err, when set, fails every read.
type countingSecrets struct {
	client.Reader
	gets int
	err  error
}

func newCountingSecrets(count, size int) *countingSecrets {
	b := fake.NewClientBuilder()
	for i := range count {
		b = b.WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: pt.Namespace, Name: fmt.Sprintf("s%d", i)},
			Data: map[string][]byte{"k": []byte(strings.Repeat("x", size))}})
	}
	return &countingSecrets{Reader: b.Build()}
}

func (c *countingSecrets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if c.err != nil {
		return c.err
	}
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

func budgetHandlers(t *testing.T, secrets client.Reader) (*Handlers, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandlers(Options{Policy: policy.Builtin(), Metrics: m, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	return h, m
}

// referencing adds to spec files taking their content from Secrets s0..s<files-1>
// and users taking their password from Secrets s<files>..s<files+users-1>.
func referencing(spec bootstrapv1.KubeadmConfigSpec, files, users int) bootstrapv1.KubeadmConfigSpec {
	for i := range files {
		spec.Files = append(spec.Files, bootstrapv1.File{Path: fmt.Sprintf("/etc/f%d", i),
			ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: fmt.Sprintf("s%d", i), Key: "k"}}})
	}
	for i := files; i < files+users; i++ {
		spec.Users = append(spec.Users, bootstrapv1.User{Name: fmt.Sprintf("u%d", i),
			PasswdFrom: bootstrapv1.PasswdSource{Secret: bootstrapv1.SecretPasswdSource{Name: fmt.Sprintf("s%d", i), Key: "k"}}})
	}
	return spec
}

// TestCanUpdateMachineSetCountsReferencedSecrets: a KubeadmConfigTemplate whose
// files reference Secrets over UpdateMachine's budget (12 of 256 KiB, 3 MiB) fails
// the call with the budget as the message: no patch, and not "cannot update in
// place", which Cluster API would answer by replacing the Machines. The hook reads
// no more Secrets than the budget plus the one crossing it. Within the budget the
// same change is covered.
func TestCanUpdateMachineSetCountsReferencedSecrets(t *testing.T) {
	const count, size = 12, 256 << 10
	request := func(files int) *runtimehooksv1.CanUpdateMachineSetRequest {
		req := msRequest("v1.35.2", "v1.36.1")
		desSpec := referencing(pt.KubeadmConfigSpec(), files, 0)
		desSpec.ClusterConfiguration.FeatureGates = nil
		req.Desired.BootstrapConfigTemplate = raw(pt.KubeadmConfigTemplate("boot-b", desSpec))
		return req
	}
	tests := []struct {
		name    string
		files   int
		wantErr bool
	}{
		{name: "over the budget: the call fails", files: count, wantErr: true},
		{name: "within the budget: covered", files: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			secrets := newCountingSecrets(count, size)
			h, _ := budgetHandlers(t, secrets)
			resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
			h.DoCanUpdateMachineSet(context.Background(), request(tt.files), resp)
			g.Expect(int64(secrets.gets)).To(BeNumerically("<=", secretbudget.MaxBytes/size+1))
			g.Expect(resp.InfrastructureMachineTemplatePatch.IsDefined()).To(BeFalse())
			if !tt.wantErr {
				g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.GetMessage())
				g.Expect(resp.MachineSetPatch.IsDefined()).To(BeTrue())
				g.Expect(resp.BootstrapConfigTemplatePatch.IsDefined()).To(BeTrue())
				return
			}
			g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusFailure))
			g.Expect(resp.MachineSetPatch.IsDefined()).To(BeFalse())
			g.Expect(resp.BootstrapConfigTemplatePatch.IsDefined()).To(BeFalse())

			res, des, err := computeCanUpdateMachineSet(h.planner, request(tt.files))
			g.Expect(err).NotTo(HaveOccurred())
			err = h.secretBudget(context.Background(), des, []string{"spec", "template", "spec"}, res)
			var over *secretbudget.OverBudgetError
			g.Expect(errors.As(err, &over)).To(BeTrue(), "the failure is the budget's: %v", err)
		})
	}
}

// TestCanUpdateMachineCountsReferencedSecrets: the same for a KubeadmConfig whose
// users take their passwords from Secrets; a failure to read the Secrets fails the
// call (Cluster API calls again) rather than answering either way, and a change the
// planner refuses anyway reads no Secret.
func TestCanUpdateMachineCountsReferencedSecrets(t *testing.T) {
	const count, size = 10, 512 << 10
	request := func(desSpec bootstrapv1.KubeadmConfigSpec, toVersion string) *runtimehooksv1.CanUpdateMachineRequest {
		desSpec.ClusterConfiguration.FeatureGates = nil
		req := &runtimehooksv1.CanUpdateMachineRequest{
			Current: runtimehooksv1.CanUpdateMachineRequestObjects{
				Machine:               *pt.Machine("cp-1", "v1.35.4"),
				InfrastructureMachine: raw(pt.DevMachine("cp-1", pt.DevMachineSpec("")).Object),
				BootstrapConfig:       raw(pt.KubeadmConfig("cp-1", pt.KubeadmConfigSpec())),
			},
			Desired: runtimehooksv1.CanUpdateMachineRequestObjects{
				Machine:               *pt.Machine("cp-1", toVersion),
				InfrastructureMachine: raw(pt.DevMachine("cp-1", pt.DevMachineSpec("")).Object),
				BootstrapConfig:       raw(pt.KubeadmConfig("cp-1", desSpec)),
			},
		}
		req.SetGroupVersionKind(runtimehooksv1.GroupVersion.WithKind("CanUpdateMachineRequest"))
		return req
	}
	g := NewWithT(t)

	secrets := newCountingSecrets(count, size)
	h, _ := budgetHandlers(t, secrets)
	resp := &runtimehooksv1.CanUpdateMachineResponse{}
	h.DoCanUpdateMachine(context.Background(), request(referencing(pt.KubeadmConfigSpec(), 1, count-1), "v1.36.0"), resp)
	g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.MachinePatch.IsDefined()).To(BeFalse())
	g.Expect(resp.BootstrapConfigPatch.IsDefined()).To(BeFalse())
	g.Expect(int64(secrets.gets)).To(BeNumerically("<=", secretbudget.MaxBytes/size+1))

	// Two Secrets of 512 KiB: covered.
	resp = &runtimehooksv1.CanUpdateMachineResponse{}
	h.DoCanUpdateMachine(context.Background(), request(referencing(pt.KubeadmConfigSpec(), 1, 1), "v1.36.0"), resp)
	g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.GetMessage())
	g.Expect(resp.MachinePatch.IsDefined()).To(BeTrue())

	// The Secrets cannot be read: Failure, neither covered nor refused.
	broken := newCountingSecrets(0, 0)
	broken.err = errors.New("management cluster unreachable")
	h, _ = budgetHandlers(t, broken)
	resp = &runtimehooksv1.CanUpdateMachineResponse{}
	h.DoCanUpdateMachine(context.Background(), request(referencing(pt.KubeadmConfigSpec(), 1, 0), "v1.36.0"), resp)
	g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.GetMessage()).To(ContainSubstring("management cluster unreachable"))
	g.Expect(resp.MachinePatch.IsDefined()).To(BeFalse())

	// A skipped minor is refused by the planner: no Secret is read.
	resp = &runtimehooksv1.CanUpdateMachineResponse{}
	h.DoCanUpdateMachine(context.Background(), request(referencing(pt.KubeadmConfigSpec(), 1, 0), "v1.37.0"), resp)
	g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.GetMessage())
	g.Expect(resp.MachinePatch.IsDefined()).To(BeFalse())
}
