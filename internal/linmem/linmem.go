// Package linmem provides the linear memories of WebAssembly guests as an
// engine that lets the host allocate them (wazero's
// experimental.MemoryAllocator) asks for them: on Linux an anonymous
// mapping that reserves the whole memory limit, and can be reset to a
// plugin's base image through a sealed memory file (linmem_linux.go);
// elsewhere, or where a mapping is refused, a Go-allocated buffer.
//
// Every memory refuses to grow past its limit, and notes that it did, so
// that the engine can report the failure as the memory limit rather than
// as whatever the guest does when memory.grow fails.
package linmem

import "sync/atomic"

// Memory is a guest's linear memory, as wazero's
// experimental.LinearMemory.
type Memory interface {
	// Reallocate returns the memory grown to size bytes, or nil when it
	// cannot grow so far.
	Reallocate(size uint64) []byte
	// Free releases the memory.
	Free()
}

// Mapped is the address space reserved by mapped memories that are not
// yet freed, for tests that check each is unmapped.
func Mapped() int64 { return mappedBytes.Load() }

// limited backs a linear memory with a Go buffer.
type limited struct {
	buf   []byte
	limit uint64
	hit   *atomic.Bool
}

// NewLimited returns a Go-allocated memory of capacity capBytes that
// refuses to grow past limit. It reserves only what is asked for:
// reserving more up front (to spare copies when the guest grows) measured
// slower, since Go zeroes a large allocation it reuses (an instantiation
// of a Go guest: 16 MiB +6%, 64 MiB +70%).
func NewLimited(capBytes, limit uint64, hit *atomic.Bool) Memory {
	return &limited{buf: make([]byte, 0, min(capBytes, limit)), limit: limit, hit: hit}
}

func (m *limited) Reallocate(size uint64) []byte {
	if size > m.limit {
		m.hit.Store(true)
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	c := min(max(size, 2*uint64(cap(m.buf))), m.limit)
	nb := make([]byte, size, c)
	copy(nb, m.buf)
	m.buf = nb
	return nb
}

func (m *limited) Free() { m.buf = nil }
