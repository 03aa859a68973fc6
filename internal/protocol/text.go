package protocol

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on what a node reports. The coordinator copies an agent's reason and
// messages into Machine conditions (at most 32768 characters), Events, hook
// answers and the Cluster's fleet-state annotation (all annotations of an object
// share 256 KiB); a node must not be able to fill them, nor to write lines of its
// own into them. DecodeStatus and DecodeStagingStatus, the one place a report is
// read, apply them.
const (
	// MaxMessageBytes bounds a report's message; a longer one is cut, ending in
	// "…".
	MaxMessageBytes = 1024
	// MaxNameBytes bounds the short names in a report (action, gate, item).
	MaxNameBytes = 128
	// maxHashBytes bounds a reported plan hash (32 hex digits when well formed).
	maxHashBytes = 64
)

// reasonRE is what a report's reason must be: an identifier, as every reason the
// agent sets is (ReasonRollbackFailed, StageReasonDigestMismatch, ...).
var reasonRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,63}$`)

// validReason reports whether a reason is empty or an identifier.
func validReason(r string) bool { return r == "" || reasonRE.MatchString(r) }

// BoundText makes text from a node fit for management objects: invalid UTF-8,
// control characters (line breaks included) and invisible format characters
// (bidirectional overrides) become spaces, and text longer than limit bytes is
// cut at a character boundary, ending in "…" within limit.
func BoundText(s string, limit int) string {
	clean := strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, " "))
	if len(clean) <= limit {
		return clean
	}
	ellipsis := "…"
	if limit < len(ellipsis) {
		ellipsis = ""
	}
	cut := max(limit-len(ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(clean[cut]) {
		cut--
	}
	return clean[:cut] + ellipsis
}
