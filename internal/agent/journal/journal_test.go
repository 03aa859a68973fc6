package journal

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestJournals(t *testing.T) {
	file := func(t *testing.T) Journal {
		j, err := NewFile(filepath.Join(t.TempDir(), "state"))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	tests := []struct {
		name string
		new  func(t *testing.T) Journal
	}{
		{"file", file},
		{"memory", func(*testing.T) Journal { return &Memory{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			j := tt.new(t)
			e, err := j.Load()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(e).To(Equal(Entry{}))

			e.Reset("h1", json.RawMessage(`{"a":1}`))
			e.Begin("gates")
			g.Expect(j.Save(e)).To(Succeed())
			got, err := j.Load()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.InFlight).To(Equal("gates"))
			g.Expect(got.Runs).To(Equal(map[string]int{"gates": 1}))
			g.Expect(got.Seq).To(Equal(uint64(1)))

			got.Finish()
			got.Begin("gates")
			g.Expect(j.Save(got)).To(Succeed())
			got, _ = j.Load()
			g.Expect(got.Runs["gates"]).To(Equal(2))

			got.Committed = json.RawMessage(`{"c":1}`)
			got.Reset("h2", nil)
			g.Expect(string(got.Committed)).To(Equal(`{"c":1}`), "the last committed plan survives a reset")
			g.Expect(got.Runs).To(BeEmpty())
			g.Expect(got.Key).To(Equal("h2"))
			g.Expect(got.Seq).To(Equal(uint64(2)), "sequence survives a reset")
		})
	}
}

func TestFileIsReplacedAtomically(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	j, err := NewFile(dir)
	g.Expect(err).NotTo(HaveOccurred())
	for i := 0; i < 5; i++ {
		g.Expect(j.Save(Entry{Key: "h"})).To(Succeed())
	}
	files, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(files).To(HaveLen(1), "no temporary files are left behind")
	info, err := os.Stat(j.Path())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
}

func TestCorruptFile(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "journal.json"), []byte(`{"key":`), 0o600)).To(Succeed())
	j, err := NewFile(dir)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = j.Load()
	g.Expect(err).To(MatchError(ErrCorrupt))
}
