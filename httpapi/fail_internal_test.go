package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandflow/sandflow/store"
)

// Damage the store found is answered as such (500 store_corrupt, naming
// where), not as a missing record or a generic internal error.
func TestCorruptStoreIsReportedAsSuch(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/v1/runs/r1", nil)
	err := fmt.Errorf("reading run r1: %w", &store.CorruptError{Bucket: "runs", Key: []byte("r1"), Offset: -1, What: "checksum mismatch"})
	s.fail(w, r, err)
	if w.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", w.Code)
	}
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body.Error.Code != "store_corrupt" {
		t.Fatalf("code %q, want store_corrupt (%s)", body.Error.Code, w.Body)
	}
}

// A lost or held lease (several hosts on one store) is 503 with
// Retry-After: the call may be made again.
func TestLeaseErrorsAreRetryable(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for err, code := range map[error]string{
		fmt.Errorf("answering: %w", store.ErrLeaseLost): "lease_lost",
		fmt.Errorf("answering: %w", store.ErrLeaseHeld): "lease_held",
	} {
		w := httptest.NewRecorder()
		s.fail(w, httptest.NewRequest("POST", "/v1/asks/a1/answer", nil), err)
		var body struct {
			Error struct{ Code string }
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if w.Code != http.StatusServiceUnavailable || body.Error.Code != code || w.Header().Get("Retry-After") == "" {
			t.Errorf("%v: status %d, code %q, Retry-After %q; want 503 %s with Retry-After", err, w.Code, body.Error.Code, w.Header().Get("Retry-After"), code)
		}
	}
}
