package meter

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/internal/wasmbin"
)

// segment encodes an active segment of memory 0 at a constant offset.
func segment(off int32, init string) []byte {
	b := wasmbin.AppendSLEB([]byte{0x00, 0x41}, int64(off))
	b = append(b, 0x0b)
	b = wasmbin.AppendULEB(b, uint64(len(init)))
	return append(b, init...)
}

func dataBody(segs ...[]byte) []byte {
	b := wasmbin.AppendULEB(nil, uint64(len(segs)))
	for _, s := range segs {
		b = append(b, s...)
	}
	return b
}

// image is what instantiation writes from a data section of active
// segments: the bytes from 0 to the last segment's end.
func image(t *testing.T, body []byte) []byte {
	t.Helper()
	r := &wasmbin.Reader{B: body}
	n, err := r.U32()
	if err != nil {
		t.Fatal(err)
	}
	var img []byte
	for range n {
		flag, _ := r.U32()
		op, _ := r.Byte()
		off, ok := sleb32(r)
		end, _ := r.Byte()
		size, _ := r.U32()
		init, err := r.Bytes(int(size))
		if flag != 0 || op != 0x41 || !ok || end != 0x0b || err != nil {
			t.Fatalf("not an active segment at a constant offset: %v", err)
		}
		if need := int(uint32(off)) + len(init); need > len(img) {
			img = append(img, make([]byte, need-len(img))...)
		}
		copy(img[uint32(off):], init)
	}
	return img
}

func TestMergeData(t *testing.T) {
	sorted := dataBody(segment(0, "ab"), segment(4, "cd"), segment(6, "e"), segment(1000, "far"))
	got := mergeData(sorted, true)
	if n, _ := (&wasmbin.Reader{B: got}).U32(); n != 2 {
		t.Errorf("%d segments after merging, want 2 (the one at 1000 is past the gap)", n)
	}
	if !bytes.Equal(image(t, got), image(t, sorted)) {
		t.Errorf("merging changed what instantiation writes")
	}
	for name, body := range map[string][]byte{
		"overlap":           dataBody(segment(0, "abcd"), segment(2, "XY")),
		"overlap, unsorted": dataBody(segment(10, "ab"), segment(0, "cd"), segment(1, "XY")),
		"passive":           append(dataBody(segment(0, "ab")), 0x01, 0x01, 'x'),
		"one":               dataBody(segment(0, "ab")),
		"truncated":         sorted[:len(sorted)-1],
	} {
		if got := mergeData(body, true); !bytes.Equal(got, body) {
			t.Errorf("%s: the section was changed", name)
		}
	}
	unsorted := dataBody(segment(1000, "far"), segment(4, "cd"), segment(0, "ab"), segment(6, "e"))
	if got := mergeData(unsorted, true); !bytes.Equal(image(t, got), image(t, unsorted)) || bytes.Equal(got, unsorted) {
		t.Errorf("disjoint segments out of order: not merged, or merged wrongly")
	}
	if got := mergeData(sorted, false); !bytes.Equal(got, sorted) {
		t.Errorf("not mergeable (data count, imported memory): the section was changed")
	}
}

// dataSection returns a module's data section.
func dataSection(t *testing.T, wasm []byte) []byte {
	t.Helper()
	r := &wasmbin.Reader{B: wasm, Off: 8}
	for r.Off < len(wasm) {
		id, _ := r.Byte()
		n, err := r.U32()
		if err != nil {
			t.Fatal(err)
		}
		body, err := r.Bytes(int(n))
		if err != nil {
			t.Fatal(err)
		}
		if id == 11 {
			return body
		}
	}
	t.Fatal("no data section")
	return nil
}

// TestMergeDataRealGuest: a Go guest's tens of thousands of segments
// become a few, and instantiation writes the same bytes.
func TestMergeDataRealGuest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a guest from source")
	}
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path, err := guestbuild.Build(filepath.Join(root, "examples/remind"))
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := InstrumentModule(orig)
	if err != nil {
		t.Fatal(err)
	}
	before, after := dataSection(t, orig), dataSection(t, m.Wasm)
	nb, _ := (&wasmbin.Reader{B: before}).U32()
	na, _ := (&wasmbin.Reader{B: after}).U32()
	t.Logf("data segments: %d -> %d; section %d -> %d bytes", nb, na, len(before), len(after))
	if nb < 1000 || na > nb/100 {
		t.Errorf("data segments %d -> %d: want a Go guest's thousands merged into a few", nb, na)
	}
	if !bytes.Equal(image(t, before), image(t, after)) {
		t.Errorf("merging changed what instantiation writes")
	}
}
