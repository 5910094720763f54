package postgres

import (
	"fmt"
	"math"
	"time"

	"github.com/sandflow/sandflow/store"
	"github.com/sandflow/sandflow/store/internal/codec"
)

// Large values (event data, module bytes, session records) are stored
// zstd-compressed from a threshold, as the embedded store does, when
// compression makes them smaller; a zstd column says which. The frame
// is the same zstd the embedded store writes.

// pack returns the stored form of data and whether it is compressed. The
// stored form is never nil: the columns are NOT NULL.
func pack(data []byte, threshold int) ([]byte, bool) {
	if threshold > 0 && len(data) >= threshold {
		if z := codec.Compress(nil, data); len(z) < len(data) {
			return z, true
		}
	}
	if data == nil {
		return []byte{}, false
	}
	return data, false
}

// unpack returns the data of a stored value; what is wrong with a frame
// is reported as store.ErrCorrupt.
func unpack(v []byte, compressed bool) ([]byte, error) {
	if !compressed {
		if len(v) == 0 {
			return nil, nil
		}
		return v, nil
	}
	out, err := codec.Decompress(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", store.ErrCorrupt, err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// Event times and timers are kept as Unix nanoseconds, which cover the
// years 1678-2262; times outside are refused rather than wrapped, as the
// embedded store refuses them.
func checkTime(t time.Time, what string) error {
	if !codec.InRange(t) {
		return fmt.Errorf("%w: %s %s is outside the years 1678-2262", store.ErrBadBatch, what, t.Format(time.RFC3339))
	}
	return nil
}

// clampNanos is t in Unix nanoseconds, clamped to the range they cover:
// a bound for a query, never a stored time.
func clampNanos(t time.Time) int64 {
	switch {
	case t.Before(codec.MinTime):
		return math.MinInt64
	case t.After(codec.MaxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// secNanos splits a time into the two columns that order runs and
// questions: any time json.Marshal writes fits them.
func secNanos(t time.Time) (int64, int32) {
	return t.Unix(), int32(t.Nanosecond())
}
