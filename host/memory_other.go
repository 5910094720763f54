//go:build !linux

package host

import (
	"sync/atomic"
)

// mappedBytes is always zero where guest memory is Go-allocated.
var mappedBytes atomic.Int64

// newGuestMemory returns Go-allocated guest memory (memory_linux.go maps
// it instead).
func newGuestMemory(capBytes, limit uint64, hit *atomic.Bool) guestMemory {
	return newLimitedMemory(capBytes, limit, hit)
}
