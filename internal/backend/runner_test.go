package backend

import (
	"context"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestCommandErrorRedactsSecrets(t *testing.T) {
	tests := []struct {
		name   string
		cmd    Command
		res    Result
		err    error
		secret string
	}{
		{"named secret in args", Command{Name: "tool", Args: []string{"--token", "s3cr3t-value"}, Secrets: []string{"s3cr3t-value"}},
			Result{Stderr: []byte("bad token s3cr3t-value")}, errors.New("exit status 1"), "s3cr3t-value"},
		{"named secret echoed on stdout", Command{Name: "tool", Stdin: []byte("k=s3cr3t-value"), Secrets: []string{"s3cr3t-value"}},
			Result{Stdout: []byte("line 1: k=s3cr3t-value")}, errors.New("exit status 1"), "s3cr3t-value"},
		{"named secret in the wrapped error", Command{Name: "tool", Secrets: []string{"s3cr3t-value"}},
			Result{}, errors.New("cannot start with s3cr3t-value"), "s3cr3t-value"},
		{"unnamed sha512 crypt hash", Command{Name: "useradd", Args: []string{"-p", "$6$rounds=5000$SALT$SECRETHASH.x/y", "bob"}},
			Result{Stderr: []byte("useradd: group 'nope' does not exist")}, errors.New("exit status 6"), "SECRETHASH"},
		{"unnamed yescrypt hash in stderr", Command{Name: "tool"},
			Result{Stderr: []byte("bad line bob:$y$j9T$SALT$SECRETHASH")}, errors.New("exit status 1"), "SECRETHASH"},
		{"unnamed bcrypt hash", Command{Name: "tool", Args: []string{"$2b$12$SECRETHASHabcdefghijkl"}},
			Result{}, errors.New("exit status 1"), "SECRETHASH"},
		{"long output cut after redaction", Command{Name: "tool", Secrets: []string{"s3cr3t-value"}},
			Result{Stderr: append([]byte("s3cr3t-value "), make([]byte, 600)...)}, errors.New("exit status 1"), "s3cr3t-value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &CommandError{Command: tt.cmd, Result: tt.res, Err: tt.err}
			for _, s := range []string{e.Error(), tt.cmd.String()} {
				if strings.Contains(s, tt.secret) {
					t.Fatalf("secret %q in %q", tt.secret, s)
				}
			}
		})
	}
}

func TestRedactKeepsOrdinaryText(t *testing.T) {
	for _, s := range []string{
		"kubeadm upgrade node: exit status 1: couldn't create a Kubernetes client",
		"cost is $5 per node, $6 with support",
		"PATH=$PATH:/usr/bin",
	} {
		if got := RedactKnownSecrets(s); got != s {
			t.Errorf("RedactKnownSecrets(%q) = %q, want it unchanged", s, got)
		}
	}
}

// TestOutputLinesAsWritten: a command's lines reach Output as it writes them,
// from both streams, secrets redacted, a last line without a newline included;
// a line too long to hand on whole is left out (never cut, which could split a
// secret past its redaction), and the Result still holds everything.
func TestOutputLinesAsWritten(t *testing.T) {
	g := NewWithT(t)
	long := strings.Repeat("x", maxOutputLine+10)
	var lines []string
	c := Command{Name: "sh", Args: []string{"-c", `echo "phase one"; echo "token s3cret" >&2; echo ` + long + `; printf "last"`},
		Secrets: []string{"s3cret"}, Output: func(l string) { lines = append(lines, l) }}
	res, err := ExecRunner{}.Run(context.Background(), c)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lines).To(ContainElements("phase one", "token "+Redacted, "last"))
	g.Expect(lines).To(ContainElement(ContainSubstring("left out")))
	for _, l := range lines {
		g.Expect(l).NotTo(ContainSubstring("s3cret"))
		g.Expect(len(l)).To(BeNumerically("<=", maxOutputLine))
	}
	g.Expect(string(res.Stdout)).To(Equal("phase one\n" + long + "\nlast"))
	g.Expect(string(res.Stderr)).To(Equal("token s3cret\n"))

	// Without Output nothing changes.
	res, err = ExecRunner{}.Run(context.Background(), Command{Name: "sh", Args: []string{"-c", "echo quiet"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(res.Stdout)).To(Equal("quiet\n"))
}
