package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// ErrUnsafeHostValue is wrapped by every error about a plan value that cannot be
// written into a host file as is: it would inject lines into kubeadm-flags.env,
// a sudoers rule or an NTP configuration, or be silently ignored by the tool that
// reads the file. The planner does not cover such a change, and the agent refuses
// a plan that carries one; both use the functions below (one definition).
var ErrUnsafeHostValue = errors.New("unsafe value for a host file")

var (
	// kubeletArgNameRE: kubelet flag names (lower-case words, dashes, dots).
	kubeletArgNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// userNameRE: shadow-utils' default NAME_REGEX, plus upper case and dots,
	// which useradd accepts (a trailing $ is for Samba machine accounts).
	userNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$`)
	// ntpServerRE: a host name, an IPv4 address or an IPv6 address.
	ntpServerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.:-]*$`)
)

func unsafe(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsafeHostValue, fmt.Sprintf(format, args...))
}

// ValidateKubeletArg checks that an arg can be one word of the
// KUBELET_KUBEADM_ARGS="..." line that systemd reads from kubeadm-flags.env and
// splits at white space: no quote, backslash, white space or control character.
func ValidateKubeletArg(a Arg) error {
	if !kubeletArgNameRE.MatchString(a.Name) {
		return unsafe("kubelet arg name %q is not a flag name (letters, digits, '-', '.', '_')", a.Name)
	}
	if i := strings.IndexFunc(a.Value, func(r rune) bool { return r == '"' || r == '\\' || r <= ' ' || r == 0x7f }); i >= 0 {
		return unsafe("kubelet arg %s has a value with %q at byte %d: kubeadm-flags.env is one double-quoted line split at white space, so quotes, backslashes, white space and control characters cannot be written safely", a.Name, a.Value[i:i+1], i)
	}
	return nil
}

// ValidateUserName checks a user name for useradd and the files named after it.
// A user with a sudo rule must not have '.' in the name: sudo skips files in
// /etc/sudoers.d whose names contain '.' or end in '~', so the rule would be
// reported written and never apply.
func ValidateUserName(name string, hasSudo bool) error {
	if !userNameRE.MatchString(name) {
		return unsafe("user name %q is not a valid user name (a letter or '_', then letters, digits, '_', '.', '-', at most 32)", name)
	}
	if hasSudo && strings.Contains(name, ".") {
		return unsafe("user %q has a sudo rule, but sudo ignores files in /etc/sudoers.d whose names contain '.', so the rule would never apply", name)
	}
	return nil
}

// ValidateSudoRule checks that a user's sudo rule is one line.
func ValidateSudoRule(user, rule string) error {
	if strings.ContainsAny(rule, "\n\r\x00") {
		return unsafe("user %s: the sudo rule has a line break or NUL, which would add lines to the sudoers file", user)
	}
	return nil
}

// ValidatePasswordHash checks that a password hash is one "name:hash" line for
// chpasswd. The message never contains the hash.
func ValidatePasswordHash(user, hash string) error {
	if strings.ContainsAny(hash, ":\n\r\x00") {
		return unsafe("user %s: the password hash contains ':', a line break or NUL, which would change other fields or users in chpasswd's input", user)
	}
	return nil
}

// ValidateHomeDir checks that a home directory is a clean absolute path.
func ValidateHomeDir(user, dir string) error {
	if dir != "" && (!path.IsAbs(dir) || path.Clean(dir) != dir || dir == "/") {
		return unsafe("user %s: home directory %q is not a clean absolute path", user, dir)
	}
	return nil
}

// ValidateNTPServer checks that an NTP server is a host name or an address, so it
// is one word of a chrony "server" line or of timesyncd's NTP= list.
func ValidateNTPServer(s string) error {
	if !ntpServerRE.MatchString(s) {
		return unsafe("NTP server %q is not a host name or an IP address", s)
	}
	return nil
}

// planUser is the part of a KubeadmConfig user the host-value rules look at.
type planUser struct {
	Name    string `json:"name"`
	HomeDir string `json:"homeDir,omitempty"`
	Passwd  string `json:"passwd,omitempty"`
	Sudo    string `json:"sudo,omitempty"`
}

// validateHostValues applies the rules above to everything in a plan that is
// written into a host file.
func (p *NodePlan) validateHostValues() []error {
	var errs []error
	for _, a := range p.KubeletExtraArgs {
		if err := ValidateKubeletArg(a); err != nil {
			errs = append(errs, err)
		}
	}
	if len(p.Users) > 0 && json.Valid(p.Users) && string(p.Users) != "null" {
		var users []planUser
		if err := json.Unmarshal(p.Users, &users); err != nil {
			errs = append(errs, fmt.Errorf("users is not a list of users: %w", err))
		}
		for _, u := range users {
			errs = append(errs, ValidateUser(u.Name, u.HomeDir, u.Passwd, u.Sudo)...)
		}
	}
	if len(p.NTP) > 0 && json.Valid(p.NTP) && string(p.NTP) != "null" {
		var n NTP
		if err := json.Unmarshal(p.NTP, &n); err != nil {
			errs = append(errs, fmt.Errorf("ntp is not an ntp section: %w", err))
		}
		for _, s := range n.Servers {
			if err := ValidateNTPServer(s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// ValidateUser applies every user rule: name, home directory, password hash and
// sudo rule.
func ValidateUser(name, homeDir, passwd, sudo string) []error {
	var errs []error
	for _, err := range []error{
		ValidateUserName(name, sudo != ""),
		ValidateHomeDir(name, homeDir),
		ValidatePasswordHash(name, passwd),
		ValidateSudoRule(name, sudo),
	} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
