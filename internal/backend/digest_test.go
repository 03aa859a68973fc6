package backend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestVerifyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "image")
	if err := os.WriteFile(p, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// sha256sum of "hello\n".
	const good = "sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
	tests := []struct {
		name    string
		path    string
		digest  string
		refused bool
	}{
		{name: "matching digest", path: p, digest: good},
		{name: "other digest", path: p, digest: "sha256:" + strings.Repeat("0", 64), refused: true},
		{name: "malformed digest", path: p, digest: "sha256:ABC", refused: true},
		{name: "missing file", path: filepath.Join(dir, "nope"), digest: good, refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := VerifyFile(tt.path, Artifact{Ref: tt.path, Digest: tt.digest})
			if tt.refused {
				g.Expect(err).To(MatchError(ErrArtifactRefused))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
}

func TestCommandErrorFallsBackToStdout(t *testing.T) {
	g := NewWithT(t)
	e := &CommandError{Command: Command{Name: "swupdate", Args: []string{"-i", "x"}}, Result: Result{Stdout: []byte("[ERROR] : SWUPDATE failed\n")}, Err: os.ErrInvalid}
	g.Expect(e.Error()).To(ContainSubstring("SWUPDATE failed"))
	e.Result.Stderr = []byte("real stderr")
	g.Expect(e.Error()).To(ContainSubstring("real stderr"))
	g.Expect(e.Error()).NotTo(ContainSubstring("SWUPDATE failed"))
}
