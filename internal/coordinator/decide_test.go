package coordinator

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/drain"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

const (
	hashA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hashB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func status(hash string, phase protocol.Phase) *protocol.NodeStatus {
	return &protocol.NodeStatus{V: 1, PlanHash: hash, Phase: phase, Step: 2, Steps: 5, Action: "kubeadm-upgrade"}
}

func TestDecide(t *testing.T) {
	base := Observation{Node: "n1", PlanHash: hashA, TargetVersion: "v1.36.0", KubeletVersion: "v1.35.0"}
	with := func(f func(o *Observation)) Observation { o := base; f(&o); return o }

	tests := []struct {
		name      string
		obs       Observation
		want      Action
		retry     int32
		msg       string
		eventName string
	}{
		{name: "nothing published yet: start", obs: base, want: ActStart},
		{
			name: "published, agent silent: wait for pickup",
			obs:  with(func(o *Observation) { o.Published = hashA }),
			want: ActAwaitAgent, retry: 1,
			msg: "step 5/6: waiting for the agent on node n1 to pick up plan aaaaaaaaaaaa",
		},
		{
			name: "agent applying this plan",
			obs:  with(func(o *Observation) { o.Published = hashA; o.Status = status(hashA, protocol.PhaseApplying) }),
			want: ActAwaitAgent, retry: 1,
			msg: "step 5/6: waiting for the agent on node n1 to apply plan aaaaaaaaaaaa: Applying (2/5 kubeadm-upgrade)",
		},
		{
			name: "committed but kubelet still old: wait on the version gate",
			obs: with(func(o *Observation) {
				o.Published = hashA
				o.Status = status(hashA, protocol.PhaseCommitted)
				o.Ready = true
			}),
			want: ActWait, retry: 1,
			msg: `step 6/6: waiting for node n1 to report kubelet v1.36.0 (reports "v1.35.0")`,
		},
		{
			name: "committed, new kubelet, not Ready",
			obs: with(func(o *Observation) {
				o.Status = status(hashA, protocol.PhaseCommitted)
				o.KubeletVersion = "v1.36.0"
			}),
			want: ActWait, retry: 1, msg: "step 6/6: waiting for node n1 to be Ready",
		},
		{
			name: "committed and gates pass: succeed",
			obs: with(func(o *Observation) {
				o.Status = status(hashA, protocol.PhaseCommitted)
				o.KubeletVersion = "v1.36.0"
				o.Ready = true
			}),
			want: ActSucceed, msg: "node n1 runs plan aaaaaaaaaaaa", eventName: "InPlaceUpdateSucceeded",
		},
		{
			name: "current-plan alone is no commit: any writer of the Node can set it",
			obs:  with(func(o *Observation) { o.CurrentPlan = hashA; o.KubeletVersion = "v1.36.0"; o.Ready = true }),
			want: ActStart,
		},
		{
			name: "rolled back: fail with the cause",
			obs: with(func(o *Observation) {
				st := status(hashA, protocol.PhaseRolledBack)
				st.Reason, st.Message = "GateFailed", "kubelet did not report v1.36.0 within 5m"
				o.Status = st
				o.Published = hashA
			}),
			want: ActFail, eventName: "InPlaceUpdateRolledBack",
			msg: "node n1: the agent rolled back plan aaaaaaaaaaaa: GateFailed: kubelet did not report v1.36.0 within 5m",
		},
		{
			name: "failed without a cause",
			obs:  with(func(o *Observation) { o.Published = hashA; o.Status = status(hashA, protocol.PhaseFailed) }),
			want: ActFail, eventName: "InPlaceUpdateFailed",
			msg: "node n1: the agent failed plan aaaaaaaaaaaa: no cause reported",
		},
		{
			name: "rolled back and withdrawn, status still there: still a failure",
			obs:  with(func(o *Observation) { o.Status = status(hashA, protocol.PhaseRolledBack) }),
			want: ActFail, eventName: "InPlaceUpdateRolledBack",
			msg: "node n1: the agent rolled back plan aaaaaaaaaaaa: no cause reported",
		},
		{
			name: "rolled back, withdrawn and status cleared by the operator: try again",
			obs:  with(func(o *Observation) { o.Status = nil }),
			want: ActStart,
		},
		{
			name: "a committed older plan does not count for this one",
			obs: with(func(o *Observation) {
				o.Published = hashB
				o.CurrentPlan = hashB
				o.Status = status(hashB, protocol.PhaseCommitted)
			}),
			want: ActStart,
		},
		{
			name: "older plan still in progress: do not replace it",
			obs:  with(func(o *Observation) { o.Published = hashB; o.Status = status(hashB, protocol.PhaseRebooting) }),
			want: ActWait, retry: 1,
			msg: "step 4/6: waiting for the agent on node n1 to finish plan bbbbbbbbbbbb before publishing plan aaaaaaaaaaaa",
		},
		{
			name: "agent applying for 45 s: CAPI calls back less often",
			obs: with(func(o *Observation) {
				o.Published = hashA
				o.Status = status(hashA, protocol.PhaseApplying)
				o.Elapsed = 45 * time.Second
			}),
			want: ActAwaitAgent, retry: 2,
			msg: "step 5/6: waiting for the agent on node n1 to apply plan aaaaaaaaaaaa: Applying (2/5 kubeadm-upgrade)",
		},
		{
			name: "agent applying for 5 min: slowest cadence, same message",
			obs: with(func(o *Observation) {
				o.Published = hashA
				o.Status = status(hashA, protocol.PhaseApplying)
				o.Elapsed = 5 * time.Minute
			}),
			want: ActAwaitAgent, retry: 5,
			msg: "step 5/6: waiting for the agent on node n1 to apply plan aaaaaaaaaaaa: Applying (2/5 kubeadm-upgrade)",
		},
		{
			name: "paused before starting",
			obs:  with(func(o *Observation) { o.Paused = true }),
			want: ActWait, retry: retryPaused, msg: "step 1/6: cluster is paused for in-place updates; node n1 not started",
		},
		{
			name: "paused after starting: carry on to a safe point",
			obs:  with(func(o *Observation) { o.Paused = true; o.Started = true }),
			want: ActStart,
		},
		{
			name: "corrupt status: report, touch nothing",
			obs:  with(func(o *Observation) { o.StatusErr = errors.New("bad json") }),
			want: ActReportFailure, msg: "node n1: the agent's status annotation is invalid: bad json",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(tt.obs)
			g.Expect(d.Action).To(Equal(tt.want))
			g.Expect(d.RetryAfterSeconds).To(Equal(tt.retry))
			if tt.msg != "" {
				g.Expect(d.Message).To(Equal(tt.msg))
			}
			g.Expect(d.EventReason).To(Equal(tt.eventName))
			g.Expect(Decide(tt.obs)).To(Equal(d), "deterministic")
		})
	}
}

func TestDrainVerdict(t *testing.T) {
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	blocked := drain.Result{Blockers: []drain.Blocker{{Pod: "ns/p", PDB: "ns/pdb", Reason: "needs 1"}}}
	tests := []struct {
		name    string
		res     drain.Result
		now     time.Time
		drained bool
		want    Action
		msg     string
	}{
		{name: "done", res: drain.Result{Done: true}, now: start, drained: true},
		{name: "blocked, within timeout", res: blocked, now: start.Add(time.Minute), want: ActWait,
			msg: "step 3/6: draining node n1: pod ns/p: eviction blocked by PodDisruptionBudget ns/pdb (needs 1)"},
		{name: "blocked past timeout: failure", res: blocked, now: start.Add(11 * time.Minute), want: ActReportFailure,
			msg: "step 3/6: draining node n1 did not finish within 10m0s: pod ns/p: eviction blocked by PodDisruptionBudget ns/pdb (needs 1)"},
		{name: "evicting", res: drain.Result{Evicted: []string{"ns/b", "ns/a"}}, now: start, want: ActWait,
			msg: "step 3/6: draining node n1: waiting for pod ns/a to terminate (and 1 more)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d, ok := DrainVerdict("n1", tt.res, start, tt.now, 10*time.Minute)
			g.Expect(ok).To(Equal(tt.drained))
			if tt.drained {
				return
			}
			g.Expect(d.Action).To(Equal(tt.want))
			g.Expect(d.Message).To(Equal(tt.msg))
		})
	}
}
