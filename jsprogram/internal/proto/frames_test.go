package proto

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

// A frame too large for one goes in parts and comes back whole, byte for
// byte; a small one stays one frame.
func TestLargeFramesRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sizes  []int // the parts written
		frames int   // frames on the wire
	}{
		{"small", []int{8, 100}, 1},
		{"exactly one frame", []int{8, MaxFrame - 9}, 1},
		{"one byte past a frame", []int{8, MaxFrame - 8}, 2},
		{"parts that straddle pieces", []int{8, PartBytes - 3, 7, PartBytes + 11}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var parts [][]byte
			var want []byte
			for i, n := range tc.sizes {
				p := bytes.Repeat([]byte{byte('a' + i)}, n)
				p[0], p[n-1] = byte(i), byte(n) // ends that a cut in the wrong place moves
				parts = append(parts, p)
				want = append(want, p...)
			}
			var wire bytes.Buffer
			if err := WriteLarge(bufio.NewWriter(&wire), FrameReply, parts...); err != nil {
				t.Fatal(err)
			}
			// The parts given are left as they were.
			for i, n := range tc.sizes {
				if len(parts[i]) != n {
					t.Fatalf("part %d is %d bytes after the write, was %d", i, len(parts[i]), n)
				}
			}
			frames := 0
			for r := bufio.NewReader(bytes.NewReader(wire.Bytes())); ; frames++ {
				if _, _, err := ReadFrame(r); err != nil {
					break
				}
			}
			if frames != tc.frames {
				t.Errorf("%d frames on the wire, want %d", frames, tc.frames)
			}
			typ, got, err := ReadLarge(bufio.NewReader(&wire), len(want))
			if err != nil {
				t.Fatal(err)
			}
			if typ != FrameReply || !bytes.Equal(got, want) {
				t.Fatalf("read back type %q and %d bytes, want %q and the %d written", typ, len(got), FrameReply, len(want))
			}
		})
	}
}

// Parts that announce more than the reader takes, or do not add up to
// what they announce, are refused, not assembled.
func TestLargeFramesBadParts(t *testing.T) {
	frame := func(typ byte, parts ...[]byte) []byte {
		var b bytes.Buffer
		w := bufio.NewWriter(&b)
		if err := WriteFrame(w, typ, parts...); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for _, tc := range []struct {
		name string
		wire []byte
	}{
		{"announced over the limit", frame(FramePart, U64(1<<20), []byte("abc"))},
		{"fewer bytes than announced", append(frame(FramePart, U64(10), []byte("abc")), frame(FrameReply, []byte("de"))...)},
		{"more bytes than announced", append(frame(FramePart, U64(4), []byte("abc")), frame(FrameReply, []byte("de"))...)},
		{"announcements that differ", append(frame(FramePart, U64(8), []byte("abc")), frame(FramePart, U64(9), []byte("de"))...)},
		{"a part with no length", frame(FramePart, []byte("abc"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadLarge(bufio.NewReader(bytes.NewReader(tc.wire)), 1000)
			if !errors.Is(err, ErrPartsTooLarge) {
				t.Fatalf("err = %v, want ErrPartsTooLarge", err)
			}
		})
	}
}
