package protocol

import (
	"encoding/json"
	"fmt"
)

// NTP is a KubeadmConfig ntp section (Cluster API bootstrap v1beta2 field names),
// as NodePlan.NTP carries it.
type NTP struct {
	Servers []string `json:"servers,omitempty"`
	Enabled *bool    `json:"enabled,omitempty"`
}

// DecodeNTP parses a plan's ntp section; an absent one is the zero NTP (off).
func DecodeNTP(raw json.RawMessage) (NTP, error) {
	var n NTP
	if len(raw) == 0 {
		return n, nil
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return n, fmt.Errorf("decode ntp: %w", err)
	}
	return n, nil
}

// On reports whether the section asks for NTP servers: servers given and not
// disabled (KubeadmConfig's enabled defaults to true when servers are set).
func (n NTP) On() bool { return (n.Enabled == nil || *n.Enabled) && len(n.Servers) > 0 }

// NTPEnabled reports whether a plan's ntp section asks for NTP servers. An
// undecodable section asks for nothing (plan validation refuses it).
func NTPEnabled(raw json.RawMessage) bool {
	n, err := DecodeNTP(raw)
	return err == nil && n.On()
}

// UsersListed reports whether a plan's users section lists at least one user,
// deciding on the decoded list, not its text: absent, null and an empty list (in
// any spacing) list none. A section that is not a JSON list counts as listed, so
// that applying it reports the decode error instead of skipping the users.
func UsersListed(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	var users []json.RawMessage
	if err := json.Unmarshal(raw, &users); err != nil {
		return true
	}
	return len(users) > 0
}
