package state

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestSpecForUsersAndNTP: whether a plan applies users and NTP is decided on the
// decoded sections, not on their text: the coordinator's encoding and a plan
// written by hand may space or order them differently.
func TestSpecForUsersAndNTP(t *testing.T) {
	tests := []struct {
		name       string
		users, ntp string
		wantUsers  bool
		wantNTP    bool
	}{
		{name: "absent"},
		{name: "null", users: `null`, ntp: `null`},
		{name: "empty list", users: `[]`, ntp: `{}`},
		{name: "empty list with spaces", users: `[ ]`},
		{name: "empty list with a newline", users: "[\n]"},
		{name: "null with spaces", users: ` null `},
		{name: "one user", users: `[{"name":"ops"}]`, wantUsers: true},
		{name: "one user, other key order and spacing", users: ` [ { "sudo" : "ALL=(ALL) ALL", "name" : "ops" } ] `, wantUsers: true},
		{name: "users not a list: applied, so that the decode error is reported", users: `{"name":"ops"}`, wantUsers: true},
		{name: "servers, enabled unset", ntp: `{"servers":["a"]}`, wantNTP: true},
		{name: "servers, enabled first, spaced", ntp: `{ "enabled" : true , "servers" : [ "a" ] }`, wantNTP: true},
		{name: "servers, disabled", ntp: `{"servers":["a"],"enabled":false}`},
		{name: "enabled without servers", ntp: `{"enabled":true,"servers":[ ]}`},
		{name: "ntp not an object", ntp: `["a"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &protocol.NodePlan{}
			if tt.users != "" {
				p.Users = json.RawMessage(tt.users)
			}
			if tt.ntp != "" {
				p.NTP = json.RawMessage(tt.ntp)
			}
			s := SpecFor(p, backend.Capabilities{})
			if s.Users != tt.wantUsers || s.NTP != tt.wantNTP {
				t.Fatalf("SpecFor(users %q, ntp %q): users %v ntp %v, want users %v ntp %v", tt.users, tt.ntp, s.Users, s.NTP, tt.wantUsers, tt.wantNTP)
			}
			acts := names(Derive(s))
			if got := slices.Contains(acts, ActApplyUsers); got != tt.wantUsers {
				t.Fatalf("Derive: apply-users %v, want %v (%v)", got, tt.wantUsers, acts)
			}
			if got := slices.Contains(acts, ActApplyNTP); got != tt.wantNTP {
				t.Fatalf("Derive: apply-ntp %v, want %v (%v)", got, tt.wantNTP, acts)
			}
		})
	}
}
