package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/backend/ostree"
)

const fullConfig = `{
  "ostree": {"osName": "fedora-coreos"},
  "bootc": {"enforceSigPolicy": true},
  "rauc": {"conf": "/etc/rauc/system.conf"},
  "swupdate": {"slots": [
    {"name": "A", "device": "/dev/mmcblk0p2", "selection": "stable,copy1"},
    {"name": "B", "device": "/dev/mmcblk0p3", "selection": "stable,copy2"}
  ], "publicKey": "/etc/swupdate/cert.pem"},
  "mender": {"client": "mender-update"},
  "packages": {},
  "script": {"path": "/usr/local/bin/os-update", "capabilities": {"needsReboot": true, "supportsRollback": true}}
}`

func hostWith(t *testing.T, config string) string {
	t.Helper()
	root := t.TempDir()
	p := filepath.Join(root, ConfigPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name        string
		config      string
		noFile      bool
		wantNames   []string
		unavailable map[string]string
		wantErr     bool
	}{
		{name: "no file: no configured backends", noFile: true, wantNames: []string{}},
		{name: "every backend", config: fullConfig, wantNames: []string{"bootc", "mender", "ostree", "packages", "rauc", "script", "swupdate"}},
		{name: "misconfigured backends stay visible with their error", config: `{
			"swupdate": {"slots": [{"name": "A", "device": "/dev/a", "selection": "s,c"}]},
			"script": {"path": "os-update"},
			"packages": {"manager": "zypper"}}`,
			wantNames:   []string{"packages", "script", "swupdate"},
			unavailable: map[string]string{"swupdate": "exactly 2 slots", "script": "must be absolute", "packages": "zypper"}},
		{name: "malformed file", config: `{"ostree": `, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root := t.TempDir()
			if !tt.noFile {
				root = hostWith(t, tt.config)
			}
			r := (&backendtest.Runner{}).On("apt-get --version", "apt 2.6.1 (amd64)\n", nil)
			read := func(p string) ([]byte, error) { return os.ReadFile(filepath.Join(root, p)) }
			bs, err := Load(context.Background(), Env{HostRoot: root, Runner: r}, read)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			names := []string{}
			for n, b := range bs {
				g.Expect(b.Name()).To(Equal(n))
				names = append(names, n)
			}
			g.Expect(names).To(ConsistOf(tt.wantNames))
			for n, msg := range tt.unavailable {
				g.Expect(bs[n]).To(BeAssignableToTypeOf(Unavailable{}))
				err := bs[n].Stage(context.Background(), backend.Artifact{})
				g.Expect(err).To(MatchError(ContainSubstring(msg)))
				g.Expect(err).To(MatchError(ContainSubstring(ConfigPath)))
			}
			for n, b := range bs {
				if _, bad := tt.unavailable[n]; !bad {
					g.Expect(b).NotTo(BeAssignableToTypeOf(Unavailable{}), n)
				}
			}
		})
	}
}

func TestBuildDetectsRPMOSTree(t *testing.T) {
	g := NewWithT(t)
	r := (&backendtest.Runner{}).On("rpm-ostree --version", "rpm-ostree:\n Version: '2025.8'\n", nil)
	bs := Build(context.Background(), Config{OSTree: &OSTreeConfig{}, StateDir: "/var/lib/x"}, Env{HostRoot: "/host", Runner: r})
	g.Expect(bs[ostree.Name]).NotTo(BeAssignableToTypeOf(Unavailable{}), "rpm-ostree needs no os name")
	g.Expect(bs[ostree.Name].Capabilities().NeedsReboot).To(BeTrue())

	bs = Build(context.Background(), Config{OSTree: &OSTreeConfig{}}, Env{HostRoot: "/host", Runner: &backendtest.Runner{}})
	g.Expect(bs[ostree.Name]).To(BeAssignableToTypeOf(Unavailable{}), "plain ostree needs the stateroot")
}

// TestBuildStateDirectoryRefused: a backend whose state directory cannot be had
// inside the host root is unavailable, with the reason; the others build.
func TestBuildStateDirectoryRefused(t *testing.T) {
	g := NewWithT(t)
	refused := errors.New("it is not a real directory")
	pin := func(dir string) (string, error) {
		if dir == DefaultStateDir+"/rauc" {
			return "", refused
		}
		return t.TempDir(), nil
	}
	bs := Build(context.Background(), Config{RAUC: &RAUCConfig{}, Packages: &PackagesConfig{Manager: "apt"}},
		Env{HostRoot: "/host", Runner: &backendtest.Runner{}, PinDir: pin})
	g.Expect(bs["rauc"]).To(BeAssignableToTypeOf(Unavailable{}))
	err := bs["rauc"].Stage(context.Background(), backend.Artifact{})
	g.Expect(err).To(MatchError(refused))
	g.Expect(err).To(MatchError(ContainSubstring(DefaultStateDir + "/rauc")))
	g.Expect(bs["packages"]).NotTo(BeAssignableToTypeOf(Unavailable{}))
}
