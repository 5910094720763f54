// Package pagecheck reads a bbolt file's structure with plain reads and
// bounds checks before bbolt maps it, so that a damaged file is reported
// rather than made to panic, loop or fault bbolt.
package pagecheck

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"

	"github.com/sandflow/sandflow/store/internal/integrity"
)

// bbolt reads its file through a memory map and trusts what it finds: a
// damaged page makes it panic, loop or fault (SIGSEGV, SIGBUS). So the store
// reads the file's structure itself first, with plain reads and bounds
// checks, before bbolt sees it: the two meta pages and their checksums,
// then every page reachable from the meta bbolt will use (its id in range,
// its header naming itself, its type, its overflow, each page reached
// once, every element inside its page, keys in order within pages and
// within the ranges their parents give them), and the freelist page when
// there is one. This is the layout of bbolt's format version 2, which is
// what the bbolt this store is built with writes (checked by a test).

const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	boltPageHeader  = 16
	boltElemSize    = 16 // a branch or a leaf element
	boltBranchPage  = 0x01
	boltLeafPage    = 0x02
	boltMetaPage    = 0x04
	boltFreePage    = 0x10
	boltBucketLeaf  = 0x01
	boltNoFreelist  = ^uint64(0)
	boltMaxPageSize = 1 << 24
	boltMaxDepth    = 64
)

// Native byte order: bbolt writes its structures as they are in memory.
var le = binary.NativeEndian

// Meta is a meta page's fields.
type Meta struct {
	PageSize uint32
	Root     uint64
	Freelist uint64
	PGID     uint64 // the high-water mark: pages 0..PGID-1 are in use
	TxID     uint64
}

// parseMeta reads the meta at the start of page buffer b; ok is false
// when it is not a valid meta page.
func parseMeta(b []byte) (m Meta, magic, ok bool) {
	if len(b) < 80 {
		return m, false, false
	}
	magic = le.Uint32(b[16:]) == boltMagic
	m = Meta{PageSize: le.Uint32(b[24:]), Root: le.Uint64(b[32:]), Freelist: le.Uint64(b[48:]), PGID: le.Uint64(b[56:]), TxID: le.Uint64(b[64:])}
	h := fnv.New64a()
	h.Write(b[16:72])
	ok = magic && le.Uint32(b[20:]) == boltVersion && le.Uint16(b[8:]) == boltMetaPage && h.Sum64() == le.Uint64(b[72:])
	return m, magic, ok
}

// Result is what File found.
type Result struct {
	PageSize int
	Meta     Meta // the meta bbolt will use
	// BadMeta is the meta page (0 or 1) that did not validate, or -1.
	BadMeta int
	Pages   uint64 // pages reachable
}

// File checks the structure of the database file f (size bytes, not
// 0) as bbolt would read it. It returns an *integrity.NotStoreError for a
// file that is not a bbolt file at all, and an *integrity.CorruptError
// for a damaged one.
func File(f io.ReaderAt, size int64, path string) (*Result, error) {
	fc, err := metas(f, size, path)
	if err != nil {
		return nil, err
	}
	ps := int64(fc.PageSize)
	m := fc.Meta
	if m.PGID < 4 || m.PGID > uint64(size/ps) {
		return nil, &integrity.CorruptError{Bucket: "file", Offset: size, What: fmt.Sprintf("file is %d bytes; its %d pages of %d bytes need %d (cut short?)", size, m.PGID, ps, m.PGID*uint64(ps))}
	}
	if m.Root < 2 || m.Root >= m.PGID {
		return nil, &integrity.CorruptError{Bucket: "file", Offset: -1, What: fmt.Sprintf("root page %d is outside pages 2..%d", m.Root, m.PGID-1)}
	}
	w := &pageWalker{f: f, ps: ps, hwm: m.PGID, seen: make([]uint64, (m.PGID+63)/64)}
	w.mark(0, 0)
	w.mark(1, 0)
	if err := w.page(m.Root, nil, nil, 0, "root"); err != nil {
		return nil, err
	}
	if m.Freelist != boltNoFreelist {
		if err := w.freelist(m.Freelist); err != nil {
			return nil, err
		}
	}
	fc.Pages = w.count
	return fc, nil
}

// metas reads the two meta pages and picks the one bbolt will use: the
// valid one with the higher txid, or the only valid one (then BadMeta
// names the other).
func metas(f io.ReaderAt, size int64, path string) (*Result, error) {
	head := make([]byte, 4096)
	n, err := f.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("store: read %s: %w", path, err)
	}
	head = head[:n]
	m0, magic0, ok0 := parseMeta(head)
	fc := &Result{BadMeta: -1}
	var m1 Meta
	var magic1, ok1 bool
	if ok0 {
		fc.PageSize = int(m0.PageSize)
		if !validPageSize(fc.PageSize) {
			return nil, &integrity.CorruptError{Bucket: "file", Offset: 24, What: fmt.Sprintf("meta page 0 gives page size %d", m0.PageSize)}
		}
		b := make([]byte, 96)
		if n, _ := f.ReadAt(b, int64(fc.PageSize)); n == len(b) {
			m1, magic1, ok1 = parseMeta(b)
		}
	} else {
		// Find meta page 1 where bbolt would look for it: at each page
		// size from 1 KiB.
		for ps := 1024; ps <= boltMaxPageSize && int64(ps) < size; ps <<= 1 {
			b := make([]byte, 96)
			if n, _ := f.ReadAt(b, int64(ps)); n < len(b) {
				break
			}
			if m, magic, ok := parseMeta(b); ok && int(m.PageSize) == ps {
				m1, magic1, ok1 = m, magic, ok
				fc.PageSize = ps
				break
			} else if magic {
				magic1 = true
			}
		}
	}
	switch {
	case !ok0 && !ok1 && !magic0 && !magic1:
		return nil, &integrity.NotStoreError{Path: path, Reason: "no bbolt header: a file of another format"}
	case !ok0 && !ok1:
		return nil, &integrity.CorruptError{Bucket: "file", Offset: 0, What: "both meta pages are damaged"}
	case ok0 && ok1 && m0.PageSize != m1.PageSize:
		return nil, &integrity.CorruptError{Bucket: "file", Offset: int64(fc.PageSize), What: fmt.Sprintf("meta pages disagree on the page size (%d, %d)", m0.PageSize, m1.PageSize)}
	case !ok0:
		fc.BadMeta, fc.Meta = 0, m1
	case !ok1:
		fc.BadMeta, fc.Meta = 1, m0
	case m1.TxID > m0.TxID:
		fc.Meta = m1
	default:
		fc.Meta = m0
	}
	return fc, nil
}

func validPageSize(ps int) bool { return ps >= 512 && ps <= boltMaxPageSize && ps&(ps-1) == 0 }

type pageWalker struct {
	f     io.ReaderAt
	ps    int64
	hwm   uint64
	seen  []uint64
	count uint64
}

func (w *pageWalker) bad(id uint64, format string, args ...any) *integrity.CorruptError {
	return &integrity.CorruptError{Bucket: "file", Offset: int64(id) * w.ps, What: fmt.Sprintf("page %d: ", id) + fmt.Sprintf(format, args...)}
}

// mark notes pages id..id+overflow as reached; false when one already was.
func (w *pageWalker) mark(id uint64, overflow uint32) bool {
	for p := id; p <= id+uint64(overflow); p++ {
		if w.seen[p/64]&(1<<(p%64)) != 0 {
			return false
		}
		w.seen[p/64] |= 1 << (p % 64)
		w.count++
	}
	return true
}

// read reads page id and its overflow pages.
func (w *pageWalker) read(id uint64, from string) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, w.bad(id, "referenced by %s, outside pages 2..%d", from, w.hwm-1)
	}
	b := make([]byte, w.ps)
	if _, err := w.f.ReadAt(b, int64(id)*w.ps); err != nil {
		return nil, w.bad(id, "unreadable: %v", err)
	}
	if got := le.Uint64(b); got != id {
		return nil, w.bad(id, "its header says it is page %d", got)
	}
	overflow := le.Uint32(b[12:])
	if uint64(overflow) >= w.hwm-id {
		return nil, w.bad(id, "overflow of %d pages runs past the last page %d", overflow, w.hwm-1)
	}
	if !w.mark(id, overflow) {
		return nil, w.bad(id, "reached twice (referenced by %s)", from)
	}
	if overflow > 0 {
		b = append(b, make([]byte, int64(overflow)*w.ps)...)
		if _, err := w.f.ReadAt(b[w.ps:], int64(id+1)*w.ps); err != nil {
			return nil, w.bad(id, "unreadable: %v", err)
		}
	}
	return b, nil
}

// page checks the tree under page id; its keys must lie in [lo, hi)
// (nil: unbounded).
func (w *pageWalker) page(id uint64, lo, hi []byte, depth int, from string) error {
	if depth > boltMaxDepth {
		return w.bad(id, "tree deeper than %d", boltMaxDepth)
	}
	b, err := w.read(id, from)
	if err != nil {
		return err
	}
	return w.nodes(id, b, lo, hi, depth)
}

// nodes checks the elements of page b (a page in the file, or an inline
// bucket's page inside a value).
func (w *pageWalker) nodes(id uint64, b, lo, hi []byte, depth int) error {
	flags, count := le.Uint16(b[8:]), int(le.Uint16(b[10:]))
	if boltPageHeader+count*boltElemSize > len(b) {
		return w.bad(id, "%d elements do not fit in %d bytes", count, len(b))
	}
	prev := lo
	for i := 0; i < count; i++ {
		e := boltPageHeader + i*boltElemSize
		var pos, ksize, vsize uint32
		var child uint64
		var eflags uint32
		switch flags {
		case boltBranchPage:
			pos, ksize, child = le.Uint32(b[e:]), le.Uint32(b[e+4:]), le.Uint64(b[e+8:])
		case boltLeafPage:
			eflags, pos, ksize, vsize = le.Uint32(b[e:]), le.Uint32(b[e+4:]), le.Uint32(b[e+8:]), le.Uint32(b[e+12:])
		default:
			return w.bad(id, "type %#x where a branch or leaf page belongs", flags)
		}
		start := uint64(e) + uint64(pos)
		end := start + uint64(ksize) + uint64(vsize)
		if pos < boltElemSize || end > uint64(len(b)) {
			return w.bad(id, "element %d (%d bytes at %d) outside the page's %d bytes", i, ksize+vsize, start, len(b))
		}
		key := b[start : start+uint64(ksize)]
		if (prev != nil && (bytes.Compare(key, prev) < 0 || i > 0 && bytes.Equal(key, prev))) || (hi != nil && bytes.Compare(key, hi) >= 0) {
			return w.bad(id, "element %d: key %s out of order", i, integrity.PrintKey(key))
		}
		prev = key
		if flags == boltBranchPage {
			var next []byte
			if i+1 < count {
				ne := boltPageHeader + (i+1)*boltElemSize
				np, nk := uint64(ne)+uint64(le.Uint32(b[ne:])), uint64(le.Uint32(b[ne+4:]))
				if np+nk > uint64(len(b)) {
					return w.bad(id, "element %d outside the page", i+1)
				}
				next = b[np : np+nk]
			} else {
				next = hi
			}
			if err := w.page(child, key, next, depth+1, fmt.Sprintf("page %d", id)); err != nil {
				return err
			}
			continue
		}
		if eflags&boltBucketLeaf == 0 {
			continue
		}
		v := b[start+uint64(ksize) : end]
		if len(v) < 16 {
			return w.bad(id, "bucket %s: header is %d bytes", integrity.PrintKey(key), len(v))
		}
		if root := le.Uint64(v); root != 0 {
			if err := w.page(root, nil, nil, depth+1, "bucket "+integrity.PrintKey(key)); err != nil {
				return err
			}
			continue
		}
		inline := v[16:]
		if len(inline) < boltPageHeader || le.Uint16(inline[8:]) != boltLeafPage {
			return w.bad(id, "bucket %s: inline page is not a leaf", integrity.PrintKey(key))
		}
		if err := w.nodes(id, inline, nil, nil, depth+1); err != nil {
			return err
		}
	}
	if flags == boltBranchPage && count == 0 {
		return w.bad(id, "empty branch page")
	}
	return nil
}

// freelist checks the freelist page: its type and that the ids it lists
// are pages of the file.
func (w *pageWalker) freelist(id uint64) error {
	b, err := w.read(id, "the meta page's freelist")
	if err != nil {
		return err
	}
	if f := le.Uint16(b[8:]); f != boltFreePage {
		return w.bad(id, "type %#x where the freelist belongs", f)
	}
	idx, count := 0, uint64(le.Uint16(b[10:]))
	if count == 0xFFFF {
		idx, count = 1, le.Uint64(b[boltPageHeader:])
	}
	if count > uint64(len(b)-boltPageHeader)/8-uint64(idx) {
		return w.bad(id, "freelist of %d ids does not fit in its pages", count)
	}
	for i := uint64(0); i < count; i++ {
		if p := le.Uint64(b[boltPageHeader+8*(uint64(idx)+i):]); p < 2 || p >= w.hwm {
			return w.bad(id, "freelist names page %d, outside pages 2..%d", p, w.hwm-1)
		}
	}
	return nil
}

// Size is f's size.
func Size(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
