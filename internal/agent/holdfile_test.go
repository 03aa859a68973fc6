package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent"
)

// TestHoldFile: the record round-trips; a missing file is no hold; a file that
// is not a record, or is too large, is an error (the hold then counts from now).
func TestHoldFile(t *testing.T) {
	g := NewWithT(t)
	f := agent.HoldFile{Path: filepath.Join(t.TempDir(), agent.HoldFileName)}
	_, _, ok, err := f.LoadHold()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeFalse())

	since := time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC)
	g.Expect(f.SaveHold("abc", since)).To(Succeed())
	plan, got, ok, err := f.LoadHold()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(plan).To(Equal("abc"))
	g.Expect(got.Equal(since)).To(BeTrue())
	info, err := os.Stat(f.Path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))

	g.Expect(f.ClearHold()).To(Succeed())
	g.Expect(f.ClearHold()).To(Succeed(), "clearing twice is no error")
	_, _, ok, err = f.LoadHold()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeFalse())

	for _, bad := range []string{"{", `{"plan":""}`, `{"plan":"abc"}`, strings.Repeat(" ", 5000) + `{"plan":"abc","since":"2026-12-07T07:00:00Z"}`} {
		g.Expect(os.WriteFile(f.Path, []byte(bad), 0o600)).To(Succeed())
		_, _, ok, err := f.LoadHold()
		g.Expect(err).To(HaveOccurred(), "%.20q", bad)
		g.Expect(ok).To(BeFalse())
	}
}
