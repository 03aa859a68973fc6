package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzDecodePlan: the agent decodes whatever the plan Secret holds. Any bytes are
// refused with ErrInvalidPlan (or ErrPlanNewerThanAgent, never both) or give a
// plan that validates, re-encodes, decodes to the same hash; nothing panics.
// Seeds: testdata/fuzz/FuzzDecodePlan.
func FuzzDecodePlan(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePlan(data)
		if err != nil {
			if errors.Is(err, ErrInvalidPlan) == errors.Is(err, ErrPlanNewerThanAgent) {
				t.Fatalf("decode error is not one of ErrInvalidPlan and ErrPlanNewerThanAgent: %v", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("decoded plan does not validate: %v", err)
		}
		hash, err := p.Hash()
		if err != nil {
			t.Fatalf("hash of a decoded plan: %v", err)
		}
		enc, err := EncodePlan(p)
		if err != nil {
			t.Fatalf("re-encode a decoded plan: %v", err)
		}
		again, err := DecodePlan(enc)
		if err != nil {
			t.Fatalf("decode a re-encoded plan: %v\n%s", err, enc)
		}
		if h, err := again.Hash(); err != nil || h != hash {
			t.Fatalf("hash changed over a round trip: %s != %s (%v)", h, hash, err)
		}
	})
}

// FuzzDecodeStatus: the coordinator decodes whatever a Node's status annotation
// holds (the agent writes it, and so can anyone who can write the Node). Any string
// is refused with ErrInvalidStatus or gives a status that round-trips.
func FuzzDecodeStatus(f *testing.F) {
	// A node's text is bounded on decode (text.go): a forged line, an invisible
	// override and a message far over the bound.
	f.Add(`{"v":1,"planHash":"abc","phase":"Failed","reason":"GateFailed","action":"gates","gate":"a\u202eb","message":"x\nE1204 forged` + strings.Repeat("y", 2*MaxMessageBytes) + `"}`)
	f.Add(`{"v":1,"planHash":"abc","phase":"RolledBack","reason":"Rolled back: see\nthe log"}`)
	f.Fuzz(func(t *testing.T, value string) {
		s, err := DecodeStatus(value)
		if err != nil {
			if !errors.Is(err, ErrInvalidStatus) {
				t.Fatalf("decode error is not ErrInvalidStatus: %v", err)
			}
			if len(err.Error()) > 512 {
				t.Fatalf("decode error of %d bytes quotes too much of the value", len(err.Error()))
			}
			return
		}
		if !s.Phase.Known() || s.PlanHash == "" || s.Step < 0 || s.Step > s.Steps {
			t.Fatalf("accepted an invalid status: %+v", s)
		}
		if !validReason(s.Reason) || len(s.Message) > MaxMessageBytes || len(s.Action) > MaxNameBytes || len(s.Gate) > MaxNameBytes ||
			BoundText(s.Message, MaxMessageBytes) != s.Message || BoundText(s.Action, MaxNameBytes) != s.Action || BoundText(s.Gate, MaxNameBytes) != s.Gate {
			t.Fatalf("accepted unbounded text: %+v", s)
		}
		enc, err := EncodeStatus(s)
		if err != nil {
			t.Fatalf("re-encode a decoded status: %v", err)
		}
		again, err := DecodeStatus(enc)
		if err != nil {
			t.Fatalf("decode a re-encoded status: %v\n%s", err, enc)
		}
		enc2, err := EncodeStatus(again)
		if err != nil || enc2 != enc {
			t.Fatalf("status changed over a round trip:\n%s\n%s (%v)", enc, enc2, err)
		}
	})
}

// FuzzDecodeGates: any JSON list of gates either fails ValidateGates or survives
// a round trip and validates again; nothing panics.
func FuzzDecodeGates(f *testing.F) {
	f.Add([]byte(`[{"name":"a","command":["/bin/true"]}]`))
	f.Add([]byte(`[{"name":"b","httpGet":{"url":"https://127.0.0.1:8443/readyz","expectedStatusMin":200,"expectedStatusMax":204,"insecureSkipVerify":true}}]`))
	f.Add([]byte(`[{"name":"c","cel":{"expression":"pods.all(p, p.status.phase == 'Running')"},"timeoutSeconds":2,"passWithinSeconds":60}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var gates []Gate
		if json.Unmarshal(data, &gates) != nil || ValidateGates(gates) != nil {
			return
		}
		for _, g := range gates {
			if g.Kind() == "" {
				t.Fatalf("valid gate %+v has no kind", g)
			}
		}
		enc, err := json.Marshal(gates)
		if err != nil {
			t.Fatalf("re-encode valid gates: %v", err)
		}
		var again []Gate
		if err := json.Unmarshal(enc, &again); err != nil {
			t.Fatalf("decode re-encoded gates: %v\n%s", err, enc)
		}
		if err := ValidateGates(again); err != nil {
			t.Fatalf("re-encoded gates do not validate: %v\n%s", err, enc)
		}
	})
}
