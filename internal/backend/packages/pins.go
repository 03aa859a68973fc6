package packages

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Pins maps a package name to its exact version.
type Pins map[string]string

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9+._-]*$`)
	versionRE = regexp.MustCompile(`^[0-9A-Za-z.+~:_-]+$`)
)

// ParsePins parses "name=version,name=version".
func ParsePins(ref string) (Pins, error) {
	p := Pins{}
	for _, item := range strings.Split(ref, ",") {
		item = strings.TrimSpace(item)
		name, ver, ok := strings.Cut(item, "=")
		if !ok || !nameRE.MatchString(name) || !versionRE.MatchString(ver) {
			return nil, fmt.Errorf("pin %q is not <package>=<version>", item)
		}
		if _, dup := p[name]; dup {
			return nil, fmt.Errorf("package %s is pinned twice", name)
		}
		p[name] = ver
	}
	return p, nil
}

// Names returns the pinned package names, sorted.
func (p Pins) Names() []string {
	out := make([]string, 0, len(p))
	for n := range p {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// String is the canonical form: sorted "name=version" joined by commas.
func (p Pins) String() string {
	items := make([]string, 0, len(p))
	for _, n := range p.Names() {
		items = append(items, n+"="+p[n])
	}
	return strings.Join(items, ",")
}

// Digest returns the artifact digest of a pin set: the sha256 of its canonical
// form. The coordinator uses it to build the artifact, the backend to check it.
func Digest(ref string) (string, error) {
	p, err := ParsePins(ref)
	if err != nil {
		return "", err
	}
	return protocol.DigestOf([]byte(p.String())), nil
}

// parseInstalled reads "name=version" lines (dpkg-query or rpm -q with a
// format), ignoring the "not installed" lines both print for missing packages.
func parseInstalled(out string) Pins {
	p := Pins{}
	for _, line := range strings.Split(out, "\n") {
		name, ver, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && nameRE.MatchString(name) && ver != "" && !strings.Contains(line, " ") {
			p[name] = ver
		}
	}
	return p
}

// matches reports whether an installed version satisfies a pin. For rpm a pin
// without a release ("1.36.0") matches any release ("1.36.0-150500.1.1").
func matches(m Manager, installed, pin string) bool {
	if installed == pin {
		return true
	}
	return m == DNF && !strings.Contains(pin, "-") && strings.HasPrefix(installed, pin+"-")
}

// satisfied reports whether every pin is installed.
func satisfied(m Manager, installed, want Pins) bool {
	for n, v := range want {
		if !matches(m, installed[n], v) {
			return false
		}
	}
	return true
}
