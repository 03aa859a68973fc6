package simhost

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/executor"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/none"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// cutBefore wraps the journal: when the executor is about to record that the
// named action starts, the node loses power instead, once (cut), and the agent
// dies with it.
type cutBefore struct {
	journal.Journal
	action string
	cut    func()
}

func (c *cutBefore) Save(e journal.Entry) error {
	if e.InFlight == c.action && c.cut != nil {
		c.cut()
		c.cut = nil
		return context.Canceled
	}
	return c.Journal.Save(e)
}

type discardReports struct{}

func (discardReports) Report(protocol.NodeStatus) {}

// TestPowerCutNeverStartsAKubeletAheadOfItsAPIServer: a control plane's update
// to a new minor loses power before each of its actions in turn. The kubelet
// that the boot starts is never newer than the node's kube-apiserver (the real
// one runs anyway, reports its version, and KubeadmControlPlane takes the
// control plane for upgraded), and the update resumes to the new version.
func TestPowerCutNeverStartsAKubeletAheadOfItsAPIServer(t *testing.T) {
	p := protocol.NewPlan("n1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply, EtcdSnapshot: true}
	for _, a := range state.Derive(state.SpecFor(p, none.New().Capabilities())) {
		t.Run(a.Key(), func(t *testing.T) {
			g := NewWithT(t)
			h, _ := newHost(t, true)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			mem := &journal.Memory{}
			x := &executor.Executor{
				Journal: &cutBefore{Journal: mem, action: a.Key(), cut: func() {
					g.Expect(h.PowerCut()).To(Succeed())
					cancel()
				}},
				Kube:  &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, Etcd: h.Etcd(), PreflightRetryPause: time.Millisecond},
				Gates: okGates{},
				Backends: func(name string) (backend.Backend, error) {
					if name == none.Name {
						return none.New(), nil
					}
					return nil, errors.New("no such backend")
				},
				Rebooter: h, Reporter: discardReports{}, Now: time.Now, Log: logr.Discard(),
			}
			_, err := x.Start(ctx, p)
			g.Expect(err).To(MatchError(context.Canceled))
			g.Expect(h.Boots()).To(Equal(2), "the power cut booted the node")
			g.Expect(h.KubeletSkew()).To(BeEmpty())

			x.Journal = mem
			st, err := x.Resume(context.Background())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
			g.Expect(h.RunningKubelet()).To(Equal("v1.36.0"))
			g.Expect(h.KubeletSkew()).To(BeEmpty())
		})
	}
}
