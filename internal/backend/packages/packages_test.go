package packages

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

func TestParsePinsAndDigest(t *testing.T) {
	tests := []struct {
		name    string
		ref     string
		canon   string
		wantErr bool
	}{
		{name: "apt pins", ref: "kubelet=1.36.0-1.1, kubeadm=1.36.0-1.1,kubectl=1.36.0-1.1", canon: "kubeadm=1.36.0-1.1,kubectl=1.36.0-1.1,kubelet=1.36.0-1.1"},
		{name: "rpm pins with epoch-less release", ref: "kubeadm=1.36.0-150500.1.1", canon: "kubeadm=1.36.0-150500.1.1"},
		{name: "missing version", ref: "kubeadm", wantErr: true},
		{name: "shell metacharacters", ref: "kubeadm=1.36;rm -rf /", wantErr: true},
		{name: "pinned twice", ref: "kubeadm=1,kubeadm=2", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, err := ParsePins(tt.ref)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.String()).To(Equal(tt.canon))
			d1, _ := Digest(tt.ref)
			d2, _ := Digest(tt.canon)
			g.Expect(d1).To(Equal(d2), "the digest does not depend on order or spacing")
			g.Expect(d1).To(MatchRegexp(`^sha256:[0-9a-f]{64}$`))
		})
	}
}

func TestParseInstalled(t *testing.T) {
	g := NewWithT(t)
	// Recorded from dpkg-query on Debian 12 (the unmatched name goes to stderr).
	g.Expect(parseInstalled("cpio=2.13+dfsg-7.1\nostree=2022.7-2+deb12u1\n")).To(Equal(Pins{"cpio": "2.13+dfsg-7.1", "ostree": "2022.7-2+deb12u1"}))
	// rpm -q prints missing packages on stdout.
	g.Expect(parseInstalled("kubeadm=1.35.2-150500.1.1\npackage kubectl is not installed\n")).To(Equal(Pins{"kubeadm": "1.35.2-150500.1.1"}))
	g.Expect(matches(DNF, "1.36.0-150500.1.1", "1.36.0")).To(BeTrue())
	g.Expect(matches(APT, "1.36.0-1.1", "1.36.0")).To(BeFalse(), "apt pins are exact")
}

// fakeManager is a package manager with a repository and an installed set,
// answering in the formats recorded from dpkg-query/apt-get and rpm/dnf.
type fakeManager struct {
	m         Manager
	repo      map[string][]string
	installed Pins
	held      map[string]bool
	cache     Pins
	calls     []string
}

func (f *fakeManager) fail(c backend.Command, code int, stderr string) (backend.Result, error) {
	res := backend.Result{ExitCode: code, Stderr: []byte(stderr)}
	return res, &backend.CommandError{Command: c, Result: res, Err: fmt.Errorf("exit status %d", code)}
}

func (f *fakeManager) Run(_ context.Context, c backend.Command) (backend.Result, error) {
	f.calls = append(f.calls, c.String())
	var names, specs []string
	for _, a := range c.Args {
		if !strings.HasPrefix(a, "-") {
			names = append(names, a)
		}
	}
	switch c.Name {
	case "dpkg-query", "rpm":
		var out, missing strings.Builder
		for _, n := range names[0:] {
			if strings.HasPrefix(n, "%") {
				continue
			}
			if v, ok := f.installed[n]; ok {
				fmt.Fprintf(&out, "%s=%s\n", n, v)
			} else if c.Name == "rpm" {
				fmt.Fprintf(&out, "package %s is not installed\n", n)
				missing.WriteString(n)
			} else {
				fmt.Fprintf(&missing, "dpkg-query: no packages found matching %s\n", n)
			}
		}
		if missing.Len() > 0 {
			res := backend.Result{ExitCode: 1, Stdout: []byte(out.String()), Stderr: []byte(missing.String())}
			return res, &backend.CommandError{Command: c, Result: res, Err: errors.New("exit status 1")}
		}
		return backend.Result{Stdout: []byte(out.String())}, nil
	case "apt-mark":
		for _, n := range names[1:] {
			f.held[n] = true
		}
		return backend.Result{}, nil
	case "apt-get", "dnf":
		verb := names[0]
		specs = names[1:]
		want := Pins{}
		for _, s := range specs {
			sep := "="
			if c.Name == "dnf" {
				sep = "-"
			}
			n, v, _ := strings.Cut(s, sep)
			if verb == "remove" {
				delete(f.installed, s)
				continue
			}
			if !contains(f.repo[n], v) {
				if c.Name == "dnf" {
					return f.fail(c, 1, "No match for argument: "+s+"\nError: Unable to find a match: "+s)
				}
				return f.fail(c, 100, fmt.Sprintf("E: Version '%s' for '%s' was not found", v, n))
			}
			if f.held[n] && c.Name == "apt-get" && !strings.Contains(c.String(), "--allow-change-held-packages") {
				return f.fail(c, 100, "E: Held packages were changed and -y was used without --allow-change-held-packages.")
			}
			want[n] = v
		}
		if strings.Contains(c.String(), "download-only") || strings.Contains(c.String(), "--downloadonly") {
			for n, v := range want {
				f.cache[n] = v
			}
			return backend.Result{}, nil
		}
		for n, v := range want {
			f.installed[n] = v
		}
		return backend.Result{}, nil
	}
	return f.fail(c, 127, "not found")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func artifact(t *testing.T, ref string) backend.Artifact {
	t.Helper()
	d, err := Digest(ref)
	if err != nil {
		t.Fatal(err)
	}
	return backend.Artifact{Ref: ref, Digest: d}
}

type flavor struct {
	m       Manager
	oldV    string
	newV    string
	pinNewV string
}

var flavors = []flavor{
	{m: APT, oldV: "1.35.2-1.1", newV: "1.36.0-1.1", pinNewV: "1.36.0-1.1"},
	{m: DNF, oldV: "1.35.2-150500.1.1", newV: "1.36.0-150500.1.1", pinNewV: "1.36.0-150500.1.1"},
}

func setup(t *testing.T, fl flavor) (*fakeManager, *Backend, backend.Artifact) {
	t.Helper()
	f := &fakeManager{m: fl.m, held: map[string]bool{"kubeadm": true, "kubelet": true}, cache: Pins{},
		repo:      map[string][]string{"kubeadm": {fl.oldV, fl.newV}, "kubelet": {fl.oldV, fl.newV}, "kubectl": {fl.oldV, fl.newV}},
		installed: Pins{"kubeadm": fl.oldV, "kubelet": fl.oldV}}
	b, err := New(Options{Runner: f, Manager: fl.m, StateDir: filepath.Join(t.TempDir(), "state")})
	if err != nil {
		t.Fatal(err)
	}
	a := artifact(t, "kubeadm="+fl.pinNewV+",kubelet="+fl.pinNewV+",kubectl="+fl.pinNewV)
	return f, b, a
}

func TestStageActivateVerifyCommit(t *testing.T) {
	for _, fl := range flavors {
		t.Run(string(fl.m), func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			f, b, a := setup(t, fl)
			for range 2 {
				g.Expect(b.Stage(ctx, a)).To(Succeed())
			}
			g.Expect(f.installed).To(Equal(Pins{"kubeadm": fl.oldV, "kubelet": fl.oldV}), "stage installs nothing")
			g.Expect(f.cache).To(HaveLen(3))
			g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
			for range 2 {
				g.Expect(b.Activate(ctx, a)).To(Succeed())
			}
			g.Expect(f.installed).To(Equal(Pins{"kubeadm": fl.newV, "kubelet": fl.newV, "kubectl": fl.newV}))
			// Stage repeated after Activate (a crash replay) must not record the new versions as "previous".
			g.Expect(b.Stage(ctx, a)).To(Succeed())
			g.Expect(b.Verify(ctx, a)).To(Succeed())
			g.Expect(b.Commit(ctx, a)).To(Succeed())
			g.Expect(b.Rollback(ctx, a)).To(Succeed(), "after commit there is nothing recorded to roll back to")
			g.Expect(f.installed["kubeadm"]).To(Equal(fl.newV))
			if fl.m == APT {
				g.Expect(f.held).To(HaveKey("kubectl"))
			}
		})
	}
}

func TestFailedVerifyRollsBackToRecordedVersions(t *testing.T) {
	for _, fl := range flavors {
		t.Run(string(fl.m), func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			f, b, a := setup(t, fl)
			g.Expect(b.Stage(ctx, a)).To(Succeed())
			g.Expect(b.Activate(ctx, a)).To(Succeed())
			g.Expect(b.Stage(ctx, a)).To(Succeed()) // replay after a crash
			f.installed["kubelet"] = fl.oldV        // something downgraded kubelet behind our back
			g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
			for range 2 {
				g.Expect(b.Rollback(ctx, a)).To(Succeed())
			}
			g.Expect(f.installed).To(Equal(Pins{"kubeadm": fl.oldV, "kubelet": fl.oldV}), "kubectl was not installed before: removed")
		})
	}
}

func TestRefusesBeforeChanging(t *testing.T) {
	tests := []struct {
		name string
		art  func(t *testing.T, fl flavor) backend.Artifact
	}{
		{name: "version not in the repositories", art: func(t *testing.T, _ flavor) backend.Artifact {
			return artifact(t, "kubeadm=1.99.0-1.1,kubelet=1.99.0-1.1")
		}},
		{name: "digest of another pin set", art: func(t *testing.T, fl flavor) backend.Artifact {
			a := artifact(t, "kubeadm="+fl.pinNewV)
			a.Ref = "kubeadm=" + fl.oldV
			return a
		}},
		{name: "unparsable pins", art: func(_ *testing.T, _ flavor) backend.Artifact {
			return backend.Artifact{Ref: "kubeadm", Digest: "sha256:" + strings.Repeat("0", 64)}
		}},
	}
	for _, fl := range flavors {
		for _, tt := range tests {
			t.Run(string(fl.m)+"/"+tt.name, func(t *testing.T) {
				g := NewWithT(t)
				f, b, _ := setup(t, fl)
				g.Expect(b.Stage(context.Background(), tt.art(t, fl))).To(MatchError(backend.ErrArtifactRefused))
				g.Expect(f.installed).To(Equal(Pins{"kubeadm": fl.oldV, "kubelet": fl.oldV}))
				g.Expect(f.cache).To(BeEmpty())
			})
		}
	}
}

// The exact commands, checked against recorded answers.
func TestRecordedAPTCommands(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	r := &backendtest.Runner{}
	r.On("dpkg-query -W -f=${Package}=${Version}\\n kubeadm", "kubeadm=1.35.2-1.1\n", nil)
	r.On("apt-get update -q", "", nil)
	r.On("apt-get install -y -q --allow-downgrades --allow-change-held-packages --download-only kubeadm=1.36.0-1.1", "", nil)
	b, err := New(Options{Runner: r, Manager: APT, StateDir: t.TempDir(), RefreshIndex: true})
	g.Expect(err).NotTo(HaveOccurred())
	a := artifact(t, "kubeadm=1.36.0-1.1")
	g.Expect(b.Stage(ctx, a)).To(Succeed())
	g.Expect(r.Calls()).To(Equal([]string{
		"dpkg-query -W -f=${Package}=${Version}\\n kubeadm",
		"apt-get update -q",
		"apt-get install -y -q --allow-downgrades --allow-change-held-packages --download-only kubeadm=1.36.0-1.1",
	}))
	// Recorded from apt-get on Debian 12 for a package the repositories lack.
	r.On("apt-get install", "", errors.New("E: Unable to locate package kubeadm"))
	g.Expect(b.Stage(ctx, a)).To(MatchError(backend.ErrArtifactRefused))
	r.On("apt-get install", "", errors.New("E: Failed to fetch https://pkgs.k8s.io/core:/stable:/v1.36/deb/amd64/kubeadm_1.36.0-1.1_amd64.deb  Could not resolve 'pkgs.k8s.io'"))
	err = b.Stage(ctx, a)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err).NotTo(MatchError(backend.ErrArtifactRefused), "a network failure is retried")
}

func TestNewAndDetect(t *testing.T) {
	g := NewWithT(t)
	r := &backendtest.Runner{}
	_, err := New(Options{Runner: r, Manager: "zypper", StateDir: "/x"})
	g.Expect(err).To(HaveOccurred())
	_, err = New(Options{Runner: r, Manager: APT, StateDir: "x"})
	g.Expect(err).To(HaveOccurred())
	_, err = DetectManager(context.Background(), r)
	g.Expect(err).To(HaveOccurred())
	r.On("dnf --version", "4.14.0\n", nil)
	m, err := DetectManager(context.Background(), r)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(Equal(DNF))
	r.On("apt-get --version", "apt 2.6.1 (amd64)\n", nil)
	m, _ = DetectManager(context.Background(), r)
	g.Expect(m).To(Equal(APT))
}
