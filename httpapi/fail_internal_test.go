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
