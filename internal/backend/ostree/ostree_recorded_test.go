package ostree

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

// Checksums used by the recorded outputs in testdata/.
const (
	newCsum  = "5787514c78ce5b8bfa18727e01c722ccf58f035693b0e6aa4bfa6399474414c1"
	oldCsum  = "d9dc0946517c2ec2982705770b0d8f5950630ae8872ac5ea2197089722fc0ae7"
	oldest   = "1b9ff2d0e9f4c0a6d7b4e4fd8ed7ea0d2b24ee7b7b1f0f0c3c8f26e8f7e1a2b3"
	statusOS = "ostree admin status --sysroot=/"
)

func testdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseAdminStatus(t *testing.T) {
	tests := []struct {
		name string
		file string
		want []Deployment
	}{
		{name: "pending update over a booted deployment", file: "admin-status-booted.txt", want: []Deployment{
			{OS: "fedora-coreos", Checksum: newCsum, Serial: "0", Pending: true},
			{OS: "fedora-coreos", Checksum: oldCsum, Serial: "0", Booted: true},
			{OS: "fedora-coreos", Checksum: oldest, Serial: "0", Rollback: true},
		}},
		{name: "booted into the update", file: "admin-status-new-booted.txt", want: []Deployment{
			{OS: "fedora-coreos", Checksum: newCsum, Serial: "0", Booted: true},
			{OS: "fedora-coreos", Checksum: oldCsum, Serial: "0", Rollback: true},
		}},
		{name: "unbooted sysroot, recorded from ostree 2022.7", file: "admin-status-unbooted.txt", want: []Deployment{
			{OS: "testos", Checksum: newCsum, Serial: "0"},
			{OS: "testos", Checksum: oldCsum, Serial: "0"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ds, err := parseAdminStatus(testdata(t, tt.file))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ds).To(Equal(tt.want))
		})
	}
	g := NewWithT(t)
	ds, err := parseAdminStatus("No deployments.\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ds).To(BeEmpty())
	_, err = parseAdminStatus("* garbage\n")
	g.Expect(err).To(HaveOccurred())
}

func TestDecideRollback(t *testing.T) {
	tests := []struct {
		name    string
		ds      []Deployment
		want    rollbackAction
		wantErr bool
	}{
		{name: "nothing deployed", want: rollbackNone},
		{name: "artifact pending over booted old", ds: []Deployment{{Checksum: newCsum}, {Checksum: oldCsum, Booted: true}}, want: rollbackDropPending},
		{name: "artifact deployed in an unbooted sysroot", ds: []Deployment{{Checksum: newCsum}, {Checksum: oldCsum}}, want: rollbackDropPending},
		{name: "artifact booted", ds: []Deployment{{Checksum: newCsum, Booted: true}, {Checksum: oldCsum}}, want: rollbackToPrevious},
		{name: "already rolled back after boot", ds: []Deployment{{Checksum: oldCsum}, {Checksum: newCsum, Booted: true}}, want: rollbackNone},
		{name: "booted artifact without previous", ds: []Deployment{{Checksum: newCsum, Booted: true}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := decideRollback(summarize(tt.ds), newCsum)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func recorded(t *testing.T, flavor Flavor) (*Backend, *backendtest.Runner) {
	t.Helper()
	r := &backendtest.Runner{}
	b, err := New(Options{Runner: r, OSName: "fedora-coreos", Flavor: flavor})
	if err != nil {
		t.Fatal(err)
	}
	return b, r
}

var newArtifact = backend.Artifact{Ref: "fedora:fedora/x86_64/coreos/stable", Digest: "sha256:" + newCsum}

// On a booted host (recorded status): Verify passes once the update is booted and
// fails while the old one runs; Rollback after boot deploys the previous commit again.
func TestRecordedOSTreeBootedHost(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	b, r := recorded(t, FlavorOSTree)
	r.On("ostree --repo=/ostree/repo pull fedora fedora/x86_64/coreos/stable@"+newCsum, "", nil)
	r.On("ostree --repo=/ostree/repo refs --force --create="+StagingRef+" "+newCsum, "", nil)
	g.Expect(b.Stage(ctx, newArtifact)).To(Succeed())

	r.On(statusOS, testdata(t, "admin-status-booted.txt"), nil)
	g.Expect(b.Activate(ctx, newArtifact)).To(Succeed(), "already the default: no deploy")
	err := b.Verify(ctx, newArtifact)
	g.Expect(err).To(MatchError(backend.ErrVerifyFailed))
	g.Expect(err.Error()).To(ContainSubstring("booted commit is " + oldCsum))

	r.On(statusOS, testdata(t, "admin-status-new-booted.txt"), nil)
	g.Expect(b.Verify(ctx, newArtifact)).To(Succeed())
	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(backend.Status{Booted: newCsum, Rollback: oldCsum}))

	r.On("ostree admin deploy --sysroot=/ --os=fedora-coreos --retain "+oldCsum, "", nil)
	r.On("ostree --repo=/ostree/repo refs --delete "+StagingRef, "", nil)
	g.Expect(b.Rollback(ctx, newArtifact)).To(Succeed())
	g.Expect(r.Calls()).To(ContainElement("ostree admin deploy --sysroot=/ --os=fedora-coreos --retain " + oldCsum))
	g.Expect(r.Calls()).NotTo(ContainElement(HavePrefix("ostree admin undeploy")), "the booted deployment is never undeployed")
}

func TestRecordedOSTreeRemotePullRefused(t *testing.T) {
	g := NewWithT(t)
	b, r := recorded(t, FlavorOSTree)
	r.On("ostree --repo=/ostree/repo pull", "", errors.New("error: Commit "+newCsum+": Corrupted commit object; checksum expected='"+newCsum+"' actual='00'"))
	g.Expect(b.Stage(context.Background(), newArtifact)).To(MatchError(backend.ErrArtifactRefused))
	g.Expect(r.Calls()).To(HaveLen(1), "no ref is created and nothing deployed after a refused pull")

	r.On("ostree --repo=/ostree/repo pull", "", errors.New("error: While fetching mirrorlist: Timeout was reached"))
	err := b.Stage(context.Background(), newArtifact)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err).NotTo(MatchError(backend.ErrArtifactRefused), "a network error is retried, not terminal")

	// ostree 2022.7's answer when the sysroot repository has no such remote.
	r.On("ostree --repo=/ostree/repo pull", "", errors.New(`error: Remote "lane" not found`))
	err = b.Stage(context.Background(), newArtifact)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err).NotTo(MatchError(backend.ErrArtifactRefused), "a missing remote is the host's configuration, retried, not terminal")
}

// rpm-ostree flavor: recorded `rpm-ostree status --json` of a booted host.
func TestRecordedRPMOSTree(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	b, r := recorded(t, FlavorRPMOSTree)
	r.On("rpm-ostree rebase --download-only fedora:fedora/x86_64/coreos/stable "+newCsum, "", nil)
	g.Expect(b.Stage(ctx, newArtifact)).To(Succeed())

	r.On("rpm-ostree status --json", testdata(t, "rpm-ostree-status-old-only.json"), nil)
	r.On("rpm-ostree rebase fedora:fedora/x86_64/coreos/stable "+newCsum, "", nil)
	g.Expect(b.Activate(ctx, newArtifact)).To(Succeed())
	g.Expect(r.Calls()).To(ContainElement("rpm-ostree rebase fedora:fedora/x86_64/coreos/stable " + newCsum))

	r.On("rpm-ostree status --json", testdata(t, "rpm-ostree-status-pending.json"), nil)
	g.Expect(b.Verify(ctx, newArtifact)).To(MatchError(backend.ErrVerifyFailed))
	r.On("rpm-ostree cleanup --pending", "", nil)
	g.Expect(b.Rollback(ctx, newArtifact)).To(Succeed())
	g.Expect(r.Calls()).To(ContainElement("rpm-ostree cleanup --pending"))

	r.On("rpm-ostree status --json", testdata(t, "rpm-ostree-status-new-booted.json"), nil)
	g.Expect(b.Verify(ctx, newArtifact)).To(Succeed())
	g.Expect(b.Commit(ctx, newArtifact)).To(Succeed())
	r.On("rpm-ostree rollback", "", nil)
	g.Expect(b.Rollback(ctx, newArtifact)).To(Succeed())
	g.Expect(r.Calls()).To(ContainElement("rpm-ostree rollback"))

	g.Expect(b.Stage(ctx, backend.Artifact{Ref: "/srv/repo:x", Digest: newArtifact.Digest})).To(MatchError(backend.ErrArtifactRefused))
}

func TestDetectFlavorAndOptions(t *testing.T) {
	g := NewWithT(t)
	r := &backendtest.Runner{}
	g.Expect(DetectFlavor(context.Background(), r, "")).To(Equal(FlavorOSTree))
	r.On("rpm-ostree --version", "rpm-ostree:\n Version: '2025.8'\n", nil)
	g.Expect(DetectFlavor(context.Background(), r, "")).To(Equal(FlavorRPMOSTree))

	_, err := New(Options{Runner: r})
	g.Expect(err).To(MatchError(ContainSubstring("os name")))
	_, err = New(Options{Runner: r, OSName: "x", Sysroot: "relative"})
	g.Expect(err).To(HaveOccurred())
	_, err = New(Options{Runner: r, Flavor: FlavorRPMOSTree, Sysroot: "/mnt/sysroot"})
	g.Expect(err).To(HaveOccurred())
	_, err = New(Options{OSName: "x"})
	g.Expect(err).To(HaveOccurred())
}
