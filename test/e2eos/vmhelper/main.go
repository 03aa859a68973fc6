// Command capi-inplace-vmhelper runs inside the OS image lane's VM (hack/osimage,
// test/e2eos). It reports what the VM booted as the VM itself sees it:
// /proc/cmdline, os-release, GRUB's environment, RAUC's slot status or the OSTree
// deployments (through the product's RAUC or OSTree backend, and `ostree admin
// status`) and every boot that reached userspace; it plays the
// node's bootstrap (the agent's credentials and node name, then the agent's unit
// starts), serves the agent's journal and log, and reboots the VM on request.
//
// It is a test harness: the agent runs every step of an update; the test asserts
// on what this reports. It is never part of a product image.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/ostree"
	"github.com/capi-inplace/capi-inplace/internal/backend/rauc"
	"github.com/capi-inplace/capi-inplace/test/e2eos/vmapi"
)

// statusBackend is what the helper asks of the image's backend.
type statusBackend interface {
	Status(ctx context.Context) (backend.Status, error)
}

// osName is the OSTree image's stateroot (hack/osimage/build.sh).
const osName = "capi"

func main() {
	addr := flag.String("addr", ":8080", "Listen address.")
	kind := flag.String("backend", "rauc", "The image's mechanism: rauc or ostree.")
	stateDir := flag.String("state-dir", "/data/capi-inplace", "The backend's state directory (on the data partition).")
	boots := flag.String("boots", vmapi.BootsFile, "Where every boot that reached userspace is recorded (shared by every slot or deployment).")
	agentDir := flag.String("agent-config-dir", vmapi.AgentConfigDir, "Where the node's bootstrap writes the agent's kubeconfig and env.")
	flag.Parse()
	h := &helper{kind: *kind, boots: *boots, agentDir: *agentDir}
	if err := run(*addr, *stateDir, h); err != nil {
		log.Fatal(err)
	}
}

func run(addr, stateDir string, h *helper) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	var err error
	switch h.kind {
	case "rauc":
		h.backend, err = rauc.New(rauc.Options{Runner: backend.ExecRunner{}, StateDir: filepath.Join(stateDir, "rauc-backend")})
	case "ostree":
		h.backend, err = ostree.New(ostree.Options{Runner: backend.ExecRunner{}, OSName: osName})
	default:
		err = fmt.Errorf("unknown backend %q", h.kind)
	}
	if err != nil {
		return err
	}
	if err := h.recordBoot(); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /facts", h.facts)
	mux.HandleFunc("POST /reboot", h.reboot)
	mux.HandleFunc("POST /agent", h.configureAgent)
	mux.HandleFunc("GET /journal", h.journal)
	mux.HandleFunc("GET /agent/log", h.agentLog)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// recordBoot appends this boot to the boots file on the data partition: a boot is
// recorded only when its userspace came up far enough to start this service.
func (h *helper) recordBoot() error {
	f, err := bootFacts()
	if err != nil {
		return err
	}
	if h.kind == "ostree" {
		if f.Deployment, f.Deployments, err = ostreeDeployments(context.Background()); err != nil {
			return err
		}
	}
	line, err := json.Marshal(vmapi.Boot{ID: f.BootID, Slot: f.Slot, ImageVersion: f.ImageVersion, Deployment: f.Deployment})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(h.boots), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(h.boots, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := out.Write(append(line, '\n')); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

type helper struct {
	kind     string
	boots    string
	agentDir string
	backend  statusBackend
}

// ostreeDeployments reads `ostree admin status`: the booted deployment's commit
// and every deployment's commit, the default first. Its deployment lines are
// "* <stateroot> <commit>.<serial>" for the booted one and "  <stateroot> ..."
// for the others; their details are indented further.
func ostreeDeployments(ctx context.Context) (string, []string, error) {
	out, err := exec.CommandContext(ctx, "ostree", "admin", "status").Output()
	if err != nil {
		return "", nil, fmt.Errorf("ostree admin status: %w", err)
	}
	var booted string
	var all []string
	for _, line := range strings.Split(string(out), "\n") {
		if len(line) < 2 || (line[0] != '*' && line[0] != ' ') || line[1] != ' ' || strings.HasPrefix(line[2:], " ") {
			continue
		}
		fields := strings.Fields(line[2:])
		if len(fields) < 2 {
			continue
		}
		commit, _, _ := strings.Cut(fields[1], ".")
		all = append(all, commit)
		if line[0] == '*' {
			booted = commit
		}
	}
	if len(all) == 0 {
		return "", nil, fmt.Errorf("no deployment in `ostree admin status`: %s", out)
	}
	return booted, all, nil
}

func bootFacts() (vmapi.Facts, error) {
	var f vmapi.Facts
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return f, err
	}
	f.Cmdline = strings.TrimSpace(string(cmdline))
	for _, arg := range strings.Fields(f.Cmdline) {
		if v, ok := strings.CutPrefix(arg, "rauc.slot="); ok {
			f.Slot = v
		}
	}
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return f, err
	}
	f.BootID = strings.TrimSpace(string(id))
	osRelease, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return f, err
	}
	for _, line := range strings.Split(string(osRelease), "\n") {
		if v, ok := strings.CutPrefix(line, "IMAGE_VERSION="); ok {
			f.ImageVersion = strings.Trim(v, `"`)
		}
	}
	return f, nil
}

func (h *helper) facts(w http.ResponseWriter, r *http.Request) {
	f, err := bootFacts()
	if err != nil {
		fail(w, err)
		return
	}
	if h.kind == "ostree" {
		if f.Deployment, f.Deployments, err = ostreeDeployments(r.Context()); err != nil {
			fail(w, err)
			return
		}
	}
	env, err := exec.CommandContext(r.Context(), "grub-editenv", "/efi/EFI/BOOT/grubenv", "list").Output()
	if err != nil {
		fail(w, fmt.Errorf("grub-editenv: %w", err))
		return
	}
	f.Grubenv = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(env)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			f.Grubenv[k] = v
		}
	}
	if out, err := exec.CommandContext(r.Context(), "systemd-analyze", "time").Output(); err == nil {
		f.BootTime = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	if mods, err := os.ReadFile("/proc/modules"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(mods)), "\n") {
			if name, _, ok := strings.Cut(line, " "); ok {
				f.Modules = append(f.Modules, name)
			}
		}
	}
	boots, err := os.ReadFile(h.boots)
	if err != nil {
		fail(w, err)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(boots)), "\n") {
		var b vmapi.Boot
		if err := json.Unmarshal([]byte(line), &b); err != nil {
			fail(w, fmt.Errorf("boots file: %w", err))
			return
		}
		f.Boots = append(f.Boots, b)
	}
	if st, err := h.backend.Status(r.Context()); err == nil {
		f.Backend = st
	} else {
		f.BackendErr = err.Error()
	}
	reply(w, f)
}

func (h *helper) reboot(w http.ResponseWriter, _ *http.Request) {
	reply(w, struct{}{})
	go func() {
		time.Sleep(200 * time.Millisecond)
		if out, err := exec.Command("systemctl", "reboot").CombinedOutput(); err != nil {
			log.Printf("systemctl reboot: %v: %s", err, out)
		}
	}()
}

// configureAgent writes the agent's configuration where every slot or deployment
// reads it, adds the OSTree remote when given, and starts the agent's unit, which
// from then on starts at every boot.
func (h *helper) configureAgent(w http.ResponseWriter, r *http.Request) {
	var c vmapi.AgentConfig
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&c); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(c.Kubeconfig) == 0 || c.NodeName == "" || strings.ContainsAny(c.NodeName, "\n\"'\\ ") {
		http.Error(w, "a kubeconfig and a plain node name are required", http.StatusBadRequest)
		return
	}
	if rm := c.OSTreeRemote; rm != nil {
		if h.kind != "ostree" || rm.Name == "" || strings.HasPrefix(rm.Name, "-") || !strings.HasPrefix(rm.URL, "http") {
			http.Error(w, "an OSTree remote needs the OSTree image, a name and an http(s) URL", http.StatusBadRequest)
			return
		}
		// --force replaces the remote of an earlier bootstrap; no GPG: the
		// plan's commit checksum is what pins the content.
		if out, err := exec.CommandContext(r.Context(), "ostree", "remote", "add", "--repo=/ostree/repo", "--force", "--no-gpg-verify",
			rm.Name, rm.URL).CombinedOutput(); err != nil {
			fail(w, fmt.Errorf("ostree remote add: %w: %s", err, out))
			return
		}
	}
	if err := os.MkdirAll(h.agentDir, 0o700); err != nil {
		fail(w, err)
		return
	}
	// The env file first: the unit's condition is the kubeconfig.
	for _, f := range []struct {
		path string
		data []byte
	}{{filepath.Join(h.agentDir, "env"), []byte("NODE_NAME=" + c.NodeName + "\n")}, {filepath.Join(h.agentDir, "kubeconfig"), c.Kubeconfig}} {
		if err := writeSynced(f.path, f.data); err != nil {
			fail(w, err)
			return
		}
	}
	// The renames and the remote's file (ostree syncs no new file's data) reach
	// the disk now: the test may cut the power in the seconds after.
	syscall.Sync()
	if out, err := exec.CommandContext(r.Context(), "systemctl", "start", vmapi.AgentUnit).CombinedOutput(); err != nil {
		fail(w, fmt.Errorf("systemctl start %s: %w: %s", vmapi.AgentUnit, err, out))
		return
	}
	reply(w, struct{}{})
}

// writeSynced writes a file that must outlive a power cut right after.
func writeSynced(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// journal serves the agent's journal as the agent wrote it; 404 while there is none.
func (h *helper) journal(w http.ResponseWriter, _ *http.Request) {
	data, err := os.ReadFile(vmapi.AgentJournal)
	if errors.Is(err, os.ErrNotExist) {
		http.Error(w, "no journal", http.StatusNotFound)
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// agentLog serves the agent's log of this boot, for the reader of a failed run.
func (h *helper) agentLog(w http.ResponseWriter, r *http.Request) {
	out, err := exec.CommandContext(r.Context(), "journalctl", "-b", "-u", vmapi.AgentUnit, "--no-pager", "-o", "short-precise").CombinedOutput()
	if err != nil {
		fail(w, fmt.Errorf("journalctl: %w: %s", err, out))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(out)
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, err error) {
	http.Error(w, err.Error(), http.StatusInternalServerError)
}
