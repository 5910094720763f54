package host

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestSnapshotEncoding: a snapshot decodes to what was encoded; a damaged
// one (cut short, any byte flipped, memory over the limit) is refused with
// errSnapshot, never restored and never a panic.
func TestSnapshotEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	img := &snapImage{
		run: "r1", module: "p@1#abc", base: 7, baseLen: 3 * snapChunk, act: 4, cursor: 99, clock: -5,
		rng: []byte("generator"), outProduced: 12, memSize: 8 * snapChunk, globals: []uint64{1, 1 << 63, 0},
		chunks: []uint32{0, 3, 7},
	}
	img.data = make([]byte, 3*snapChunk)
	for i := range img.data[:snapChunk] {
		img.data[i] = byte(r.Uint32())
	}
	enc := img.encode()
	got, err := decodeSnapshot(enc, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got.run != img.run || got.module != img.module || got.base != img.base || got.baseLen != img.baseLen ||
		got.act != img.act || got.cursor != img.cursor || got.clock != img.clock || !bytes.Equal(got.rng, img.rng) ||
		got.outProduced != img.outProduced || got.memSize != img.memSize || len(got.globals) != 3 || got.globals[1] != 1<<63 ||
		len(got.chunks) != 3 || got.chunks[2] != 7 || !bytes.Equal(got.data, img.data) {
		t.Fatalf("decoded %+v", got)
	}
	if _, err := decodeSnapshot(enc, 4*snapChunk); !errors.Is(err, errSnapshot) {
		t.Fatalf("memory over the limit: %v, want errSnapshot", err)
	}
	for n := range len(enc) {
		if _, err := decodeSnapshot(enc[:n], 1<<20); !errors.Is(err, errSnapshot) {
			t.Fatalf("cut to %d of %d bytes: %v, want errSnapshot", n, len(enc), err)
		}
	}
	for range 2000 {
		bad := bytes.Clone(enc)
		bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
		if _, err := decodeSnapshot(bad, 1<<20); !errors.Is(err, errSnapshot) {
			t.Fatalf("flipped byte: %v, want errSnapshot", err)
		}
	}
}
