package proto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// The parent and a worker speak in frames over the worker's stdin and
// stdout:
//
//	offset  size  field
//	0       4     length of what follows, u32 little-endian
//	4       1     frame type
//	5       n-1   body, by type
//
// Parent to worker:
//
//	'A' activate  JSON activation
//	'R' reply     i64 clock (unix ns) | op response body
//	'F' reply     as 'R', and the JavaScript time budget starts afresh (the
//	              host's replay passed a recorded activation, or its end)
//	'K' abort     empty: the host ended the activation (the run waits, or the
//	              op failed); the worker stops the program and answers 'D'
//	'P' part      u64 n | bytes: a piece of the next 'R' or 'F' frame, which is
//	              too large for one frame (an await's answer to a fan-out); that
//	              frame's body is the parts' bytes, then its own, n bytes in all
//	'C' continue  empty: the parked program's run resumes; it asks the host
//	              again for what it waits on
//	'L' log       the run's log, right after an activation that says so (in
//	              parts when large; see internal/replay)
//
// Worker to parent:
//
//	'O' op        u32 kind | u32 name length | name | payload
//	'W' write     u8 stream (1 stdout, 2 stderr) | bytes
//	'D' done      JSON Done
//	'S' suspend   u64 bytes the worker holds: the program (its activation
//	              said park) waits for calls still out and stays live; the
//	              worker reads 'C' next (or is killed)
//	'Y' replayed  the ops the worker answered from the log, to check
//	              (internal/replay); sent before its next op and before 'D'
//	'H' renew     empty: the worker's replay passed a recorded activation
const (
	FrameActivate   = 'A'
	FrameReply      = 'R'
	FrameReplyFresh = 'F'
	FrameAbort      = 'K'
	FramePart       = 'P'
	FrameContinue   = 'C'
	FrameSuspend    = 'S'
	FrameLog        = 'L'
	FrameReplayed   = 'Y'
	FrameRenew      = 'H'
	FrameOp         = 'O'
	FrameWrite      = 'W'
	FrameDone       = 'D'
)

// MaxFrame bounds a frame; the largest legitimate ones carry a child's reply
// (4 MiB by default) or a program's source, as JSON.
const MaxFrame = 64 << 20

var ErrFrameTooLarge = errors.New("jsprogram: frame over the size limit")

func WriteFrame(w *bufio.Writer, typ byte, parts ...[]byte) error {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxFrame {
		return ErrFrameTooLarge
	}
	var hdr [5]byte
	binary.LittleEndian.PutUint32(hdr[:], uint32(n))
	hdr[4] = typ
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return w.Flush()
}

// PartBytes is the most a 'P' frame carries.
const PartBytes = MaxFrame / 2

// WriteLarge writes a frame of any size: one frame when it fits, else 'P'
// frames of up to PartBytes and the rest in a frame of type typ.
func WriteLarge(w *bufio.Writer, typ byte, parts ...[]byte) error {
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	if 1+total <= MaxFrame {
		return WriteFrame(w, typ, parts...)
	}
	parts = slices.Clone(parts) // cut below
	n := U64(uint64(total))
	left := total
	for left > PartBytes {
		// The next PartBytes of the concatenated parts.
		var piece [][]byte
		want := PartBytes
		for want > 0 {
			k := min(want, len(parts[0]))
			piece = append(piece, parts[0][:k])
			parts[0] = parts[0][k:]
			if len(parts[0]) == 0 {
				parts = parts[1:]
			}
			want -= k
		}
		if err := WriteFrame(w, FramePart, append([][]byte{n}, piece...)...); err != nil {
			return err
		}
		left -= PartBytes
	}
	return WriteFrame(w, typ, parts...)
}

// ErrPartsTooLarge is returned when parts announce a frame over the
// reader's limit, or do not add up to what they announced.
var ErrPartsTooLarge = errors.New("jsprogram: parts of a frame over the size limit")

// ReadLarge reads a frame that may come in parts (see WriteLarge), of at
// most max bytes in all.
func ReadLarge(r *bufio.Reader, max int) (byte, []byte, error) {
	var buf []byte
	want := -1
	for {
		typ, body, err := ReadFrame(r)
		if err != nil {
			return 0, nil, err
		}
		if typ != FramePart {
			if buf == nil {
				return typ, body, nil
			}
			if len(buf)+len(body) != want {
				return 0, nil, fmt.Errorf("%w: %d bytes announced, %d sent", ErrPartsTooLarge, want, len(buf)+len(body))
			}
			return typ, append(buf, body...), nil
		}
		if len(body) < 8 {
			return 0, nil, fmt.Errorf("%w: a part of %d bytes", ErrPartsTooLarge, len(body))
		}
		n := binary.LittleEndian.Uint64(body)
		if buf == nil {
			if n > uint64(max) {
				return 0, nil, fmt.Errorf("%w: %d bytes, over %d", ErrPartsTooLarge, n, max)
			}
			want = int(n)
			buf = make([]byte, 0, want)
		}
		if n != uint64(want) || len(buf)+len(body)-8 > want {
			return 0, nil, fmt.Errorf("%w: parts of %d bytes go past the %d announced", ErrPartsTooLarge, len(buf)+len(body)-8, want)
		}
		buf = append(buf, body[8:]...)
	}
}

func ReadFrame(r *bufio.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n < 1 || n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	body := make([]byte, n-1)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return hdr[4], body, nil
}

func U32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func U64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func I64(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }
