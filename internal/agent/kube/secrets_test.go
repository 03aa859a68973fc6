package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
)

// echoingFailRunner fails every command and, like a careless tool, echoes its
// whole argv and stdin into stderr: whatever secret a command carries is in the
// tool's output.
type echoingFailRunner struct{ stdins []string }

func (r *echoingFailRunner) Run(_ context.Context, c backend.Command) (backend.Result, error) {
	r.stdins = append(r.stdins, string(c.Stdin))
	res := backend.Result{ExitCode: 6, Stderr: []byte(fmt.Sprintf("%s: cannot apply %q with input %q", c.Name, c.Args, c.Stdin))}
	return res, &backend.CommandError{Command: c, Result: res, Err: fmt.Errorf("exit status 6")}
}

// TestPasswordHashNeverInErrors: a failing useradd, usermod or chpasswd never
// puts the user's password hash in the error (which becomes the Node's status
// annotation, the hook message, the Machine condition, Events and logs), and the
// hash is never a command argument (argv is world-readable in /proc).
func TestPasswordHashNeverInErrors(t *testing.T) {
	const hash = "$6$rounds=5000$SALTsalt$SECRETHASHsecrethash0123456789"
	tests := []struct {
		name   string
		passwd string // existing /etc/passwd
	}{
		{"new user (useradd fails)", "root:x:0:0::/root:/bin/sh\n"},
		{"existing user (usermod fails)", "root:x:0:0::/root:/bin/sh\ndeploy:x:1000:1000::/home/deploy:/bin/sh\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root := t.TempDir()
			write(t, root, "/etc/passwd", tt.passwd, 0o644)
			r := &echoingFailRunner{}
			h := &Host{Root: root, Runner: r}
			users, _ := json.Marshal([]User{{Name: "deploy", Groups: "nope", Passwd: hash}})
			err := h.ApplyUsers(context.Background(), users)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).NotTo(ContainSubstring("SECRETHASH"))
			g.Expect(err.Error()).To(ContainSubstring("deploy"), "the error still says whose update failed")
		})
	}
}

// TestChpasswdFailureRedactsTheHash: the hash travels only on chpasswd's stdin,
// and when chpasswd fails and echoes its input the error shows <redacted>.
func TestChpasswdFailureRedactsTheHash(t *testing.T) {
	g := NewWithT(t)
	const hash = "$y$j9T$SALTsalt$SECRETHASHsecrethash"
	r := &echoingFailRunner{}
	h := &Host{Root: t.TempDir(), Runner: r}
	err := h.setPasswordHash(context.Background(), User{Name: "deploy", Passwd: hash})
	g.Expect(err).To(HaveOccurred())
	g.Expect(r.stdins).To(Equal([]string{"deploy:" + hash + "\n"}))
	g.Expect(err.Error()).NotTo(ContainSubstring("SECRETHASH"))
	g.Expect(err.Error()).To(ContainSubstring(backend.Redacted))
	g.Expect(strings.Count(err.Error(), "deploy")).To(BeNumerically(">=", 1))
}
