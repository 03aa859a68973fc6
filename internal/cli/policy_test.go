package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// runPolicyValidate runs `policy validate` with args and stdin; it returns the
// output and the process exit code.
func runPolicyValidate(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := NewPolicyCommand("capi-inplace")
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(append([]string{"validate"}, args...))
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), ExitCode(err)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The release's own policy ConfigMap must always pass, as a manifest and as the
// file it mounts.
func TestPolicyValidateReleasePolicy(t *testing.T) {
	g := NewWithT(t)
	release := filepath.Join("..", "..", "config", "manager", "policy.yaml")
	out, code := runPolicyValidate(t, "", "-f", release)
	g.Expect(code).To(Equal(ExitOK), out)
	g.Expect(out).To(Equal(release + " (ConfigMap capi-inplace-system/capi-inplace-policy): valid\n"))
}

func TestPolicyValidate(t *testing.T) {
	const valid = "drain: {timeoutSeconds: 300}\n"
	// Two mistakes in one file: both are reported, each on its own line.
	const twoErrors = "drain: {timeoutSeconds: -1}\ndeadlines: {applyingSeconds: 0}\n"
	manifests := `apiVersion: v1
kind: Namespace
metadata: {name: capi-inplace-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: capi-inplace-policy, namespace: capi-inplace-system}
data:
  policy.yaml: |
    gates:
    - gates:
      - name: bad
        cel: {expression: "node.metadata.name =="}
`
	tests := []struct {
		name      string
		files     map[string]string
		stdin     string
		args      func(paths map[string]string) []string
		code      int
		wantLines []string
		// entries, when set, is how many lines start with a file's name.
		entries int
	}{
		{
			name:  "a valid file",
			files: map[string]string{"ok.yaml": valid},
			args:  func(p map[string]string) []string { return []string{"-f", p["ok.yaml"]} },
			code:  ExitOK, wantLines: []string{"ok.yaml: valid"},
		},
		{
			name:  "every error of an invalid file, and the valid one beside it",
			files: map[string]string{"ok.yaml": valid, "bad.yaml": twoErrors},
			args:  func(p map[string]string) []string { return []string{"-f", p["ok.yaml"], "-f", p["bad.yaml"]} },
			code:  ExitInvalidPolicy,
			wantLines: []string{"ok.yaml: valid", "bad.yaml: drain.timeoutSeconds -1 must be positive",
				"bad.yaml: deadlines.applyingSeconds 0 must be between 1 and 604800 (a week)"},
		},
		{
			name:  "an unknown field",
			files: map[string]string{"typo.yaml": "drian: {timeoutSeconds: 300}\n"},
			args:  func(p map[string]string) []string { return []string{"-f", p["typo.yaml"]} },
			code:  ExitInvalidPolicy, wantLines: []string{"typo.yaml: parse: ", `unknown field "drian"`},
		},
		{
			name:  "a CEL error over several lines is one entry, its later lines indented",
			files: map[string]string{"cel.yaml": "gates:\n- gates:\n  - name: bad\n    cel: {expression: \"node.metadata.name ==\"}\n"},
			args:  func(p map[string]string) []string { return []string{"-f", p["cel.yaml"]} },
			code:  ExitInvalidPolicy, entries: 1,
			wantLines: []string{"cel.yaml: gates[0].gates[0].cel.expression: CEL expression does not compile", "\n   | node.metadata.name =="},
		},
		{
			name: "gates that may outlast the verifying deadline",
			files: map[string]string{"slow.yaml": "deadlines: {verifyingSeconds: 1200}\ngates:\n- cluster: prod/edge\n  gates:\n" +
				"  - {name: app-ready, command: [/bin/true], passWithinSeconds: 900}\n  - {name: pods-ready, cel: {expression: \"true\"}}\n"},
			args: func(p map[string]string) []string { return []string{"-f", p["slow.yaml"]} },
			code: ExitInvalidPolicy, entries: 1,
			wantLines: []string{"slow.yaml: gates[0] (cluster prod/edge): the gates app-ready (up to 15m30s), pods-ready (up to 5m30s) may take 21m0s in all, not less than deadlines.verifyingSeconds 1200 (20m0s)"},
		},
		{
			name:  "manifests from standard input: the policy ConfigMap is checked, other objects skipped",
			stdin: manifests,
			args:  func(map[string]string) []string { return []string{"-f", "-"} },
			code:  ExitInvalidPolicy, wantLines: []string{"- (ConfigMap capi-inplace-system/capi-inplace-policy): gates[0].gates[0].cel.expression"},
		},
		{
			name:  "manifests without a policy",
			stdin: "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
			args:  func(map[string]string) []string { return []string{"-f", "-"} },
			code:  ExitError,
		},
		{
			name: "no file",
			args: func(map[string]string) []string { return nil },
			code: ExitError,
		},
		{
			name: "a file that does not exist",
			args: func(map[string]string) []string { return []string{"-f", filepath.Join(t.TempDir(), "missing.yaml")} },
			code: ExitError,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			paths := map[string]string{}
			for name, content := range tt.files {
				paths[name] = writeFile(t, name, content)
			}
			out, code := runPolicyValidate(t, tt.stdin, tt.args(paths)...)
			g.Expect(code).To(Equal(tt.code), out)
			for _, want := range tt.wantLines {
				g.Expect(out).To(ContainSubstring(want))
			}
			if tt.entries > 0 {
				n := 0
				for _, l := range strings.Split(out, "\n") {
					for _, p := range paths {
						if strings.HasPrefix(l, p+": ") {
							n++
						}
					}
				}
				g.Expect(n).To(Equal(tt.entries), out)
			}
		})
	}
}
