package journal_test

import (
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// FuzzJournalReplay: the agent replays whatever its journal file holds after a
// crash, a disk error or a hand edit. Any bytes are refused with ErrCorrupt or load
// into an entry that saves and loads back unchanged; a loaded state and plan replay
// (Resumed, then every next action succeeding, or failing at a step the input
// picks) to a stop within a bounded number of steps; nothing panics. Seeds:
// testdata/fuzz/FuzzJournalReplay (journals of a worker and a control-plane plan in
// progress, in rollback, committed).
func FuzzJournalReplay(f *testing.F) {
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, failAt uint8) {
		j, err := journal.NewFile(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(j.Path(), data, 0o600); err != nil {
			t.Fatal(err)
		}
		e, err := j.Load()
		if err != nil {
			if !errors.Is(err, journal.ErrCorrupt) {
				t.Fatalf("load error is not ErrCorrupt: %v", err)
			}
			return
		}
		roundTrip(t, j, e)

		// The executor's replay: a state that does not decode, or a plan that does
		// not validate, is a corrupt journal and never reaches the state machine.
		var st state.State
		if len(e.State) > 0 && json.Unmarshal(e.State, &st) != nil {
			return
		}
		if len(e.Plan) > 0 {
			if _, err := protocol.DecodePlan(e.Plan); err != nil {
				return
			}
		}
		st, out, err := state.Step(st, state.Resumed{BootID: "boot-2"})
		if err != nil {
			return
		}
		// Every step either finishes or fails an action; a plan has at most a few
		// dozen actions, forward and back.
		limit := 4*(len(st.Actions)+len(st.Rollback)) + 64
		for i := 0; out.Next != nil; i++ {
			if i > limit {
				t.Fatalf("replay did not stop after %d steps: %+v", i, st)
			}
			var ev state.Event = state.ActionSucceeded{Name: out.Next.Name, EtcdMembers: 1}
			if failAt != 0 && i == int(failAt%32) {
				ev = state.ActionFailed{Name: out.Next.Name, Reason: "Fuzz", Message: "injected"}
			}
			if out.AwaitBoot {
				ev = state.Resumed{BootID: "boot-3"}
			}
			if st, out, err = state.Step(st, ev); err != nil {
				return
			}
		}
	})
}

// roundTrip saves e and loads it back: apart from Seq, which Save increments, the
// entry is unchanged.
func roundTrip(t *testing.T, j journal.Journal, e journal.Entry) {
	t.Helper()
	if err := j.Save(e); err != nil {
		t.Fatalf("save a loaded entry: %v", err)
	}
	got, err := j.Load()
	if err != nil {
		t.Fatalf("load a saved entry: %v", err)
	}
	e.Seq++
	want, _ := json.Marshal(e)
	have, _ := json.Marshal(got)
	if string(want) != string(have) {
		t.Fatalf("entry changed over save and load:\n%s\n%s", want, have)
	}
}
