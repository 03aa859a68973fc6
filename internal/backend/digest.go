package backend

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// FileDigest returns the "sha256:<hex>" digest of a file's content.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return protocol.DigestFromSum(h.Sum(nil)), nil
}

// VerifyFile checks that the file at path is the artifact: its sha256 must equal
// a.Digest. A mismatch, a malformed digest or a missing file wraps
// ErrArtifactRefused, because nothing may change on the strength of it.
func VerifyFile(path string, a Artifact) error {
	if _, err := a.DigestHex(); err != nil {
		return err
	}
	got, err := FileDigest(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrArtifactRefused, err)
	}
	if got != a.Digest {
		return fmt.Errorf("%w: %s has digest %s, want %s", ErrArtifactRefused, path, got, a.Digest)
	}
	return nil
}
