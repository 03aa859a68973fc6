package extension

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestReceiveBudgetIsGivenBack: whatever way a request ends (handled, too large,
// refused by the handler), the bytes it was charged while its body arrived are
// given back exactly once.
func TestReceiveBudgetIsGivenBack(t *testing.T) {
	l, err := newRequestLimits(0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := l.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if len(b) > 100<<10 {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	for _, size := range []int{0, 10, 100 << 10, 900 << 10, 2 << 20} {
		for _, declared := range []bool{true, false} {
			var body io.Reader = bytes.NewReader(make([]byte, size))
			if !declared {
				body = io.MultiReader(body)
			}
			req := httptest.NewRequest(http.MethodPost, "/", body)
			if !declared {
				req.ContentLength = -1
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			if l.receive.used != 0 || len(l.receive.held) != 0 {
				t.Fatalf("after a body of %d bytes (declared %t): %d bytes still charged, %v", size, declared, l.receive.used, l.receive.held)
			}
		}
	}
}
