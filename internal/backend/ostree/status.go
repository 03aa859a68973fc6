package ostree

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Deployment is one entry of the sysroot's deployment list, in boot order:
// index 0 is what boots next.
type Deployment struct {
	OS       string
	Checksum string
	Serial   string
	Booted   bool
	Staged   bool
	Pending  bool
	Rollback bool
}

// parseAdminStatus parses the text of `ostree admin status`. Lines that name a
// deployment look like "* fedora 3f1d...e5.0 (rollback)", with "*" marking the
// booted one; the indented detail lines under them ("Version: ...") are skipped.
func parseAdminStatus(out string) ([]Deployment, error) {
	var ds []Deployment
	for _, line := range strings.Split(out, "\n") {
		trimmed := strings.TrimSpace(line)
		booted := strings.HasPrefix(trimmed, "* ")
		fields := strings.Fields(strings.TrimPrefix(trimmed, "* "))
		if len(fields) < 2 || !deploymentRE.MatchString(fields[1]) {
			if booted {
				return nil, fmt.Errorf("unexpected booted deployment line %q", line)
			}
			continue
		}
		csum, serial, _ := strings.Cut(fields[1], ".")
		rest := strings.Join(fields[2:], " ")
		ds = append(ds, Deployment{
			OS: fields[0], Checksum: csum, Serial: serial, Booted: booted,
			Staged:   strings.Contains(rest, "(staged)"),
			Pending:  strings.Contains(rest, "(pending)"),
			Rollback: strings.Contains(rest, "(rollback)"),
		})
	}
	return ds, nil
}

var deploymentRE = regexp.MustCompile(`^[0-9a-f]{64}\.[0-9]+$`)

// rpmOSTreeStatus is the part of `rpm-ostree status --json` this backend reads.
type rpmOSTreeStatus struct {
	Deployments []struct {
		OSName   string `json:"osname"`
		Checksum string `json:"checksum"`
		Serial   int    `json:"serial"`
		Booted   bool   `json:"booted"`
		Staged   bool   `json:"staged"`
	} `json:"deployments"`
}

// parseRPMOSTreeStatus parses `rpm-ostree status --json`.
func parseRPMOSTreeStatus(out []byte) ([]Deployment, error) {
	var s rpmOSTreeStatus
	if err := json.Unmarshal(out, &s); err != nil {
		return nil, fmt.Errorf("parse rpm-ostree status: %w", err)
	}
	var ds []Deployment
	bootedIdx := -1
	for i, d := range s.Deployments {
		if d.Booted {
			bootedIdx = i
		}
		ds = append(ds, Deployment{OS: d.OSName, Checksum: d.Checksum, Serial: fmt.Sprint(d.Serial), Booted: d.Booted, Staged: d.Staged})
	}
	// rpm-ostree's JSON has no pending/rollback flags: derive them like ostree does.
	if bootedIdx > 0 {
		ds[0].Pending = !ds[0].Staged
	}
	if bootedIdx >= 0 && bootedIdx+1 < len(ds) {
		ds[bootedIdx+1].Rollback = true
	}
	return ds, nil
}

// summary is the pure reading of a deployment list that every step decides from.
type summary struct {
	// def is the deployment that boots next (index 0); nil when there is none.
	def *Deployment
	// booted is the running deployment; nil when the sysroot is not booted
	// (a sysroot under construction, a chroot, a test).
	booted *Deployment
	// previous is the deployment after the booted one (or after the default
	// when nothing is booted): what a rollback returns to.
	previous *Deployment
	// index of the booted deployment; -1 when none.
	bootedIdx int
}

func summarize(ds []Deployment) summary {
	s := summary{bootedIdx: -1}
	if len(ds) > 0 {
		s.def = &ds[0]
	}
	for i := range ds {
		if ds[i].Booted {
			s.booted, s.bootedIdx = &ds[i], i
			break
		}
	}
	anchor := s.bootedIdx
	if anchor < 0 {
		anchor = 0
	}
	if anchor+1 < len(ds) {
		s.previous = &ds[anchor+1]
	}
	return s
}

func checksumOf(d *Deployment) string {
	if d == nil {
		return ""
	}
	return d.Checksum
}
