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

// baseFile is a plugin's base image in a memory file, which only Linux
// has here (memory_linux.go): elsewhere an instance is reset by comparing
// its memory against the image.
type baseFile struct{}

func newBaseFile([]byte) *baseFile { return nil }

func resetMapped(guestMemory, *baseFile, []byte) bool { return false }

func ownChunks(guestMemory, *baseFile) ([]uint32, bool) { return nil, false }
