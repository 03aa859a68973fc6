package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestSubcommandSkipsGlobalFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--root", "/run/x", "--log", "/l.json", "--log-format", "json", "create", "--bundle", "/b", "id"}, "create"},
		{[]string{"--systemd-cgroup", "exec", "--process", "/p.json", "id"}, "exec"},
		{[]string{"--root=/run/x", "state", "id"}, "state"},
		{[]string{"--version"}, ""},
	} {
		if got := subcommand(tc.args); got != tc.want {
			t.Errorf("subcommand(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestPatchCreateAndExec edits a bundle's config.json and an exec's process file as
// containerd's shim passes them, keeping every other field as written.
func TestPatchCreateAndExec(t *testing.T) {
	dir := t.TempDir()
	spec := `{"ociVersion":"1.0.2","process":{"oomScoreAdj":-998,"capabilities":{
"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE"],"effective":["CAP_SYS_RESOURCE"],"permitted":["CAP_SYS_RESOURCE","CAP_KILL"]},
"rlimits":[{"type":"RLIMIT_NOFILE","hard":18446744073709551615,"soft":1048576}]},"root":{"path":"rootfs"}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := patch([]string{"--root", "/r", "create", "--bundle", dir, "id"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	var got struct {
		Process struct {
			OOMScoreAdj  *int                `json:"oomScoreAdj"`
			Capabilities map[string][]string `json:"capabilities"`
			Rlimits      []struct {
				Hard uint64 `json:"hard"`
			} `json:"rlimits"`
		} `json:"process"`
		Root struct{ Path string } `json:"root"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Process.OOMScoreAdj != nil {
		t.Errorf("a negative oomScoreAdj is kept: %d", *got.Process.OOMScoreAdj)
	}
	for set, caps := range got.Process.Capabilities {
		for _, c := range caps {
			if c == missingCapability {
				t.Errorf("%s keeps %s", set, c)
			}
		}
	}
	if len(got.Process.Capabilities["bounding"]) != 1 || len(got.Process.Capabilities["permitted"]) != 1 {
		t.Errorf("other capabilities lost: %v", got.Process.Capabilities)
	}
	if got.Process.Rlimits[0].Hard != 18446744073709551615 || got.Root.Path != "rootfs" {
		t.Errorf("other fields changed: %s", b)
	}

	proc := filepath.Join(dir, "process.json")
	if err := os.WriteFile(proc, []byte(`{"capabilities":{"bounding":["CAP_SYS_RESOURCE"]},"oomScoreAdj":100}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := patch([]string{"exec", "--process", proc, "--detach", "id"}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(proc)
	if string(b) != `{"capabilities":{"bounding":[]},"oomScoreAdj":100}` {
		t.Errorf("exec process file: %s", b)
	}
}
