package rauc

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

const imgSum = "91f4b70a48a2a118b63925274bb8029f91f8f290eda3ca9d35615bf48a85ff76"

func testdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseRecordedOutputs(t *testing.T) {
	g := NewWithT(t)
	st, err := parseStatus(testdata(t, "status-installed-b.json"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Booted).To(Equal("A"))
	g.Expect(st.BootPrimary).To(Equal("rootfs.1"))
	g.Expect(st.Slots).To(HaveLen(2))
	g.Expect(st.Slots[0].Name).To(Equal("rootfs.0"))
	g.Expect(st.Slots[1].SlotStatus.Checksum.SHA256).To(Equal(imgSum))

	imgs, err := parseInfo(testdata(t, "info.json"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(imgs).To(Equal(Images{"rootfs": imgSum}))

	booted, ok := st.booted()
	g.Expect(ok).To(BeTrue())
	g.Expect(booted.Name).To(Equal("rootfs.0"))
	g.Expect(booted.holds(imgs)).To(BeFalse())
	holder, ok := st.holder(imgs)
	g.Expect(ok).To(BeTrue())
	g.Expect(holder.Name).To(Equal("rootfs.1"))
	prev, ok := st.previous()
	g.Expect(ok).To(BeTrue())
	g.Expect(prev.Name).To(Equal("rootfs.1"))

	_, err = parseInfo([]byte(`{"images":[]}`))
	g.Expect(err).To(HaveOccurred())
}

func TestActivateInstalledFromConf(t *testing.T) {
	tests := []struct {
		name string
		conf string
		want bool
	}{
		{name: "default", conf: "[system]\ncompatible=x\n", want: true},
		{name: "disabled", conf: "[system]\nactivate-installed = false\n", want: false},
		{name: "other section ignored", conf: "[system]\n[slot.rootfs.0]\nactivate-installed=false\n", want: true},
		{name: "explicit true", conf: "[system]\nactivate-installed=true\n", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(activateInstalled(tt.conf)).To(Equal(tt.want))
		})
	}
}

// When rauc info cannot verify the signature, nothing else runs.
func TestRecordedSignatureFailureRefuses(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	bundle := filepath.Join(dir, "b.raucb")
	if err := os.WriteFile(bundle, []byte("bundle"), 0o644); err != nil {
		t.Fatal(err)
	}
	digest, err := backend.FileDigest(bundle)
	g.Expect(err).NotTo(HaveOccurred())
	r := (&backendtest.Runner{}).On("rauc info", "", errors.New("Failed to verify bundle: signature verification failed: CMS_verify"))
	b, err := New(Options{Runner: r, StateDir: dir, Conf: filepath.Join(dir, "none.conf")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Stage(context.Background(), backend.Artifact{Ref: bundle, Digest: digest})).To(MatchError(backend.ErrArtifactRefused))
	g.Expect(r.Calls()).To(HaveLen(1))

	_, err = New(Options{Runner: r, StateDir: "relative"})
	g.Expect(err).To(HaveOccurred())
	_, err = New(Options{StateDir: dir})
	g.Expect(err).To(HaveOccurred())
}
