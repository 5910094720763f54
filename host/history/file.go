package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sandflow/sandflow/store"
)

// ErrBadHistory is returned when a history file, or a run's log, cannot be
// read: malformed, out of order, or disagreeing with itself.
var ErrBadHistory = errors.New("invalid history")

// Format names the history file format.
const Format = "sandflow.history"

// File is a run's log with what is needed to replay it elsewhere. As a
// file it is JSON, zstd-compressed by the host's ExportHistory; Read reads
// either form.
type File struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Run     store.Run `json:"run"`
	Events  []Event   `json:"events"`
}

// Event is an event in a history file.
type Event struct {
	Seq  uint64          `json:"seq"`
	Time time.Time       `json:"time"`
	Kind string          `json:"kind"`
	Data json.RawMessage `json:"data"`
}

// Limits on history files, which may come from anywhere.
const (
	maxHistoryBytes = 512 << 20
	maxEvents       = 10_000_000
)

// Read reads a history file, compressed or not. Malformed input is
// an error wrapping ErrBadHistory.
func Read(r io.Reader) (*File, error) {
	head := make([]byte, 4)
	n, _ := io.ReadFull(r, head)
	r = io.MultiReader(bytes.NewReader(head[:n]), r)
	if n == 4 && bytes.Equal(head, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		zr, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(maxHistoryBytes), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadHistory, err)
		}
		defer zr.Close()
		r = zr
	}
	data, err := io.ReadAll(io.LimitReader(r, maxHistoryBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadHistory, err)
	}
	if len(data) > maxHistoryBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrBadHistory, maxHistoryBytes)
	}
	var hist File
	if err := json.Unmarshal(data, &hist); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadHistory, err)
	}
	if hist.Format != Format || hist.Version != 1 {
		return nil, fmt.Errorf("%w: format %q version %d, want %q version 1", ErrBadHistory, hist.Format, hist.Version, Format)
	}
	if len(hist.Events) == 0 || len(hist.Events) > maxEvents {
		return nil, fmt.Errorf("%w: %d events", ErrBadHistory, len(hist.Events))
	}
	if store.ValidRunID(hist.Run.ID) != nil {
		return nil, fmt.Errorf("%w: run id %q", ErrBadHistory, hist.Run.ID)
	}
	compactData(hist.Events)
	return &hist, nil
}

// compactData rewrites the events' data without the file's indentation,
// as the store holds it, into one buffer: a replay then reads what a
// resume from the store reads, and fewer bytes of it. Data is valid JSON
// here, as json.Unmarshal took it as a RawMessage.
func compactData(evs []Event) {
	size := 0
	for _, e := range evs {
		size += len(e.Data)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	for i := range evs {
		start := buf.Len()
		if err := json.Compact(buf, evs[i].Data); err != nil {
			buf.Truncate(start)
			continue // left as it is; the replay reports it
		}
		evs[i].Data = buf.Bytes()[start:buf.Len():buf.Len()]
	}
}
