package nodeplan

import (
	"errors"
	"testing"
)

// FuzzRenderTemplate: a file template is tenant input rendered inside the extension.
// Any text renders to at most maxFileBytes or fails with an error (ErrTooLarge when
// a limit stopped it); nothing panics, and the fuzzer's own time-out catches a
// render that does not stop. Seeds: testdata/fuzz/FuzzRenderTemplate (the cases of
// TestRenderingIsBounded).
func FuzzRenderTemplate(f *testing.F) {
	f.Fuzz(func(t *testing.T, text string) {
		out, err := renderTemplate("/etc/fuzz", text, "v1.36.0")
		if err != nil {
			if errors.Is(err, ErrTooLarge) && out != "" {
				t.Fatalf("refused render returned output")
			}
			return
		}
		if len(out) > maxFileBytes {
			t.Fatalf("rendered %d bytes, more than %d", len(out), maxFileBytes)
		}
	})
}
