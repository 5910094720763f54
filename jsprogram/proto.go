package jsprogram

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
//
// Worker to parent:
//
//	'O' op        u32 kind | u32 name length | name | payload
//	'W' write     u8 stream (1 stdout, 2 stderr) | bytes
//	'D' done      JSON doneMsg
const (
	frameActivate   = 'A'
	frameReply      = 'R'
	frameReplyFresh = 'F'
	frameAbort      = 'K'
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

func i64(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }

// activation is what a worker needs to run one start or resume.
type activation struct {
	// Kind is what to run: a workflow tool's program (""), or an authored
	// tool's workflow activation, step attempt or definition.
	Kind string `json:"kind,omitempty"`
	// Source is an authored tool's script.
	Source string `json:"source,omitempty"`
	// Seed seeds Math.random; the host draws it from the run's generator.
	Seed []byte `json:"seed"`
	// Now is the logical clock at the start, unix ns.
	Now    int64  `json:"now"`
	Limits Limits `json:"limits"`
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
