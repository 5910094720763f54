//go:build linux

package linmem

import (
	"encoding/binary"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

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
// not yet freed (Mapped).
var mappedBytes atomic.Int64

type mappedMemory struct {
	region []byte // the whole reservation; wazero sees region[:cur]
	cur    uint64
	limit  uint64
	hit    *atomic.Bool
	// based: the base image file mapped over region[:cur] by the last
	// reset (Reset); pm and own are its buffers.
	based *File
	pm    []byte
	own   []uint32
}

func (m *mappedMemory) size() int { return int(m.cur) }

// New returns the memory an engine asked for, of capacity capBytes,
// refusing to grow past limit: mapped, or Go-allocated where a mapping is
// refused.
func New(capBytes, limit uint64, hit *atomic.Bool) Memory {
	const page = 1 << 16
	reserve := (limit + page - 1) &^ (page - 1)
	if reserve == 0 || reserve < capBytes {
		return NewLimited(capBytes, limit, hit)
	}
	region, err := unix.Mmap(-1, 0, int(reserve), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return NewLimited(capBytes, limit, hit)
	}
	mappedBytes.Add(int64(len(region)))
	return &mappedMemory{region: region, limit: limit, hit: hit}
}

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > m.limit || m.region == nil {
		m.hit.Store(true)
		return nil
	}
	m.cur = size
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

// A plugin's base image (the host's snapshots) is also kept in a sealed
// memory file, so that resetting a reused instance costs what its
// runs write, not the size of its memory. The first reset maps the file
// privately over the start of the instance's reservation, replacing every
// page there at once; from then on the instance reads the file's pages,
// shared with every other instance of the plugin, and a page it writes
// becomes its own copy. A later reset asks the kernel which pages are the
// instance's own (/proc/self/pagemap) and copies the image back into just
// those. They stay the instance's, so the next run writes them without a
// fault: a page fault costs microseconds, more on a virtual machine, and
// a Go guest's call writes the same few dozen pages every time. Comparing
// the whole memory against the image instead (the fallback where memory
// is not mapped) reads megabytes on every reset.
type File struct {
	fd   int
	size int
}

// NewFile returns mem in a sealed memory file, or nil where one cannot be
// made (the instance is then reset by comparison). The file is closed when
// the File is dropped; mappings of it keep its pages.
func NewFile(mem []byte) *File {
	if len(mem) == 0 || len(mem)%unix.Getpagesize() != 0 {
		return nil
	}
	fd, err := unix.MemfdCreate("sandflow-base", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil
	}
	for off := 0; off < len(mem); {
		n, err := unix.Pwrite(fd, mem[off:], int64(off))
		if err != nil || n == 0 {
			unix.Close(fd)
			return nil
		}
		off += n
	}
	// Sealed: no one can change the image under the instances mapping it.
	// A private mapping stays writable; its writes are the instance's own.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS,
		unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil
	}
	f := &File{fd: fd, size: len(mem)}
	runtime.AddCleanup(f, func(fd int) { unix.Close(fd) }, fd)
	return f
}

// Reset makes the instance memory gm the base image again, where gm is a
// mapped memory of exactly the image's size and f the image's file. image
// is the image's bytes, which are f's. It returns false when gm is not
// such a memory, or the mapping fails: the caller compares and copies.
func Reset(gm Memory, f *File, image []byte) bool {
	m, ok := gm.(*mappedMemory)
	if !ok || f == nil || m.region == nil || m.size() != f.size || len(image) != f.size {
		return false
	}
	if m.based == f {
		if pages, err := m.ownPages(); err == nil {
			ps := unix.Getpagesize()
			for _, p := range pages {
				off := int(p) * ps
				copy(m.region[off:off+ps], image[off:off+ps])
			}
			return true
		}
	}
	_, err := unix.MmapPtr(f.fd, 0, unsafe.Pointer(unsafe.SliceData(m.region)), uintptr(f.size),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED|unix.MAP_NORESERVE)
	runtime.KeepAlive(f)
	if err != nil {
		// The old mapping is still in place (a failed MAP_FIXED leaves it),
		// but say nothing about its contents: the caller compares.
		m.based = nil
		return false
	}
	m.based = f
	return true
}

// OwnChunks returns the chunks of chunk bytes of the memory gm that may
// differ from the base image in f: its own pages, when gm is mapped over f
// since its last reset and a page is chunk bytes (past the image, a page
// the guest has not touched is still zero), valid until the next Reset or
// OwnChunks. ok is false when that is not known.
func OwnChunks(gm Memory, f *File, chunk int) (chunks []uint32, ok bool) {
	m, isMapped := gm.(*mappedMemory)
	if !isMapped || f == nil || m.based != f || m.region == nil || m.size() < f.size || unix.Getpagesize() != chunk {
		return nil, false
	}
	pages, err := m.ownPages()
	return pages, err == nil
}

// The bits of a /proc/self/pagemap entry read here (the kernel's
// Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent   = 1 << 63
	pmSwapped   = 1 << 62
	pmFileShare = 1 << 61 // a page of a file (or shared memory), not a private copy
)

var pagemap struct {
	once sync.Once
	f    *os.File
	err  error
}

// ownPages returns the indexes of the pages of the memory that are its own
// copies rather than the base file's: the pages written since the file was
// mapped (and any swapped out, which may be either).
func (m *mappedMemory) ownPages() ([]uint32, error) {
	pagemap.once.Do(func() { pagemap.f, pagemap.err = os.Open("/proc/self/pagemap") })
	if pagemap.err != nil {
		return nil, pagemap.err
	}
	ps := unix.Getpagesize()
	n := m.size() / ps
	if cap(m.pm) < n*8 {
		m.pm = make([]byte, n*8)
	}
	buf := m.pm[:n*8]
	first := uintptr(unsafe.Pointer(unsafe.SliceData(m.region))) / uintptr(ps)
	if _, err := pagemap.f.ReadAt(buf, int64(first)*8); err != nil {
		return nil, err
	}
	m.own = m.own[:0]
	for i := range n {
		e := binary.LittleEndian.Uint64(buf[i*8:])
		if e&pmSwapped != 0 || (e&pmPresent != 0 && e&pmFileShare == 0) {
			m.own = append(m.own, uint32(i))
		}
	}
	return m.own, nil
}
