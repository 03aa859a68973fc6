//go:build e2eos

package e2eos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/freeport"
	"github.com/capi-inplace/capi-inplace/test/e2eos/vmapi"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
)

// OVMF's code is shared and read-only; each VM gets its own copy of the variables.
const ovmfCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"

// hostFromVM is the host's loopback as a VM reaches it through QEMU's user-mode
// network.
const hostFromVM = "10.0.2.2"

// VM is one QEMU virtual machine under software emulation (TCG), booting the lane's
// disk through OVMF and GRUB. Its helper answers on a host port forwarded by
// QEMU's user-mode network; the host is hostFromVM from inside.
//
// A reset by the guest (systemctl reboot, a kernel panic with panic=N) ends QEMU
// (-no-reboot) and the VM powers on again at once, as a machine whose reset line
// restarts its firmware: OVMF under TCG here sometimes never came back from a warm
// reset (the console stopped after "reboot: Restarting system" for minutes), a
// fault of the emulation, not of what the guest does.
type VM struct {
	Name string
	dir  string
	port int

	mu sync.Mutex
	// cmd is the running QEMU; console numbers its serial log, powerOns counts
	// the QEMU processes started so far (the next one's console number).
	cmd      *exec.Cmd
	console  int
	powerOns int
	// stop is closed by PowerCut; done when the supervisor has ended.
	stop, done chan struct{}
}

// NewVM prepares a VM in dir from the lane's image directory: its own copy of
// the disk image named disk (sparse), as disk.raw, and of the firmware's variables.
func NewVM(name, dir, image, disk string) (*VM, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A raw copy, not a qcow2 overlay: a killed QEMU (a power cut) leaves a raw
	// disk with every write the guest issued, as a disk without a volatile cache.
	for from, to := range map[string]string{disk: "disk.raw", "OVMF_VARS.fd": "OVMF_VARS.fd"} {
		if out, err := exec.Command("cp", "--sparse=always", filepath.Join(image, from), filepath.Join(dir, to)).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("copy %s: %w: %s", from, err, out)
		}
	}
	return &VM{Name: name, dir: dir}, nil
}

// Start powers the VM on. Each power-on's serial console goes to console-<n>.log.
func (v *VM) Start() error {
	if v.Running() {
		return errors.New("vm already running")
	}
	port, err := freeport.Port()
	if err != nil {
		return err
	}
	v.port = port
	v.stop, v.done = make(chan struct{}), make(chan struct{})
	started := make(chan error, 1)
	go v.supervise(started)
	return <-started
}

// supervise runs QEMU, and again after every reset of the guest, until PowerCut.
func (v *VM) supervise(started chan<- error) {
	defer close(v.done)
	first := true
	for {
		v.mu.Lock()
		select {
		case <-v.stop:
			v.mu.Unlock()
			return
		default:
		}
		n := v.powerOns
		v.powerOns++
		cmd := v.qemu(n)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Start()
		if err == nil {
			v.cmd, v.console = cmd, n
		}
		v.mu.Unlock()
		if first {
			started <- err
			first = false
		}
		if err != nil {
			return
		}
		_ = cmd.Wait()
		if stderr.Len() > 0 {
			_ = os.WriteFile(filepath.Join(v.dir, fmt.Sprintf("qemu-stderr-%d.log", n)), stderr.Bytes(), 0o644)
		}
	}
}

func (v *VM) qemu(console int) *exec.Cmd {
	return exec.Command("qemu-system-x86_64",
		"-accel", "tcg", "-machine", "q35", "-m", "1024", "-smp", "1",
		"-nodefaults", "-display", "none", "-no-user-config", "-no-reboot",
		"-serial", "file:"+v.consolePath(console),
		"-drive", "if=pflash,format=raw,readonly=on,file="+ovmfCode,
		"-drive", "if=pflash,format=raw,file="+filepath.Join(v.dir, "OVMF_VARS.fd"),
		"-drive", "if=virtio,format=raw,file="+filepath.Join(v.dir, "disk.raw"),
		"-netdev", "user,id=n0,hostfwd=tcp:127.0.0.1:"+strconv.Itoa(v.port)+"-:8080",
		"-device", "virtio-net-pci,netdev=n0",
	)
}

func (v *VM) consolePath(n int) string {
	return filepath.Join(v.dir, fmt.Sprintf("console-%d.log", n))
}

// WaitConsole waits until the serial console of the current power-on shows text.
func (v *VM) WaitConsole(ctx context.Context, text string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		v.mu.Lock()
		path := v.consolePath(v.console)
		v.mu.Unlock()
		if data, err := os.ReadFile(path); err == nil && bytes.Contains(data, []byte(text)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: console never showed %q", v.Name, text)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// EverShowed reports whether the serial console of any power-on so far, each
// reset included, showed text.
func (v *VM) EverShowed(text string) (bool, error) {
	n, err := v.Showings(text)
	return n > 0, err
}

// Showings counts the power-ons so far, each reset included, whose serial
// console showed text.
func (v *VM) Showings(text string) (int, error) {
	v.mu.Lock()
	n := v.powerOns
	v.mu.Unlock()
	shown := 0
	for i := range n {
		data, err := os.ReadFile(v.consolePath(i))
		if err != nil {
			return shown, err
		}
		if bytes.Contains(data, []byte(text)) {
			shown++
		}
	}
	return shown, nil
}

// PowerCut kills QEMU: no shutdown, no flush by the guest, no power-on after it.
func (v *VM) PowerCut() {
	if v.stop == nil {
		return
	}
	v.mu.Lock()
	select {
	case <-v.stop:
	default:
		close(v.stop)
	}
	if v.cmd != nil && v.cmd.Process != nil {
		_ = v.cmd.Process.Kill()
	}
	v.mu.Unlock()
	<-v.done
}

// Running reports whether the VM is powered on.
func (v *VM) Running() bool {
	if v.done == nil {
		return false
	}
	select {
	case <-v.done:
		return false
	default:
		return true
	}
}

// WaitBoot waits until the helper answers from a boot other than notBootID ("" for
// any boot) and returns what that boot sees.
func (v *VM) WaitBoot(ctx context.Context, notBootID string, timeout time.Duration) (vmapi.Facts, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		f, err := v.Facts(ctx)
		if err == nil && f.BootID != notBootID {
			return f, nil
		}
		if err != nil {
			last = err
		} else {
			last = errors.New("the helper still answers from the previous boot")
		}
		if !v.Running() {
			return vmapi.Facts{}, fmt.Errorf("%s: qemu exited while waiting for a boot", v.Name)
		}
		select {
		case <-ctx.Done():
			return vmapi.Facts{}, fmt.Errorf("%s: no new boot within %s (last: %w)", v.Name, timeout, last)
		case <-time.After(2 * time.Second):
		}
	}
}

// requestTimeout bounds one request to the helper: it answers at once or the VM
// is not up.
const requestTimeout = 30 * time.Second

// Facts asks the helper what the VM booted.
func (v *VM) Facts(ctx context.Context) (vmapi.Facts, error) {
	var f vmapi.Facts
	return f, v.do(ctx, requestTimeout, http.MethodGet, "/facts", nil, &f)
}

// ConfigureAgent gives the VM's agent its credentials and node name (the node's
// bootstrap) and starts it.
func (v *VM) ConfigureAgent(ctx context.Context, c vmapi.AgentConfig) error {
	return v.do(ctx, requestTimeout, http.MethodPost, "/agent", c, &struct{}{})
}

// Journal reads the agent's journal in the VM.
func (v *VM) Journal(ctx context.Context) (lanekit.Journal, error) {
	var raw json.RawMessage
	if err := v.do(ctx, requestTimeout, http.MethodGet, "/journal", nil, &raw); err != nil {
		return lanekit.Journal{}, err
	}
	return lanekit.ParseJournal(raw)
}

// AgentLog returns the agent's log of the current boot.
func (v *VM) AgentLog(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(v.port)+"/agent/log", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 16<<20))
}

// Reboot asks the VM for an orderly reboot (systemctl reboot).
func (v *VM) Reboot(ctx context.Context) error {
	return v.do(ctx, requestTimeout, http.MethodPost, "/reboot", struct{}{}, &struct{}{})
}

func (v *VM) do(ctx context.Context, timeout time.Duration, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://127.0.0.1:"+strconv.Itoa(v.port)+path, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	return json.Unmarshal(data, out)
}
