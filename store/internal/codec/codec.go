// Package codec holds what both stores, the embedded one and PostgreSQL,
// encode alike: the zstd frames of large values and the range of times
// that Unix nanoseconds cover.
package codec

import (
	"math"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
)

// MaxDecoded bounds what one stored value may decompress to, so a corrupt
// or hostile frame cannot make the host allocate without bound.
const MaxDecoded = 256 << 20

var (
	zOnce sync.Once
	zEnc  *zstd.Encoder
	zDec  *zstd.Decoder
)

func zstdCodec() (*zstd.Encoder, *zstd.Decoder) {
	zOnce.Do(func() {
		var err error
		zEnc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err) // only on invalid options
		}
		zDec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxDecoded))
		if err != nil {
			panic(err)
		}
	})
	return zEnc, zDec
}

// Compress appends the zstd frame of data to dst.
func Compress(dst, data []byte) []byte {
	enc, _ := zstdCodec()
	return enc.EncodeAll(data, dst)
}

// Decompress returns the data of one zstd frame, refusing a frame that is
// damaged or would decode to more than MaxDecoded bytes. The caller
// reports its error as corruption.
func Decompress(frame []byte) ([]byte, error) {
	_, dec := zstdCodec()
	return dec.DecodeAll(frame, nil)
}

// Times are stored as Unix nanoseconds, which cover the years 1678-2262:
// MinTime to MaxTime.
var (
	MinTime = time.Unix(0, math.MinInt64).UTC()
	MaxTime = time.Unix(0, math.MaxInt64).UTC()
)

// InRange reports whether t is a time Unix nanoseconds can hold.
func InRange(t time.Time) bool { return !t.Before(MinTime) && !t.After(MaxTime) }
