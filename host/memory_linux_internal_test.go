//go:build linux

package host

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sandflow/sandflow/host/engine"
)

// A host reuses a Go guest's instances through the plugin's base image
// file: once a finished instance has been reset, the pooled instance's
// memory is the file's mapping, and a snapshot of it compares only its
// own pages.
func TestReuseMapsBaseFile(t *testing.T) {
	h, lp := benchHost(t, &Options{PreInit: 2})
	ctx := context.Background()
	for range 6 {
		if _, err := h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"steps","n":0}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.WaitPreInit(ctx); err != nil {
		t.Fatal(err)
	}
	if st := h.InstanceStats(); st.Reused == 0 {
		t.Fatalf("no instance reused: %+v", st)
	}
	base, err := h.base(ctx, lp)
	if err != nil {
		t.Fatal(err)
	}
	if !base.img.HasFile() {
		t.Fatal("the base image has no memory file")
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	mapped := 0
	for _, f := range lp.fresh {
		m, ok := f.inst.(engine.BaseMapped)
		if !ok {
			t.Fatalf("pooled instance is %T, not an engine.BaseMapped", f.inst)
		}
		// An instance lists its own pages only while its memory is mapped
		// over the image's file (internal/linmem's tests check the lists).
		if _, ok := m.OwnChunks(base.img); ok {
			mapped++
		}
	}
	if mapped == 0 {
		t.Fatalf("none of %d pooled instances is mapped over the base image file", len(lp.fresh))
	}
}
