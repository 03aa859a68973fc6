package state

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata scenarios")

// TestScenarios runs the scripts in testdata/*.txt. Each block is a command line
// followed by its expected output, blocks are separated by blank lines, and lines
// starting with # are comments. Commands:
//
//	observe <spec> [image]   PlanObserved on a node that runs image (specs: cp-full,
//	                         cp-k8s-first, worker-k8s, worker-files, worker-os)
//	reject <reason> <msg>    PlanRejected
//	ok                       the current action succeeded
//	fail <reason> <msg>      the current action failed
//	reboot <boot-id>         RebootIssued on boot <boot-id>
//	resume <boot-id>         Resumed on boot <boot-id>
//	image <booted> [staged]  ImageObserved: the backend's booted and staged images
//	crash <boot-id>          the state goes through its journal form, then Resumed
//	status                   the status envelope
//
// Run with -rewrite to regenerate the expected output after an intended change.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runScenario(t, f) })
	}
}

var specs = map[string]Spec{
	"cp-full":      cpFull,
	"worker-k8s":   workerK8s,
	"worker-files": {Kubeadm: protocol.KubeadmNone, Files: true},
	"worker-os":    workerOS,
	"cp-k8s-first": cpK8sFirst,
}

func runScenario(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var s State
	failed := false
	for _, block := range strings.Split(strings.TrimSpace(string(raw)), "\n\n") {
		lines := strings.Split(block, "\n")
		var comments []string
		for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
			comments = append(comments, lines[0])
			lines = lines[1:]
		}
		if len(lines) == 0 {
			out.WriteString(strings.Join(comments, "\n") + "\n\n")
			continue
		}
		cmd, want := lines[0], strings.Join(lines[1:], "\n")
		var got string
		s, got = scenarioStep(t, s, cmd)
		if got != want && !*rewrite {
			t.Errorf("%s: %q\nwant:\n%s\ngot:\n%s", path, cmd, want, got)
			failed = true
		}
		for _, c := range comments {
			out.WriteString(c + "\n")
		}
		out.WriteString(cmd + "\n" + got + "\n\n")
	}
	if *rewrite && !failed {
		if err := os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func scenarioStep(t *testing.T, s State, cmd string) (State, string) {
	t.Helper()
	f := strings.Fields(cmd)
	rest := func(i int) string { return strings.Join(f[i:], " ") }
	var ev Event
	switch f[0] {
	case "observe":
		ev = PlanObserved{Hash: "plan-" + f[1], Spec: specs[f[1]], ImageBefore: rest(2)}
	case "reject":
		ev = PlanRejected{Hash: "rejected", Reason: f[1], Message: rest(2)}
	case "ok":
		ev = ActionSucceeded{Name: current(s)}
		if current(s) == ActEtcdSnapshot {
			ev = ActionSucceeded{Name: ActEtcdSnapshot, EtcdMembers: 1}
		}
	case "fail":
		ev = ActionFailed{Name: current(s), Reason: f[1], Message: rest(2)}
	case "reboot":
		ev = RebootIssued{BootID: f[1]}
	case "resume":
		ev = Resumed{BootID: f[1]}
	case "image":
		ev = ImageObserved{Booted: f[1], Staged: rest(2)}
	case "crash":
		b, _ := json.Marshal(s)
		s = State{}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		ev = Resumed{BootID: f[1]}
	case "status":
		st := s.Status()
		return s, fmt.Sprintf("phase=%s step=%d/%d action=%s reason=%s\nmessage=%s", st.Phase, st.Step, st.Steps, st.Action, st.Reason, st.Message)
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	n, o, err := Step(s, ev)
	res := fmt.Sprintf("phase=%s", n.Phase)
	switch {
	case o.Next != nil:
		res += " next=" + o.Next.Key()
	case o.AwaitBoot:
		res += " await-boot"
	}
	if err != nil {
		res += "\nerror: " + err.Error()
	}
	return n, res
}

func current(s State) ActionName {
	if c := s.current(); c != nil {
		return c.Name
	}
	return "none"
}
