//go:build !linux

package linmem

import (
	"sync/atomic"
)

// mappedBytes is always zero where guest memory is Go-allocated.
var mappedBytes atomic.Int64

// New returns Go-allocated guest memory (linmem_linux.go maps it instead).
func New(capBytes, limit uint64, hit *atomic.Bool) Memory {
	return NewLimited(capBytes, limit, hit)
}

// File is a plugin's base image in a memory file, which only Linux has
// here (linmem_linux.go): elsewhere an instance is reset by comparing its
// memory against the image.
type File struct{}

// NewFile returns nil: there are no memory files here.
func NewFile([]byte) *File { return nil }

// Reset returns false: the caller compares and copies.
func Reset(Memory, *File, []byte) bool { return false }

// OwnChunks returns false: which chunks a memory wrote is not known.
func OwnChunks(Memory, *File, int) ([]uint32, bool) { return nil, false }
