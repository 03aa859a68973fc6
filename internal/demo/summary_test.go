package demo

import (
	"bytes"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func goodOutcome() Outcome {
	ms := []MachineID{
		{Name: "demo-cp-a", UID: "u1", Role: "control-plane", Node: "demo-cp-a"},
		{Name: "demo-md-0-b", UID: "u2", Role: "worker", Node: "demo-md-0-b"},
	}
	return Outcome{
		FromVersion: "v1.35.0", ToVersion: "v1.36.0", FilePath: "/etc/motd", FileContent: "new\n",
		Before: ms, After: append([]MachineID(nil), ms...),
		Durations:      map[string]time.Duration{"demo-cp-a": 42 * time.Second},
		AgentDurations: map[string]time.Duration{"demo-cp-a": 30 * time.Second},
		Kubelets:       map[string]string{"demo-cp-a": "v1.36.0", "demo-md-0-b": "v1.36.0"},
		HostFiles:      map[string]string{"demo-cp-a": "new\n", "demo-md-0-b": "new\n"},
		HostErrs:       map[string]string{},
		Rollout:        90 * time.Second, Total: 3 * time.Minute,
	}
}

func TestEvaluate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Outcome)
		pass   bool
		failed string
	}{
		{name: "all good", mutate: func(*Outcome) {}, pass: true},
		{name: "replaced machine", mutate: func(o *Outcome) { o.After[1].UID = "u9" }, failed: "machine demo-md-0-b (worker) uid u2 -> u9: replaced"},
		{name: "machine gone", mutate: func(o *Outcome) { o.After = o.After[:1] }, failed: "machine demo-md-0-b (worker, uid u2) is gone"},
		{name: "machine created", mutate: func(o *Outcome) { o.Created = []string{"demo-md-0-c"} },
			failed: "no Machine created or deleted during the rollout (watched: 1 created [demo-md-0-c], 0 deleted [])"},
		{name: "old kubelet", mutate: func(o *Outcome) { o.Kubelets["demo-md-0-b"] = "v1.35.0" },
			failed: "every node at kubelet v1.36.0: demo-cp-a=v1.36.0, demo-md-0-b=v1.35.0"},
		{name: "a node missing from the workload cluster", mutate: func(o *Outcome) { delete(o.Kubelets, "demo-md-0-b") },
			failed: "every node at kubelet v1.36.0: demo-cp-a=v1.36.0"},
		{name: "old file", mutate: func(o *Outcome) { o.HostFiles["demo-cp-a"] = "old\n" },
			failed: `/etc/motd = "new\n" on every node (2): demo-cp-a has "old\n"`},
		{name: "unreadable file", mutate: func(o *Outcome) { delete(o.HostFiles, "demo-cp-a"); o.HostErrs["demo-cp-a"] = "no such file" },
			failed: `/etc/motd = "new\n" on every node (1): demo-cp-a: no such file`},
		{name: "rollout failed", mutate: func(o *Outcome) { o.RolloutErr = errors.New("boom") }, failed: "rollout did not finish: boom"},
		{name: "nothing recorded", mutate: func(o *Outcome) { o.Before, o.After = nil, nil }, failed: "no machines were recorded before the rollout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := goodOutcome()
			tc.mutate(&o)
			checks := Evaluate(o)
			g.Expect(Passed(checks)).To(Equal(tc.pass))
			if tc.failed != "" {
				g.Expect(checks).To(ContainElement(Check{OK: false, Text: tc.failed}))
			}
		})
	}
}

func TestRenderSummary(t *testing.T) {
	g := NewWithT(t)
	o := goodOutcome()
	var buf bytes.Buffer
	g.Expect(RenderSummary(&buf, o, Evaluate(o))).To(Succeed())
	out := buf.String()
	g.Expect(out).To(ContainSubstring("✓ machine demo-cp-a (control-plane) kept: uid u1 -> u1\n"))
	g.Expect(out).To(ContainSubstring("✓ machine demo-md-0-b (worker) kept: uid u2 -> u2\n"))
	g.Expect(out).To(MatchRegexp(`demo-cp-a\s+control-plane\s+42s\s+agent 30s\n`))
	g.Expect(out).To(MatchRegexp(`demo-md-0-b\s+worker\s+-\s+agent -\n`))
	g.Expect(out).To(ContainSubstring("total time 3m0s (rollout 1m30s)\n"))
	g.Expect(out).To(HaveSuffix("RESULT: PASS\n"))

	o.Created = []string{"x"}
	buf.Reset()
	g.Expect(RenderSummary(&buf, o, Evaluate(o))).To(Succeed())
	g.Expect(buf.String()).To(ContainSubstring("✗ no Machine created"))
	g.Expect(buf.String()).To(HaveSuffix("RESULT: FAIL\n"))
}
