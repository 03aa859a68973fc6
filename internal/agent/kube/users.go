package kube

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// User is a KubeadmConfig user (Cluster API bootstrap v1beta2 field names), with
// the password already resolved from its Secret by the coordinator.
type User struct {
	Name              string   `json:"name"`
	Gecos             string   `json:"gecos,omitempty"`
	Groups            string   `json:"groups,omitempty"`
	HomeDir           string   `json:"homeDir,omitempty"`
	Inactive          *bool    `json:"inactive,omitempty"`
	Shell             string   `json:"shell,omitempty"`
	Passwd            string   `json:"passwd,omitempty"`
	PrimaryGroup      string   `json:"primaryGroup,omitempty"`
	LockPassword      *bool    `json:"lockPassword,omitempty"`
	Sudo              string   `json:"sudo,omitempty"`
	SSHAuthorizedKeys []string `json:"sshAuthorizedKeys,omitempty"`
}

// DecodeUsers parses a plan's users.
func DecodeUsers(raw json.RawMessage) ([]User, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var users []User
	if err := json.Unmarshal(raw, &users); err != nil {
		return nil, fmt.Errorf("decode users: %w", err)
	}
	for _, u := range users {
		if errs := protocol.ValidateUser(u.Name, u.HomeDir, u.Passwd, u.Sudo); len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
	}
	return users, nil
}

// Host paths for users and NTP.
const (
	sudoersDir       = "/etc/sudoers.d"
	chronyConfDir    = "/etc/chrony/conf.d"
	chronyConf       = chronyConfDir + "/capi-inplace.conf"
	timesyncdDropIn  = "/etc/systemd/timesyncd.conf.d/capi-inplace.conf"
	timesyncdBinary1 = "/usr/lib/systemd/systemd-timesyncd"
	timesyncdBinary2 = "/lib/systemd/systemd-timesyncd"
)

func sudoersFile(name string) string { return sudoersDir + "/90-capi-inplace-" + name }

// home returns where a user's home is: the plan's, the host's, or /home/<name>.
func (h *Host) home(u User) string {
	if u.HomeDir != "" {
		return u.HomeDir
	}
	if e, ok := h.passwdEntry(u.Name); ok && len(e) > 5 && e[5] != "" {
		return e[5]
	}
	return "/home/" + u.Name
}

func (h *Host) passwdEntry(name string) ([]string, bool) {
	f, err := h.readHostFile("/etc/passwd")
	if err != nil {
		return nil, false
	}
	sc := bufio.NewScanner(bytes.NewReader(f.Data))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if fields[0] == name {
			return fields, true
		}
	}
	return nil, false
}

// usersBackupSet lists what ApplyUsers may change.
func (h *Host) usersBackupSet(p *protocol.NodePlan) []string {
	users, err := DecodeUsers(p.Users)
	if err != nil || len(users) == 0 {
		return nil
	}
	out := []string{"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow"}
	for _, u := range users {
		if u.Sudo != "" {
			out = append(out, sudoersFile(u.Name))
		}
		if len(u.SSHAuthorizedKeys) > 0 {
			out = append(out, path.Join(h.home(u), ".ssh", "authorized_keys"))
		}
	}
	return out
}

// ApplyUsers creates or updates the plan's users with the host's own tools
// (useradd/usermod), writes their sudoers rules and SSH authorized keys.
func (h *Host) ApplyUsers(ctx context.Context, raw json.RawMessage) error {
	users, err := DecodeUsers(raw)
	if err != nil {
		return err
	}
	for _, u := range users {
		_, exists := h.passwdEntry(u.Name)
		var args []string
		add := func(flag, v string) {
			if v != "" {
				args = append(args, flag, v)
			}
		}
		add("-c", u.Gecos)
		add("-d", u.HomeDir)
		add("-s", u.Shell)
		add("-g", u.PrimaryGroup)
		add("-G", u.Groups)
		// The password hash is never an argument: argv is readable by every process
		// on the host (/proc/<pid>/cmdline) and ends up in error text. chpasswd
		// reads it on stdin below.
		if !exists {
			if _, err := h.run(ctx, "useradd", append(append([]string{"-m"}, args...), u.Name)...); err != nil {
				return fmt.Errorf("user %s: %w", u.Name, err)
			}
		} else if len(args) > 0 {
			if _, err := h.run(ctx, "usermod", append(args, u.Name)...); err != nil {
				return fmt.Errorf("user %s: %w", u.Name, err)
			}
		}
		if u.Passwd != "" {
			if err := h.setPasswordHash(ctx, u); err != nil {
				return err
			}
		}
		if u.LockPassword != nil && *u.LockPassword {
			if _, err := h.run(ctx, "usermod", "-L", u.Name); err != nil {
				return fmt.Errorf("user %s: lock password: %w", u.Name, err)
			}
		}
		if u.Inactive != nil && *u.Inactive {
			if _, err := h.run(ctx, "usermod", "-e", "1", u.Name); err != nil {
				return fmt.Errorf("user %s: mark inactive: %w", u.Name, err)
			}
		}
		if u.Sudo != "" {
			if err := h.writeHostFile(sudoersFile(u.Name), []byte(u.Name+" "+u.Sudo+"\n"), 0o440, -1, -1); err != nil {
				return fmt.Errorf("user %s: sudoers: %w", u.Name, err)
			}
		}
		if len(u.SSHAuthorizedKeys) > 0 {
			if err := h.writeAuthorizedKeys(u); err != nil {
				return fmt.Errorf("user %s: %w", u.Name, err)
			}
		}
	}
	return nil
}

// setPasswordHash sets a user's password hash with `chpasswd -e`, the hash on
// stdin and named as the command's secret, so neither the host's process table
// nor any error, status, event or log line can carry it.
func (h *Host) setPasswordHash(ctx context.Context, u User) error {
	cmd := backend.Command{Name: "chpasswd", Args: []string{"-e"},
		Stdin: []byte(u.Name + ":" + u.Passwd + "\n"), Secrets: []string{u.Passwd}}
	if _, err := h.Runner.Run(ctx, cmd); err != nil {
		return fmt.Errorf("user %s: set password: %w", u.Name, err)
	}
	return nil
}

// writeAuthorizedKeys writes ~/.ssh/authorized_keys as root for a user who owns
// ~ and may own ~/.ssh: ~/.ssh must be a real directory (a symlink there, made by
// the user, would redirect a root write and chown anywhere on the host), and the
// file and directory are given to the user through their descriptors.
func (h *Host) writeAuthorizedKeys(u User) error {
	uid, gid, err := h.lookupOwner(u.Name)
	if err != nil {
		return err
	}
	home, err := h.openDir(h.home(u), true)
	if err != nil {
		return err
	}
	defer home.Close()
	dir := path.Join(h.home(u), ".ssh")
	ssh, err := openRealSubdir(home, dir, ".ssh", 0o700)
	if err != nil {
		return err
	}
	defer ssh.Close()
	if err := fchown(int(ssh.Fd()), uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	keys := strings.Join(u.SSHAuthorizedKeys, "\n") + "\n"
	return writeFileAt(ssh, path.Join(dir, "authorized_keys"), "authorized_keys", strings.NewReader(keys), 0o600, uid, gid)
}

// ntpTarget returns the config file and the service of the host's NTP client.
func (h *Host) ntpTarget() (file, service string, err error) {
	if d, err := h.openDir(chronyConfDir, false); err == nil {
		var st unix.Stat_t
		isDir := unix.Fstat(int(d.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
		_ = d.Close()
		if isDir {
			return chronyConf, "chrony", nil
		}
	}
	for _, b := range []string{timesyncdBinary1, timesyncdBinary2} {
		if h.hostFileExists(b) {
			return timesyncdDropIn, "systemd-timesyncd", nil
		}
	}
	return "", "", errors.New("no supported NTP client on the host: need chrony with " + chronyConfDir + " or systemd-timesyncd")
}

func (h *Host) ntpBackupSet(p *protocol.NodePlan) []string {
	if !protocol.NTPEnabled(p.NTP) {
		return nil
	}
	if file, _, err := h.ntpTarget(); err == nil {
		return []string{file}
	}
	return nil
}

// ApplyNTP configures the host's NTP client with the plan's servers and restarts it.
func (h *Host) ApplyNTP(ctx context.Context, raw json.RawMessage) error {
	n, err := protocol.DecodeNTP(raw)
	if err != nil {
		return err
	}
	for _, s := range n.Servers {
		if err := protocol.ValidateNTPServer(s); err != nil {
			return err
		}
	}
	file, service, err := h.ntpTarget()
	if err != nil {
		return err
	}
	var content string
	if service == "chrony" {
		for _, s := range n.Servers {
			content += "server " + s + " iburst\n"
		}
	} else {
		content = "[Time]\nNTP=" + strings.Join(n.Servers, " ") + "\n"
	}
	if err := h.writeHostFile(file, []byte("# written by capi-inplace from the KubeadmConfig ntp section\n"+content), 0o644, -1, -1); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := h.services().Restart(ctx, service); err != nil {
		return fmt.Errorf("restart %s: %w", service, err)
	}
	return nil
}
