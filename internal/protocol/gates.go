package protocol

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"
)

// Bounds of user-defined gates. They keep a plan small and a gate's worst case
// known: MaxGateSeconds bounds both one run of a gate and how long the gate may
// take to pass.
const (
	MaxGates        = 32
	MaxGateArgs     = 64
	MaxGateArgBytes = 4096
	MaxGateSeconds  = 3600
	// MaxGateURLBytes bounds an httpGet URL.
	MaxGateURLBytes = 2048
	// MaxGateCABundleBytes bounds an httpGet CA bundle (a few PEM certificates).
	MaxGateCABundleBytes = 16384
	// MaxGateExpressionBytes bounds a CEL expression.
	MaxGateExpressionBytes = 4096
)

// The agent's bounds of a user gate that leaves them at 0: the defaults of its
// --gate-timeout flag and of its command timeout. The agent the extension
// installs runs with these, so the policy can tell a gate's worst case
// (GateBounds.Max) without seeing a node.
const (
	// DefaultGatePassWithin is how long a gate without passWithinSeconds may
	// take to pass (every built-in gate too).
	DefaultGatePassWithin = 5 * time.Minute
	// DefaultGateRunTimeout bounds one run of a gate without timeoutSeconds.
	DefaultGateRunTimeout = 30 * time.Second
)

// AgentGateDefaults are the bounds the agent gives a gate that sets neither
// passWithinSeconds nor timeoutSeconds (DefaultGatePassWithin,
// DefaultGateRunTimeout).
func AgentGateDefaults() GateBounds {
	return GateBounds{PassWithin: DefaultGatePassWithin, Run: DefaultGateRunTimeout}
}

// GateBounds are the time bounds the agent runs a gate with.
type GateBounds struct {
	// PassWithin is how long the gate may take to pass: the agent runs it again
	// until it passes or this time is up.
	PassWithin time.Duration
	// Run bounds one run of the gate (the command, the request, the evaluation);
	// zero leaves it to the agent's per-attempt bound.
	Run time.Duration
}

// Max is the longest the agent may spend on the gate before it passes or fails:
// the agent runs it again until PassWithin is up, and a run that starts just
// before then still gets its whole Run (gate.Checker polls so).
func (b GateBounds) Max() time.Duration { return b.PassWithin + b.Run }

// Bounds are the bounds the agent runs g with, given the agent's own for a gate
// that leaves them at 0 (its gate timeout and its command timeout): PassWithin is
// passWithinSeconds, else def.PassWithin; Run is timeoutSeconds, else def.Run, or
// passWithinSeconds when that is shorter (without its own run timeout a hanging
// gate cannot outlast the time it has to pass). The agent (gate.Checker) and the
// policy's deadline check use this one rule.
func (g Gate) Bounds(def GateBounds) GateBounds {
	b := def
	passWithin := time.Duration(g.PassWithinSeconds) * time.Second
	if passWithin > 0 {
		b.PassWithin = passWithin
	}
	if g.TimeoutSeconds > 0 {
		b.Run = time.Duration(g.TimeoutSeconds) * time.Second
	} else if passWithin > 0 && (b.Run <= 0 || passWithin < b.Run) {
		b.Run = passWithin
	}
	return b
}

// GatesMax is the longest the agent may spend on gates: it runs them one after
// the other, each until it passes or its bounds (Gate.Bounds with def) are up,
// and stops at the first that fails.
func GatesMax(gates []Gate, def GateBounds) time.Duration {
	var total time.Duration
	for _, g := range gates {
		total += g.Bounds(def).Max()
	}
	return total
}

// Gate kinds (Gate.Kind).
const (
	GateKindCommand = "command"
	GateKindHTTPGet = "httpGet"
	GateKindCEL     = "cel"
)

// gateNameRE is a DNS-1123 label: gate names appear in status and messages.
var gateNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidateGates checks a list of user-defined gates: at most MaxGates, each with a
// unique DNS-label name, exactly one of command, httpGet and cel, and timeouts
// between 0 and MaxGateSeconds. A command's argv[0] is a clean absolute path (the
// agent runs it on the host without a shell's PATH lookup surprises) with at most
// MaxGateArgs arguments of at most MaxGateArgBytes each without NUL bytes. An
// httpGet URL is http or https with a host and no user info (it appears in
// status), at most MaxGateURLBytes; its expected status range lies within
// 100-599; its CA bundle parses as PEM certificates; insecureSkipVerify needs
// https. A cel expression is non-empty and at most MaxGateExpressionBytes (the
// policy compiles it, internal/celgate). The policy and the plan use this one rule.
// Errors name paths relative to the list ("[1].name ..."); ValidateGatesAt names
// whole ones.
func ValidateGates(gates []Gate) error {
	return errors.Join(ValidateGatesAt("", gates)...)
}

// ValidateGatesAt is ValidateGates for the list at field (e.g. "gates[0].gates"):
// one error per problem, each naming its whole path.
func ValidateGatesAt(field string, gates []Gate) []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s"+format, append([]any{field}, args...)...))
	}
	if len(gates) > MaxGates {
		list := field
		if list != "" {
			list += ": "
		}
		errs = append(errs, fmt.Errorf("%s%d gates, more than %d", list, len(gates), MaxGates))
	}
	seen := map[string]bool{}
	for i, g := range gates {
		if !gateNameRE.MatchString(g.Name) {
			add("[%d].name %q is not a DNS label (lower-case letters, digits and '-', at most 63)", i, g.Name)
		} else if seen[g.Name] {
			add("[%d].name %q is listed twice", i, g.Name)
		}
		seen[g.Name] = true
		kinds := 0
		if len(g.Command) > 0 {
			kinds++
		}
		if g.HTTPGet != nil {
			kinds++
		}
		if g.CEL != nil {
			kinds++
		}
		switch {
		case kinds == 0:
			add("[%d] has none of command, httpGet and cel: give exactly one", i)
		case kinds > 1:
			add("[%d] has more than one of command, httpGet and cel: give exactly one", i)
		}
		for _, err := range validateCommand(g.Command) {
			add("[%d].command%w", i, err)
		}
		if g.HTTPGet != nil {
			for _, err := range validateHTTPGet(*g.HTTPGet) {
				add("[%d].httpGet.%w", i, err)
			}
		}
		if g.CEL != nil {
			switch n := len(g.CEL.Expression); {
			case strings.TrimSpace(g.CEL.Expression) == "":
				add("[%d].cel.expression is empty", i)
			case n > MaxGateExpressionBytes:
				add("[%d].cel.expression is %d bytes, more than %d", i, n, MaxGateExpressionBytes)
			}
		}
		if g.TimeoutSeconds < 0 || g.TimeoutSeconds > MaxGateSeconds {
			add("[%d].timeoutSeconds %d is not between 0 and %d", i, g.TimeoutSeconds, MaxGateSeconds)
		}
		if g.PassWithinSeconds < 0 || g.PassWithinSeconds > MaxGateSeconds {
			add("[%d].passWithinSeconds %d is not between 0 and %d", i, g.PassWithinSeconds, MaxGateSeconds)
		}
	}
	return errs
}

// validateCommand checks a command gate's argv (nil: none given); each error
// continues the field name "command".
func validateCommand(argv []string) []error {
	if len(argv) == 0 {
		return nil
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case len(argv) > MaxGateArgs:
		add(" has %d arguments, more than %d", len(argv), MaxGateArgs)
	case !path.IsAbs(argv[0]) || path.Clean(argv[0]) != argv[0]:
		add("[0] %q is not a clean absolute path", argv[0])
	}
	for j, arg := range argv {
		if len(arg) > MaxGateArgBytes {
			add("[%d] is %d bytes, more than %d", j, len(arg), MaxGateArgBytes)
		}
		if strings.ContainsRune(arg, 0) {
			add("[%d] contains a NUL byte", j)
		}
	}
	return errs
}

// validateHTTPGet checks an httpGet gate; each error starts with the field name.
func validateHTTPGet(h HTTPGetGate) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(h.URL) > MaxGateURLBytes {
		add("url is %d bytes, more than %d", len(h.URL), MaxGateURLBytes)
	} else if u, err := url.Parse(h.URL); err != nil {
		add("url does not parse: %v", err)
	} else {
		switch {
		case u.Scheme != "http" && u.Scheme != "https":
			add("url scheme %q is not http or https", u.Scheme)
		case u.Host == "":
			add("url %q has no host", h.URL)
		case u.User != nil:
			add("url carries user info: credentials in a URL end up in status and logs")
		}
		if h.InsecureSkipVerify && u.Scheme != "https" {
			add("insecureSkipVerify is set for a %s URL: it applies to https only", u.Scheme)
		}
		if h.CABundle != "" && u.Scheme != "https" {
			add("caBundle is set for a %s URL: it applies to https only", u.Scheme)
		}
	}
	lo, hi := h.StatusRange()
	switch {
	case h.ExpectedStatusMin < 0 || lo < 100 || lo > 599:
		add("expectedStatusMin %d is not between 100 and 599", h.ExpectedStatusMin)
	case h.ExpectedStatusMax < 0 || hi < 100 || hi > 599:
		add("expectedStatusMax %d is not between 100 and 599", h.ExpectedStatusMax)
	case lo > hi:
		add("expected status range %d-%d is empty", lo, hi)
	}
	switch {
	case len(h.CABundle) > MaxGateCABundleBytes:
		add("caBundle is %d bytes, more than %d", len(h.CABundle), MaxGateCABundleBytes)
	case h.CABundle != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(h.CABundle)):
		add("caBundle holds no PEM certificate")
	}
	return errs
}
