package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// updateReferences rewrites the generated reference pages: docs/flags.md from
// the commands, docs/policy-reference.md from the policy's types:
//
//	go test ./cmd/capi-inplace -run 'TestFlagReference|TestPolicyReference' -update
var updateReferences = flag.Bool("update", false, "rewrite docs/flags.md and docs/policy-reference.md from the code")

const flagReferencePath = "docs/flags.md"

// TestFlagReference: docs/flags.md is the flag reference rendered from the
// binaries' command trees; it fails when the page is stale (a flag added,
// removed, renamed, or its default or help changed) and says how to regenerate.
func TestFlagReference(t *testing.T) {
	checkGenerated(t, flagReferencePath, renderFlagReference(commandTrees(t)), "TestFlagReference")
}

// checkGenerated compares the generated page at rel (from the repository's root)
// with want, or rewrites it with -update; test is the test that regenerates it.
func checkGenerated(t *testing.T, rel, want, test string) {
	t.Helper()
	path := filepath.Join(repoRoot, rel)
	if *updateReferences {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is stale: regenerate it with `go test ./cmd/capi-inplace -run %s -update`\n--- want:\n%s", rel, test, want)
	}
}

// renderFlagReference is the page: one table per command with flags, in the
// order an operator meets them.
func renderFlagReference(trees map[string]*cobra.Command) string {
	var b strings.Builder
	b.WriteString(`# Command-line flags

Generated from the commands themselves (their cobra flag sets) by
` + "`go test ./cmd/capi-inplace -run TestFlagReference -update`" + `; the test fails when
this page is stale. Edit the flags' help in the code, not here. What the settings mean
in context: [extension.md](extension.md), [agent.md](agent.md), [cli.md](cli.md).
`)
	find := func(program string, path ...string) *cobra.Command {
		c := trees[program]
		for _, name := range path {
			if c == nil {
				return nil
			}
			c = findSubcommand(c, name)
		}
		return c
	}
	section := func(title, note string, c *cobra.Command) {
		fmt.Fprintf(&b, "\n## `%s`\n\n", title)
		if note != "" {
			b.WriteString(note + "\n\n")
		}
		b.WriteString(flagTable(c))
	}
	section("capi-inplace extension", "The Cluster API runtime extension (the Deployment of config/manager).",
		find("capi-inplace", "extension"))
	section("capi-inplace-agent", "The node agent (the DaemonSet the extension installs; its arguments are `agent --host-root=/host`). `capi-inplace-agent agent` has the same flags.",
		find("capi-inplace-agent"))
	section("capi-inplace-agent rescue", "The rescue static pod a control-plane agent keeps in place while an update may leave the node unable to start its API server (its arguments are `rescue --host-root=/host --node-config=<the agent's>`; [agent-etcd-and-attempts.md](agent-etcd-and-attempts.md#the-rescue-static-pod)).",
		find("capi-inplace-agent", "rescue"))
	// Every other command an operator runs, in the command tree's order; the
	// kubectl plugin's twin of a command is named when its flags are the same.
	var differ [][]string
	for _, path := range operatorCommands(trees["capi-inplace"], nil) {
		if slices.Equal(path, []string{"extension"}) {
			continue
		}
		name := strings.Join(path, " ")
		note := ""
		if twin := find("kubectl-inplace", path...); twin != nil {
			note = fmt.Sprintf("`kubectl inplace %s` has the same flags.", name)
			if flagTable(find("capi-inplace", path...)) != flagTable(twin) {
				note, differ = "", append(differ, path)
			}
		}
		section("capi-inplace "+name, note, find("capi-inplace", path...))
	}
	for _, path := range differ {
		section("kubectl inplace "+strings.Join(path, " "), "", find("kubectl-inplace", path...))
	}
	return b.String()
}

// operatorCommands lists the paths below c of the commands that run something,
// depth first in the tree's order, leaving out cobra's own help and completion.
func operatorCommands(c *cobra.Command, prefix []string) [][]string {
	var out [][]string
	for _, sub := range c.Commands() {
		if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
			continue
		}
		path := append(slices.Clone(prefix), sub.Name())
		if sub.Runnable() {
			out = append(out, path)
		}
		out = append(out, operatorCommands(sub, path)...)
	}
	return out
}

// flagTable is a command's flags, its own and inherited, as a Markdown table.
func flagTable(c *cobra.Command) string {
	var b strings.Builder
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	row := func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "[]" {
			def = "`" + f.DefValue + "`"
		}
		// kubectl's --cache-dir defaults under $HOME: the page is the same for everyone.
		if home, err := os.UserHomeDir(); err == nil && home != "/" {
			def = strings.ReplaceAll(def, home+"/", "~/")
		}
		usage := strings.ReplaceAll(strings.Join(strings.Fields(f.Usage), " "), "|", `\|`)
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, def, usage)
	}
	fs := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	fs.AddFlagSet(c.Flags())
	fs.AddFlagSet(c.InheritedFlags())
	fs.VisitAll(row)
	return b.String()
}
