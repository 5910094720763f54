package host

import (
	"crypto/rand"
	"encoding/base32"
	"sync/atomic"
	"time"
)

// logicalClock is the time a workflow instance sees. It starts at the run's
// start, moves to the recorded time of each event the guest consumes, and
// moves by the requested amount when the guest sleeps through WASI. It never
// goes back, and stands still otherwise, so a replay sees what the original
// execution saw. Only the instance's goroutine touches it.
type logicalClock struct{ now int64 }

func (c *logicalClock) Now() int64 { return c.now }

func (c *logicalClock) Sleep(ns int64) {
	// Advance at least a nanosecond: a runtime polling with a zero timeout
	// must see time move or it spins.
	c.now += max(ns, 1)
}

func (c *logicalClock) advance(t time.Time) {
	if n := t.UnixNano(); n > c.now {
		c.now = n
	}
}

func (c *logicalClock) time() time.Time { return time.Unix(0, c.now).UTC() }

// realClock is the time a step instance sees: real time, plus whatever the
// guest slept through WASI (which returns at once).
type realClock struct{ slept atomic.Int64 }

func (c *realClock) Now() int64     { return time.Now().UnixNano() + c.slept.Load() }
func (c *realClock) Sleep(ns int64) { c.slept.Add(max(ns, 1)) }

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns prefix followed by n random bytes in lower-case base32.
func newID(prefix string, n int) string {
	return string(appendRandom(append(make([]byte, 0, len(prefix)+idEncoding.EncodedLen(n)), prefix...), n))
}

// appendRandom appends n random bytes in idEncoding to b, which has room
// for them.
func appendRandom(b []byte, n int) []byte {
	r := make([]byte, n) // on the stack for the sizes IDs use
	if _, err := rand.Read(r); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return idEncoding.AppendEncode(b, r)
}

// sortedDigits are base32 digits in the order of their bytes.
const sortedDigits = "234567abcdefghijklmnopqrstuvwxyz"

// newTimedID is newID with the time in milliseconds before the random
// part (10 digits that sort as the times do), so that IDs made later sort
// later.
func newTimedID(prefix string, n int) string {
	const digits = 10
	ms := uint64(time.Now().UnixMilli())
	b := append(make([]byte, 0, len(prefix)+digits+idEncoding.EncodedLen(n)), prefix...)
	for i := digits - 1; i >= 0; i-- {
		b = append(b, sortedDigits[ms>>(5*i)&31])
	}
	return string(appendRandom(b, n))
}
