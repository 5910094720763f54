package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandflow/sandflow/store/internal/codec"
	"github.com/sandflow/sandflow/store/internal/integrity"
)

// Stored values start with a flag byte saying whether the rest is
// zstd-compressed. Small values are stored as they are: compressing them
// costs more than it saves.
const (
	flagRaw  byte = 0
	flagZstd byte = 1
)

// packValue appends the stored form of data to dst: compressed when it is
// at least threshold bytes and compression helps.
func packValue(dst, data []byte, threshold int) []byte {
	if threshold > 0 && len(data) >= threshold {
		start := len(dst)
		dst = append(dst, flagZstd)
		dst = codec.Compress(dst, data)
		if len(dst)-start-1 < len(data) {
			return dst
		}
		dst = dst[:start]
	}
	dst = append(dst, flagRaw)
	return append(dst, data...)
}

// unpackValue returns the data of a stored value. The result may alias v.
func unpackValue(v []byte) ([]byte, error) {
	if len(v) == 0 {
		return nil, fmt.Errorf("%w: empty value", ErrCorrupt)
	}
	switch v[0] {
	case flagRaw:
		return v[1:], nil
	case flagZstd:
		out, err := codec.Decompress(v[1:])
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%w: unknown value flag %#x", ErrCorrupt, v[0])
	}
}

// Event values: time (i64 unix nanoseconds, big-endian), kind length (u8),
// kind, then the packed data.
func encodeEvent(e Event, threshold int) ([]byte, error) {
	if len(e.Kind) == 0 || len(e.Kind) > 255 {
		return nil, fmt.Errorf("%w: event kind %q must be 1-255 bytes", ErrBadBatch, e.Kind)
	}
	if err := checkTime(e.Time, "event time"); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 9+len(e.Kind)+1+len(e.Data))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Time.UnixNano()))
	b = append(b, byte(len(e.Kind)))
	b = append(b, e.Kind...)
	return packValue(b, e.Data, threshold), nil
}

// eventDecoder decodes the events of one read: their kinds are shared and
// their data copied into blocks of eventBlock bytes (bbolt's memory is
// valid only inside the transaction).
type eventDecoder struct {
	kinds map[string]string
	block []byte
}

const eventBlock = 64 << 10

func (d *eventDecoder) decode(seq uint64, v []byte) (Event, error) {
	if len(v) < 10 {
		return Event{}, fmt.Errorf("%w: event %d too short", ErrCorrupt, seq)
	}
	ts := int64(binary.BigEndian.Uint64(v))
	kl := int(v[8])
	if kl == 0 || len(v) < 9+kl+1 {
		return Event{}, fmt.Errorf("%w: event %d kind length", ErrCorrupt, seq)
	}
	kind, ok := d.kinds[string(v[9:9+kl])]
	if !ok {
		if d.kinds == nil {
			d.kinds = map[string]string{}
		}
		kind = string(v[9 : 9+kl])
		d.kinds[kind] = kind
	}
	data, err := unpackValue(v[9+kl:])
	if err != nil {
		return Event{}, fmt.Errorf("event %d: %w", seq, err)
	}
	if len(data) > eventBlock/4 {
		data = append([]byte(nil), data...)
	} else {
		if len(d.block)+len(data) > cap(d.block) {
			d.block = make([]byte, 0, eventBlock)
		}
		off := len(d.block)
		d.block = append(d.block, data...)
		data = d.block[off:len(d.block):len(d.block)]
	}
	return Event{Seq: seq, Time: time.Unix(0, ts).UTC(), Kind: kind, Data: data}, nil
}

// decodeEvent decodes one stored event.
func decodeEvent(seq uint64, v []byte) (Event, error) {
	var d eventDecoder
	return d.decode(seq, v)
}

func eventKey(runID string, seq uint64) []byte {
	k := make([]byte, 0, len(runID)+9)
	k = append(k, runID...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// Times are stored as unix nanoseconds, which cover the years 1678-2262;
// times outside that range are refused rather than silently wrapped.
func checkTime(t time.Time, what string) error {
	if !codec.InRange(t) {
		return fmt.Errorf("%w: %s %s is outside the years 1678-2262", ErrBadBatch, what, t.Format(time.RFC3339))
	}
	return nil
}

// timeKey encodes a time so that byte order is time order, before 1970 too.
func timeKey(t time.Time) uint64 {
	switch {
	case t.Before(codec.MinTime):
		t = codec.MinTime
	case t.After(codec.MaxTime):
		t = codec.MaxTime
	}
	return uint64(t.UnixNano()) ^ (1 << 63)
}

func timerKey(t Timer) []byte {
	k := make([]byte, 0, 8+len(t.RunID)+1+len(t.ID))
	k = binary.BigEndian.AppendUint64(k, timeKey(t.FireAt))
	k = append(k, t.RunID...)
	k = append(k, 0)
	return append(k, t.ID...)
}

// pluginKey encodes a version the caller has checked is in 1..MaxUint32.
func pluginKey(name string, version int) []byte {
	k := make([]byte, 0, len(name)+5)
	k = append(k, name...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(version))
}

// decodeJSON checks a value stored in JSON under k in bucket and decodes
// it; what names the value in the error when it does not decode.
func decodeJSON[T any](bucket, k, sv []byte, what string) (T, error) {
	var t T
	v, err := integrity.Open(bucket, k, sv)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(v, &t); err != nil {
		return t, integrity.Corruptf(bucket, k, "%s does not decode: %v", what, err)
	}
	return t, nil
}
