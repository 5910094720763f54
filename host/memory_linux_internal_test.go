//go:build linux

package host

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// A mapped memory is reset through its base image's file: the first
// reset maps the file over it, later ones copy the image back into just
// the pages the kernel reports as the memory's own, and the memory reads
// as the image after each. A memory of another size is left to the
// comparing reset.
func TestResetThroughBaseFile(t *testing.T) {
	ps := unix.Getpagesize()
	const pages = 16
	image := make([]byte, pages*ps)
	for i := range image {
		image[i] = byte(i*7 + i/ps)
	}
	f := newBaseFile(image)
	if f == nil {
		t.Fatal("newBaseFile: no memory file")
	}
	var hit atomic.Bool
	gm := newGuestMemory(uint64(len(image)), 1<<20, &hit)
	m, ok := gm.(*mappedMemory)
	if !ok {
		t.Fatalf("guest memory is %T, want a mapping", gm)
	}
	defer m.Free()
	mem := m.Reallocate(uint64(len(image)))
	for i := range mem {
		mem[i] = 0xA5 // an instance's own state, nothing like the image
	}
	if _, ok := ownChunks(gm, f); ok {
		t.Fatal("ownChunks answered before the file was mapped")
	}

	if !resetMapped(gm, f, image) {
		t.Fatal("first reset refused")
	}
	if !bytes.Equal(mem, image) {
		t.Fatal("memory is not the image after the first reset")
	}
	if own, err := m.ownPages(); err != nil || len(own) != 0 {
		t.Fatalf("own pages right after mapping: %v, %v; want none", own, err)
	}

	mem[1*ps+3] ^= 0xFF
	mem[5*ps] ^= 0xFF
	_ = mem[9*ps] // read only: still the file's
	got, ok := ownChunks(gm, f)
	if !ok || !slices.Equal(got, []uint32{1, 5}) {
		t.Fatalf("ownChunks = %v, %v; want [1 5]", got, ok)
	}
	if !resetMapped(gm, f, image) || !bytes.Equal(mem, image) {
		t.Fatal("memory is not the image after a copying reset")
	}
	// The written pages stay the memory's own, so a run writing them again
	// does not fault; they are the ones compared and copied.
	if got, _ := ownChunks(gm, f); !slices.Equal(got, []uint32{1, 5}) {
		t.Fatalf("own pages after the copying reset: %v, want [1 5]", got)
	}

	other := make([]byte, len(image)+ps)
	if resetMapped(gm, newBaseFile(other), other) {
		t.Fatal("reset against an image of another size")
	}
	m.Reallocate(uint64(len(image) + ps))
	if resetMapped(gm, f, image) {
		t.Fatal("reset of a memory grown past the image")
	}
}

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
	if base.file == nil {
		t.Fatal("the base image has no memory file")
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	mapped := 0
	for _, f := range lp.fresh {
		wz, ok := f.inst.(*wzInstance)
		if !ok {
			t.Fatalf("pooled instance is %T", f.inst)
		}
		if m, ok := wz.gmem.(*mappedMemory); ok && m.based == base.file {
			mapped++
			if _, ok := wz.ownChunks(base); !ok {
				t.Error("a mapped instance cannot list its own pages")
			}
		}
	}
	if mapped == 0 {
		t.Fatalf("none of %d pooled instances is mapped over the base image file", len(lp.fresh))
	}
}
