//go:build linux

package host

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// On Linux a guest's linear memory is an anonymous mapping that reserves
// address space for the whole memory limit at once and lets the kernel
// supply zeroed pages as the guest touches them. Growing it is then free:
// no copy of the old memory and no zeroing of the new (a Go guest grows
// its memory many times while it initialises, and with Go-allocated
// buffers those copies were most of an instantiation). Only touched pages
// take memory. The mapping is MAP_NORESERVE, so reserving 256 MiB per
// instance does not count against the system's commit limit; where a
// mapping is refused anyway (a strict overcommit policy, a small address
// space) the instance falls back to Go-allocated memory.

// mappedBytes is the address space reserved by mapped memories that are
// not yet freed, for tests that check each is unmapped.
var mappedBytes atomic.Int64

type mappedMemory struct {
	region []byte // the whole reservation; wazero sees region[:size]
	limit  uint64
	hit    *atomic.Bool
}

// newGuestMemory returns the memory wazero asked for, of capacity
// capBytes, refusing to grow past limit.
func newGuestMemory(capBytes, limit uint64, hit *atomic.Bool) guestMemory {
	const page = 1 << 16
	reserve := (limit + page - 1) &^ (page - 1)
	if reserve == 0 || reserve < capBytes {
		return newLimitedMemory(capBytes, limit, hit)
	}
	region, err := unix.Mmap(-1, 0, int(reserve), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return newLimitedMemory(capBytes, limit, hit)
	}
	mappedBytes.Add(int64(len(region)))
	return &mappedMemory{region: region, limit: limit, hit: hit}
}

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > m.limit || m.region == nil {
		m.hit.Store(true)
		return nil
	}
	return m.region[:size:size]
}

func (m *mappedMemory) Free() {
	if m.region == nil {
		return
	}
	n := len(m.region)
	if unix.Munmap(m.region) == nil {
		mappedBytes.Add(-int64(n))
	}
	m.region = nil
}
