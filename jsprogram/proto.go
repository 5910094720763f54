package jsprogram

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
//	              parts when large; see replay.go)
//
// Worker to parent:
//
//	'O' op        u32 kind | u32 name length | name | payload
//	'W' write     u8 stream (1 stdout, 2 stderr) | bytes
//	'D' done      JSON doneMsg
//	'S' suspend   u64 bytes the worker holds: the program (its activation
//	              said park) waits for calls still out and stays live; the
//	              worker reads 'C' next (or is killed)
//	'Y' replayed  the ops the worker answered from the log, to check
//	              (replay.go); sent before its next op and before 'D'
//	'H' renew     empty: the worker's replay passed a recorded activation
const (
	frameActivate   = 'A'
	frameReply      = 'R'
	frameReplyFresh = 'F'
	frameAbort      = 'K'
	framePart       = 'P'
	frameContinue   = 'C'
	frameSuspend    = 'S'
	frameLog        = 'L'
	frameReplayed   = 'Y'
	frameRenew      = 'H'
	frameOp         = 'O'
	frameWrite      = 'W'
	frameDone       = 'D'
)

// maxFrame bounds a frame; the largest legitimate ones carry a child's reply
// (4 MiB by default) or a program's source, as JSON.
const maxFrame = 64 << 20

var errFrameTooLarge = errors.New("jsprogram: frame over the size limit")

func writeFrame(w *bufio.Writer, typ byte, parts ...[]byte) error {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	if n > maxFrame {
		return errFrameTooLarge
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

// partBytes is the most a 'P' frame carries.
const partBytes = maxFrame / 2

// writeLarge writes a frame of any size: one frame when it fits, else 'P'
// frames of up to partBytes and the rest in a frame of type typ.
func writeLarge(w *bufio.Writer, typ byte, parts ...[]byte) error {
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	if 1+total <= maxFrame {
		return writeFrame(w, typ, parts...)
	}
	parts = slices.Clone(parts) // cut below
	n := u64(uint64(total))
	left := total
	for left > partBytes {
		// The next partBytes of the concatenated parts.
		var piece [][]byte
		want := partBytes
		for want > 0 {
			k := min(want, len(parts[0]))
			piece = append(piece, parts[0][:k])
			parts[0] = parts[0][k:]
			if len(parts[0]) == 0 {
				parts = parts[1:]
			}
			want -= k
		}
		if err := writeFrame(w, framePart, append([][]byte{n}, piece...)...); err != nil {
			return err
		}
		left -= partBytes
	}
	return writeFrame(w, typ, parts...)
}

// errPartsTooLarge is returned when parts announce a frame over the
// reader's limit, or do not add up to what they announced.
var errPartsTooLarge = errors.New("jsprogram: parts of a frame over the size limit")

// readLarge reads a frame that may come in parts (see writeLarge), of at
// most max bytes in all.
func readLarge(r *bufio.Reader, max int) (byte, []byte, error) {
	var buf []byte
	want := -1
	for {
		typ, body, err := readFrame(r)
		if err != nil {
			return 0, nil, err
		}
		if typ != framePart {
			if buf == nil {
				return typ, body, nil
			}
			if len(buf)+len(body) != want {
				return 0, nil, fmt.Errorf("%w: %d bytes announced, %d sent", errPartsTooLarge, want, len(buf)+len(body))
			}
			return typ, append(buf, body...), nil
		}
		if len(body) < 8 {
			return 0, nil, fmt.Errorf("%w: a part of %d bytes", errPartsTooLarge, len(body))
		}
		n := binary.LittleEndian.Uint64(body)
		if buf == nil {
			if n > uint64(max) {
				return 0, nil, fmt.Errorf("%w: %d bytes, over %d", errPartsTooLarge, n, max)
			}
			want = int(n)
			buf = make([]byte, 0, want)
		}
		if n != uint64(want) || len(buf)+len(body)-8 > want {
			return 0, nil, fmt.Errorf("%w: parts of %d bytes go past the %d announced", errPartsTooLarge, len(buf)+len(body)-8, want)
		}
		buf = append(buf, body[8:]...)
	}
}

func readFrame(r *bufio.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n < 1 || n > maxFrame {
		return 0, nil, fmt.Errorf("%w: %d bytes", errFrameTooLarge, n)
	}
	body := make([]byte, n-1)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return hdr[4], body, nil
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func i64(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }

// activation is what a worker needs to run one start or resume.
type activation struct {
	// Kind is what to run: a workflow tool's program (""), or an authored
	// tool's workflow activation, step attempt or definition.
	Kind string `json:"kind,omitempty"`
	// Source is an authored tool's script, and Name its tool: the stack
	// of a run's error names the script NAME.js (the program's own stacks
	// say tool.js).
	Source string `json:"source,omitempty"`
	Name   string `json:"name,omitempty"`
	// Seed seeds Math.random; the host draws it from the run's generator.
	Seed []byte `json:"seed"`
	// Now is the logical clock at the start, unix ns.
	Now    int64  `json:"now"`
	Limits Limits `json:"limits"`
	// Park: a workflow program that waits for calls still out parks
	// (sends 'S' and stays live) instead of ending the activation.
	Park bool `json:"park,omitempty"`
	// Log: the run's log follows in an 'L' frame, to replay from.
	Log bool `json:"log,omitempty"`
}

// doneMsg ends an activation.
type doneMsg struct {
	// Status is "completed" (the program issued complete), "aborted" (the
	// parent sent 'K', or an op failed) or "failed" (a limit the worker
	// caught; Error says which), or "defined".
	Status string                `json:"status"`
	Error  *WorkflowProgramError `json:"error,omitempty"`
	// Definition answers a define activation (status "defined").
	Definition *Definition `json:"definition,omitempty"`
}
