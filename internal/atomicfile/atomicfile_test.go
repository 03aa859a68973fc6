package atomicfile

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name     string
		existing string
		perm     os.FileMode
	}{
		{name: "new file in a missing directory", perm: 0o600},
		{name: "replaces existing content and mode", existing: "old content that is longer", perm: 0o644},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := filepath.Join(t.TempDir(), "a", "b")
			path := filepath.Join(dir, "f")
			if tt.existing != "" {
				g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
				g.Expect(os.WriteFile(path, []byte(tt.existing), 0o600)).To(Succeed())
			}
			g.Expect(Write(path, []byte("new"), tt.perm)).To(Succeed())
			got, err := os.ReadFile(path)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal("new"))
			fi, err := os.Stat(path)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fi.Mode().Perm()).To(Equal(tt.perm))
			entries, err := os.ReadDir(dir)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(entries).To(HaveLen(1), "no temporary file left behind")
		})
	}
}

func TestWriteFailureLeavesTheOldFile(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	g.Expect(os.WriteFile(path, []byte("old"), 0o600)).To(Succeed())
	// A directory where the file should go: the rename fails after the temp file
	// was written, and the temp file must be removed.
	target := filepath.Join(dir, "d")
	g.Expect(os.MkdirAll(filepath.Join(target, "x"), 0o755)).To(Succeed())
	g.Expect(Write(target, []byte("new"), 0o600)).To(MatchError(ContainSubstring("rename into")))
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(2), "only f and d: the temporary file was removed")
}
