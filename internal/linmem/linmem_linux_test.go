//go:build linux

package linmem

import (
	"bytes"
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
	f := NewFile(image)
	if f == nil {
		t.Fatal("NewFile: no memory file")
	}
	var hit atomic.Bool
	gm := New(uint64(len(image)), 1<<20, &hit)
	m, ok := gm.(*mappedMemory)
	if !ok {
		t.Fatalf("guest memory is %T, want a mapping", gm)
	}
	defer m.Free()
	mem := m.Reallocate(uint64(len(image)))
	for i := range mem {
		mem[i] = 0xA5 // an instance's own state, nothing like the image
	}
	if _, ok := OwnChunks(gm, f, ps); ok {
		t.Fatal("OwnChunks answered before the file was mapped")
	}

	if !Reset(gm, f, image) {
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
	got, ok := OwnChunks(gm, f, ps)
	if !ok || !slices.Equal(got, []uint32{1, 5}) {
		t.Fatalf("OwnChunks = %v, %v; want [1 5]", got, ok)
	}
	if !Reset(gm, f, image) || !bytes.Equal(mem, image) {
		t.Fatal("memory is not the image after a copying reset")
	}
	// The written pages stay the memory's own, so a run writing them again
	// does not fault; they are the ones compared and copied.
	if got, _ := OwnChunks(gm, f, ps); !slices.Equal(got, []uint32{1, 5}) {
		t.Fatalf("own pages after the copying reset: %v, want [1 5]", got)
	}

	other := make([]byte, len(image)+ps)
	if Reset(gm, NewFile(other), other) {
		t.Fatal("reset against an image of another size")
	}
	m.Reallocate(uint64(len(image) + ps))
	if Reset(gm, f, image) {
		t.Fatal("reset of a memory grown past the image")
	}
}
