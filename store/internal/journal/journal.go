// Package journal is the store's write-ahead journal: the file beside
// the bbolt file that a write appends one record to instead of
// committing bbolt, the records' format, and the scan that finds, on
// open, the records the main file does not hold yet.
//
// A record: its body's length (u32), a CRC-32C of the seq and the body
// (u32), the seq (u64, consecutive), then the body, which is a list of
// operations: OpPut or OpDelete, the bucket's index in the store's
// bucket list, the key (uvarint length, bytes) and, for a put, the value
// (the same; the value as stored, its checksum included). A record that
// does not check out ends the journal when nothing newer follows it: it
// is the torn tail of a write that never returned. One followed by an
// intact newer record is damage, and Scan refuses the journal.
//
// How the store uses it (one write transaction held open across writes,
// group commit, checkpoints) is told in the store's journal.go.
package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/sandflow/sandflow/store/internal/integrity"
	bolt "go.etcd.io/bbolt"
)

// Suffix is appended to the store's path to name its journal.
const Suffix = "-journal"

const (
	// Header is a record's header size: length, checksum and seq.
	Header = 16
	// OpPut and OpDelete are a body's operations.
	OpPut    = 1
	OpDelete = 2

	// mapBytes is how much of the journal file is mapped (mapJournal): far more
	// than the records a checkpoint usually finds (a few hundred of a
	// few KiB). A record that does not fit in what is left of it is
	// written with pwrite past it.
	mapBytes = 4 << 20
)

// ErrBroken is the store's ErrJournalBroken: the journal could not be
// appended to and left in a known state.
var ErrBroken = errors.New("store: journal broken, reopen the store")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Seal fills in the header of record r, whose body follows Header bytes
// of room, for seq.
func Seal(r []byte, seq uint64) []byte {
	binary.BigEndian.PutUint32(r[0:], uint32(len(r)-Header))
	binary.BigEndian.PutUint64(r[8:], seq)
	binary.BigEndian.PutUint32(r[4:], crc32.Checksum(r[8:], crcTable))
	return r
}

// Seq returns a sealed record's seq.
func Seq(r []byte) uint64 { return binary.BigEndian.Uint64(r[8:]) }

// Apply applies a record's body to tx; buckets are the store's bucket
// names, indexed as in the body. The keys and values are the
// body's bytes, which must stay unchanged until tx ends.
func Apply(tx *bolt.Tx, body []byte, buckets [][]byte) error {
	for len(body) > 0 {
		if len(body) < 2 || (body[0] != OpPut && body[0] != OpDelete) || int(body[1]) >= len(buckets) {
			return errors.New("bad operation")
		}
		op, b := body[0], tx.Bucket(buckets[body[1]])
		body = body[2:]
		k, rest, ok := Cut(body)
		if !ok || len(k) == 0 {
			return errors.New("bad key")
		}
		body = rest
		if op == OpDelete {
			if err := b.Delete(k); err != nil {
				return err
			}
			continue
		}
		v, rest, ok := Cut(body)
		if !ok {
			return errors.New("bad value")
		}
		body = rest
		if err := b.Put(k, v); err != nil {
			return err
		}
	}
	return nil
}

// Cut splits a uvarint-prefixed byte string off b.
func Cut(b []byte) (s, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// File is the open journal file.
//
// Where it can, the journal maps the first mapBytes of its file
// (reserved on disk, zeros to begin with) and copies records in, and a
// checkpoint starts it again at the beginning rather than truncating it.
// Records from before the checkpoint may then follow the new ones in the
// file; they end the journal when it is read, as a torn record does: their
// seqs are not the next one (Scan). A copy into a shared mapping
// is in the page cache at once, so it survives the process as a write
// does, and fdatasync writes it to disk as it does a write's pages.
type File struct {
	f    *os.File
	path string
	m    []byte // the file's first bytes, mapped; nil when not
	size int64  // where the next record goes
	sync bool
	next uint64 // the next record's seq
	// written counts the bytes ever appended, across resets: a writer
	// waits until what the store knows is synced reaches the count after its record.
	written atomic.Uint64
}

// Open opens (or creates) the journal of the store at path and returns
// its bytes. sync says writers sync it (Fdatasync); without, it is not
// synced.
func Open(path string, sync bool) (*File, []byte, error) {
	jp := path + Suffix
	_, statErr := os.Stat(jp)
	f, err := os.OpenFile(jp, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("store: open journal: %w", err)
	}
	j := &File{f: f, path: jp, sync: sync}
	if errors.Is(statErr, os.ErrNotExist) && sync {
		// The new name must survive a crash with the records written to it.
		if err := syncDir(filepath.Dir(jp)); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("store: sync journal directory: %w", err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("store: read journal: %w", err)
	}
	return j, data, nil
}

// RecordAt returns the record at the start of data when one is there and
// checks out.
func RecordAt(data []byte) ([]byte, bool) {
	if len(data) < Header {
		return nil, false
	}
	n := binary.BigEndian.Uint32(data)
	if n == 0 || uint64(n) > uint64(len(data)-Header) {
		return nil, false
	}
	r := data[:Header+int(n)]
	if crc32.Checksum(r[8:], crcTable) != binary.BigEndian.Uint32(r[4:]) {
		return nil, false
	}
	return r, true
}

// Scan returns the records of a journal's bytes that follow the
// main file's checkpoint (the record seq last), in order.
//
// The records that check out are read from the start; they end at the
// first that does not, or whose seq is not the next. After that come the
// torn tail of a write that never returned, or bytes of records from
// before a checkpoint (a mapped journal starts again at its beginning,
// File.Reset), whose seqs are at most the checkpoint's. An intact
// record after that point with a seq above the last one taken was
// written after the one that failed: then that one is damaged, not torn,
// and the journal is corrupt.
func Scan(data []byte, last uint64) ([][]byte, error) {
	var redo [][]byte
	off := 0
	for {
		r, ok := RecordAt(data[off:])
		if !ok {
			break
		}
		seq := Seq(r)
		if seq <= last && len(redo) == 0 {
			off += len(r)
			continue // in the main file already
		}
		if seq != last+1 {
			break
		}
		redo = append(redo, r)
		last = seq
		off += len(r)
	}
	if off < len(data) {
		if at, seq, ok := laterRecord(data, off, last); ok {
			what := "the record there is damaged"
			if r, ok := RecordAt(data[off:]); ok {
				what = fmt.Sprintf("record %d is there", Seq(r))
			}
			return nil, &integrity.CorruptError{Bucket: "journal", Offset: int64(off), What: fmt.Sprintf("record %d was due and %s, yet record %d follows intact at offset %d: damage, not a torn last write", last+1, what, seq, at)}
		}
	}
	return redo, nil
}

// laterRecord looks for an intact record at or after offset from whose
// seq is above floor.
func laterRecord(data []byte, from int, floor uint64) (int, uint64, bool) {
	for at := from; at+Header <= len(data); at++ {
		seq := binary.BigEndian.Uint64(data[at+8:])
		if seq <= floor || seq > floor+1<<32 {
			continue
		}
		if r, ok := RecordAt(data[at:]); ok {
			return at, Seq(r), true
		}
	}
	return 0, 0, false
}

// HasRecords reports whether the journal of the store at path holds a
// record that checks out.
func HasRecords(path string) bool {
	data, err := os.ReadFile(path + Suffix)
	if err != nil {
		return false
	}
	_, _, ok := laterRecord(data, 0, 0)
	return ok
}

// Append writes a sealed record at the journal's end; the writer then
// syncs it (Fdatasync). On failure the journal is cut back to where it was.
func (j *File) Append(r []byte) error {
	if j.size+int64(len(r)) <= int64(len(j.m)) {
		copy(j.m[j.size:], r)
		j.size += int64(len(r))
		j.written.Add(uint64(len(r)))
		j.next++
		return nil
	}
	_, err := j.f.WriteAt(r, j.size)
	if err != nil {
		if terr := j.f.Truncate(j.size); terr != nil {
			return fmt.Errorf("%w: write: %v; cutting back: %v", ErrBroken, err, terr)
		}
		return fmt.Errorf("store: journal write: %w", err)
	}
	j.size += int64(len(r))
	j.written.Add(uint64(len(r)))
	j.next++
	return nil
}

// Reset empties the journal after a checkpoint. A mapped journal starts
// again at its beginning; records left behind (by that, or by a failed
// truncate) are older than the checkpoint, which Open skips.
func (j *File) Reset() {
	if j.m != nil {
		j.size = 0
		return
	}
	if j.f.Truncate(0) == nil {
		j.size = 0
	}
}

// Restart empties the journal after the records it held are in the
// main file, whose last is seq next-1, and maps it where it can.
func (j *File) Restart(next uint64) error {
	j.next = next
	if err := j.f.Truncate(0); err != nil {
		return fmt.Errorf("store: empty journal: %w", err)
	}
	j.mapJournal()
	return nil
}

// Close unmaps and closes the file.
func (j *File) Close() error {
	j.unmapJournal()
	return j.f.Close()
}

// Path is the journal file's path.
func (j *File) Path() string { return j.path }

// Size is where the next record goes: the bytes appended since the last
// Reset.
func (j *File) Size() int64 { return j.size }

// Next is the next record's seq.
func (j *File) Next() uint64 { return j.next }

// Written counts the bytes ever appended, across resets; safe to call
// without the writer's lock.
func (j *File) Written() uint64 { return j.written.Load() }

// Syncs says writers sync the journal (the store is not NoSync).
func (j *File) Syncs() bool { return j.sync }

// Mapped says the journal's first bytes are mapped (mapJournal).
func (j *File) Mapped() bool { return j.m != nil }

// OS is the journal's open file, for Fdatasync.
func (j *File) OS() *os.File { return j.f }

// syncDir syncs a directory, so a file created in it is found after a
// crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
