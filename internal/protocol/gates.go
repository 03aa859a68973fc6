package protocol

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Bounds of user-defined gates. They keep a plan small and a gate's worst case
// known: MaxGateSeconds bounds both one run of a gate's command and how long the
// gate may take to pass.
const (
	MaxGates        = 32
	MaxGateArgs     = 64
	MaxGateArgBytes = 4096
	MaxGateSeconds  = 3600
)

// gateNameRE is a DNS-1123 label: gate names appear in status and messages.
var gateNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidateGates checks a list of user-defined gates: at most MaxGates, each with a
// unique DNS-label name, a command whose argv[0] is a clean absolute path (the
// agent runs it on the host without a shell's PATH lookup surprises) and at most
// MaxGateArgs arguments of at most MaxGateArgBytes each without NUL bytes, and
// timeouts between 0 and MaxGateSeconds. The policy and the plan use this one rule.
func ValidateGates(gates []Gate) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(gates) > MaxGates {
		add("%d gates, more than %d", len(gates), MaxGates)
	}
	seen := map[string]bool{}
	for i, g := range gates {
		if !gateNameRE.MatchString(g.Name) {
			add("[%d].name %q is not a DNS label (lower-case letters, digits and '-', at most 63)", i, g.Name)
		} else if seen[g.Name] {
			add("[%d].name %q is listed twice", i, g.Name)
		}
		seen[g.Name] = true
		switch {
		case len(g.Command) == 0:
			add("[%d].command is empty", i)
		case len(g.Command) > MaxGateArgs:
			add("[%d].command has %d arguments, more than %d", i, len(g.Command), MaxGateArgs)
		case !path.IsAbs(g.Command[0]) || path.Clean(g.Command[0]) != g.Command[0]:
			add("[%d].command[0] %q is not a clean absolute path", i, g.Command[0])
		}
		for j, arg := range g.Command {
			if len(arg) > MaxGateArgBytes {
				add("[%d].command[%d] is %d bytes, more than %d", i, j, len(arg), MaxGateArgBytes)
			}
			if strings.ContainsRune(arg, 0) {
				add("[%d].command[%d] contains a NUL byte", i, j)
			}
		}
		if g.TimeoutSeconds < 0 || g.TimeoutSeconds > MaxGateSeconds {
			add("[%d].timeoutSeconds %d is not between 0 and %d", i, g.TimeoutSeconds, MaxGateSeconds)
		}
		if g.PassWithinSeconds < 0 || g.PassWithinSeconds > MaxGateSeconds {
			add("[%d].passWithinSeconds %d is not between 0 and %d", i, g.PassWithinSeconds, MaxGateSeconds)
		}
	}
	return errors.Join(errs...)
}
