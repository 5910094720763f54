package meter

import (
	"cmp"
	"slices"

	"github.com/sandflow/sandflow/internal/wasmbin"
)

// maxDataGap is the most zero bytes mergeData puts between two segments
// to join them.
const maxDataGap = 64

// dataSegment is an active segment of memory 0 at a constant offset.
type dataSegment struct {
	off  uint32
	init []byte
}

// mergeData joins the data section's adjacent segments: a Go guest has
// tens of thousands of small ones (about 39,000), and an engine pays for
// each at every instantiation (wazero: about 4 ms of an 8 ms
// instantiation). It merges only when doing so cannot change what
// instantiation writes: the caller says the memory is the module's own
// (zeroed when it starts) and no instruction names a segment by index (no
// data count section), and every segment is active in memory 0 at an
// i32.const offset and no two overlap. Disjoint writes do not depend on
// their order, so the segments are sorted by offset and neighbours joined;
// no segment writes into a gap a merge fills with zeros. Otherwise, or
// when the section does not parse, it returns the section as it was, for
// the engine to judge.
func mergeData(body []byte, mergeable bool) []byte {
	if !mergeable {
		return body
	}
	segs, ok := activeSegments(body)
	if !ok || len(segs) < 2 {
		return body
	}
	var merged []dataSegment
	for _, s := range segs {
		if n := len(merged); n > 0 {
			last := &merged[n-1]
			end := uint64(last.off) + uint64(len(last.init))
			if uint64(s.off) >= end && uint64(s.off)-end <= maxDataGap {
				last.init = append(last.init, make([]byte, uint64(s.off)-end)...)
				last.init = append(last.init, s.init...)
				continue
			}
		}
		merged = append(merged, dataSegment{off: s.off, init: append([]byte(nil), s.init...)})
	}
	out := wasmbin.AppendULEB(nil, uint64(len(merged)))
	for _, s := range merged {
		out = append(out, 0x00, 0x41) // active, memory 0; i32.const
		out = wasmbin.AppendSLEB(out, int64(int32(s.off)))
		out = append(out, 0x0b)
		out = wasmbin.AppendULEB(out, uint64(len(s.init)))
		out = append(out, s.init...)
	}
	return out
}

// activeSegments reads a data section whose segments all qualify for
// mergeData, sorted by offset.
func activeSegments(body []byte) ([]dataSegment, bool) {
	r := &wasmbin.Reader{B: body}
	n, err := r.U32()
	if err != nil || uint64(n) > uint64(len(body)) {
		return nil, false
	}
	segs := make([]dataSegment, 0, n)
	for range n {
		flag, err := r.U32()
		if err != nil || flag != 0 {
			return nil, false
		}
		if op, err := r.Byte(); err != nil || op != 0x41 {
			return nil, false
		}
		off, ok := sleb32(r)
		if !ok {
			return nil, false
		}
		if b, err := r.Byte(); err != nil || b != 0x0b {
			return nil, false
		}
		size, err := r.U32()
		if err != nil {
			return nil, false
		}
		init, err := r.Bytes(int(size))
		if err != nil {
			return nil, false
		}
		// The offset is an i32 read as unsigned, as instantiation does.
		segs = append(segs, dataSegment{off: uint32(off), init: init})
	}
	if r.End() != nil {
		return nil, false
	}
	slices.SortStableFunc(segs, func(a, b dataSegment) int { return cmp.Compare(a.off, b.off) })
	end := uint64(0)
	for _, s := range segs {
		if uint64(s.off) < end {
			return nil, false // overlap: the order of writes matters
		}
		end = uint64(s.off) + uint64(len(s.init))
	}
	return segs, true
}

// sleb32 reads a signed LEB128 number that fits in 32 bits.
func sleb32(r *wasmbin.Reader) (int32, bool) {
	var v int64
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.Byte()
		if err != nil {
			return 0, false
		}
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			if shift < 63 && c&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			if v < -1<<31 || v > 1<<31-1 {
				return 0, false
			}
			return int32(v), true
		}
	}
	return 0, false
}
