package host

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/internal/linmem"
	"github.com/sandflow/sandflow/store"
)

// Every mapped guest memory is unmapped once its host closes: instances
// that completed, suspended, were parked, pooled or reused.
func TestGuestMemoryUnmapped(t *testing.T) {
	start := linmem.Mapped()
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "db"), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := Open(ctx, st, &Options{PreInit: 2, MaxWarm: 2})
	if err != nil {
		t.Fatal(err)
	}
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	wasm := guestbuild.MustRead(filepath.Join(root, "host/testdata/guests/kitchen"))
	m := Manifest{Name: "kitchen", Entry: EntryExecute, InputSchema: json.RawMessage(`{"type":"object"}`)}
	if _, err := h.AddPlugin(ctx, wasm, m); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{`{"mode":"steps","n":3}`, `{"mode":"steps","n":0}`, `{"mode":"determinism","ms":60000}`,
		`{"mode":"determinism","ms":60000}`, `{"mode":"determinism","ms":60000}`, `{"mode":"steps","n":1}`} {
		if _, err := h.Call(ctx, "kitchen", json.RawMessage(in), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.WaitPreInit(ctx); err != nil {
		t.Fatal(err)
	}
	// The last run parked its instance at its step, evicting one.
	if n, _ := h.Parked(); n != 1 {
		t.Errorf("%d parked, want 1", n)
	}
	if mapped := linmem.Mapped() - start; mapped <= 0 {
		t.Errorf("%d bytes mapped with instances parked and pooled", mapped)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := linmem.Mapped() - start; left != 0 {
		t.Errorf("%d bytes of guest memory still mapped after the host closed", left)
	}
}
