// Command runcwrap is an OCI runtime that calls runc after removing, from the
// container's OCI spec (create, run) and from an exec's process spec (exec), the
// capability CAP_SYS_RESOURCE and any negative oomScoreAdj.
//
// It exists for restricted sandboxes only: where the calling process's bounding set
// lacks CAP_SYS_RESOURCE, Docker still grants every capability to a privileged
// container (Cluster API's Docker provider always asks for one, and ignores
// --cap-drop for it), and runc then fails with "unable to apply caps: operation not
// permitted". hack/realcapi/dockerd.sh registers it as dockerd's default runtime only
// when the bounding set lacks the capability; on an ordinary machine dockerd runs
// runc itself.
//
// usage: registered in daemon.json ("runtimes": {"runcwrap": {"path": ...}}); it takes
// runc's own command line and passes it on unchanged. RUNCWRAP_RUNC names the runc
// binary (default: runc on PATH).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

const missingCapability = "CAP_SYS_RESOURCE"

func main() {
	if err := patch(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "runcwrap:", err)
		os.Exit(1)
	}
	runc := os.Getenv("RUNCWRAP_RUNC")
	if runc == "" {
		var err error
		if runc, err = exec.LookPath("runc"); err != nil {
			fmt.Fprintln(os.Stderr, "runcwrap:", err)
			os.Exit(1)
		}
	}
	err := syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "runcwrap: exec runc:", err)
	os.Exit(1)
}

// patch edits the spec file the command line names, if any.
func patch(args []string) error {
	cmd := subcommand(args)
	switch cmd {
	case "create", "run":
		bundle := flagValue(args, "--bundle", "-b")
		if bundle == "" {
			bundle = "."
		}
		return editJSON(filepath.Join(bundle, "config.json"), func(spec map[string]any) {
			if p, ok := spec["process"].(map[string]any); ok {
				fixProcess(p)
			}
		})
	case "exec":
		if p := flagValue(args, "--process", "-p"); p != "" {
			return editJSON(p, fixProcess)
		}
	}
	return nil
}

// globalWithValue are runc's global flags that take a separate value.
var globalWithValue = []string{"--root", "--log", "--log-format", "--criu", "--rootless"}

// subcommand returns runc's subcommand: the first argument that is neither a global
// flag nor a global flag's value.
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "" || a[0] != '-' {
			return a
		}
		if slices.Contains(globalWithValue, a) {
			i++
		}
	}
	return ""
}

// flagValue returns the value of a flag given as "--f v", "--f=v", "-f v".
func flagValue(args []string, names ...string) string {
	for i, a := range args {
		for _, n := range names {
			if a == n && i+1 < len(args) {
				return args[i+1]
			}
			if len(a) > len(n) && a[:len(n)+1] == n+"=" {
				return a[len(n)+1:]
			}
		}
	}
	return ""
}

// fixProcess removes the capability from every set and a negative oomScoreAdj.
func fixProcess(p map[string]any) {
	if caps, ok := p["capabilities"].(map[string]any); ok {
		for set, v := range caps {
			list, ok := v.([]any)
			if !ok {
				continue
			}
			caps[set] = slices.DeleteFunc(list, func(c any) bool { return c == missingCapability })
		}
	}
	if adj, ok := p["oomScoreAdj"].(json.Number); ok && strings.HasPrefix(adj.String(), "-") {
		delete(p, "oomScoreAdj")
	}
}

func editJSON(path string, edit func(map[string]any)) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	// Numbers stay as written: a float64 would round 64-bit limits.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	edit(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, st.Mode().Perm())
}
