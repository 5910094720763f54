package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/sandflow/sandflow/store/internal/integrity"
	bolt "go.etcd.io/bbolt"
)

// The journal makes a commit one appended record instead of a bbolt
// commit, which writes every page it touched with its own syscall and
// syncs twice.
//
// Every write (update) is applied to one bbolt write transaction that
// stays open across writes, and the keys and values it put or deleted are
// appended to the file's journal (the store's path + JournalSuffix) as one
// record; unless NoSync, the write then waits until the journal is synced
// past its record, by one fdatasync that serves every write appended
// before it began (group commit), and returns. Reads see the open
// transaction, after syncing what is appended and not yet synced, so they
// never see a write a crash could lose. The transaction is committed into the bbolt file, a
// checkpoint, when journalMaxRecords records or journalMaxBytes bytes are
// waiting, journalMaxDelay after the first of them, and on Close; the
// journal is emptied after each. Open applies the records after the file's
// last checkpoint again, so a write that returned survives a crash as it
// would a bbolt commit.
//
// A record: its body's length (u32), a CRC-32C of the seq and the body
// (u32), the seq (u64, consecutive), then the body, which is a list of
// operations: opPut or opDelete, the bucket's index in bucketNames, the
// key (uvarint length, bytes) and, for a put, the value (the same; the
// value as stored, its checksum included). A record that does not check
// out ends the journal when nothing newer follows it: it is the torn tail
// of a write that never returned. One followed by an intact newer record
// is damage, and Open refuses the journal (scanJournal).

// JournalSuffix is appended to the store's path to name its journal. The
// journal exists while the store is open and is removed by Close once
// everything in it is in the main file.
const JournalSuffix = "-journal"

const (
	journalMaxRecords = 256
	journalMaxBytes   = 8 << 20
	journalMaxDelay   = 50 * time.Millisecond

	// journalMapBytes is how much of the journal file is mapped
	// (mapJournal): far more than the records a checkpoint usually finds
	// (up to journalMaxRecords of a few KiB). A record that does not fit
	// in what is left of it is written with pwrite past it.
	journalMapBytes = 4 << 20

	journalHeader = 16
	opPut         = 1
	opDelete      = 2
)

// bucketID names a bucket in a journal record.
type bucketID uint8

const (
	bRuns bucketID = iota
	bEvents
	bTimers
	bAsks
	bHooks
	bPlugins
	bModules
	bMeta
	bSessions
	bSnapshots
	bStates
)

// bucketNames is indexed by bucketID; the order is part of the journal's
// format.
var bucketNames = [...][]byte{bucketRuns, bucketEvents, bucketTimers, bucketAsks, bucketHooks, bucketPlugins, bucketModules, bucketMeta, bucketSessions, bucketSnapshots, bucketStates}

// metaJournal is the meta key holding the seq of the last journal record
// in the main file (8 bytes, big-endian).
var metaJournal = []byte("journal")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// wtx is a write in progress: the open transaction, for reads, and the
// journal record its puts and deletes are written into.
type wtx struct {
	tx  *bolt.Tx
	rec []byte // header room, then the body
	// runs are the run records written, for the runs' index once the
	// record is in the journal.
	runs []indexEntry
}

// read returns a bucket to read. Writes go through put and del, which
// journal them.
func (w *wtx) read(id bucketID) *bolt.Bucket { return w.tx.Bucket(bucketNames[id]) }

// put stores v, sealed with its checksum (integrity.go), under k. The
// sealed value is written into the record, and bbolt is given the
// record's bytes: they stay unchanged until the transaction ends (the
// record only grows past them, and pending keeps it).
func (w *wtx) put(id bucketID, k, v []byte) error {
	name := bucketNames[id]
	w.rec = append(w.rec, opPut, byte(id))
	w.rec = binary.AppendUvarint(w.rec, uint64(len(k)))
	w.rec = append(w.rec, k...)
	w.rec = binary.AppendUvarint(w.rec, uint64(len(v)+integrity.SumSize))
	start := len(w.rec)
	w.rec = integrity.Seal(w.rec, name, k, v)
	sv := w.rec[start:len(w.rec):len(w.rec)]
	if err := w.tx.Bucket(name).Put(k, sv); err != nil {
		return err
	}
	return nil
}

// get returns the checked value under k, nil when there is none.
func (w *wtx) get(id bucketID, k []byte) ([]byte, error) {
	return integrity.Open(bucketNames[id], k, w.tx.Bucket(bucketNames[id]).Get(k))
}

// getValue returns the checked value under k in tx, nil when there is
// none.
func getValue(tx *bolt.Tx, id bucketID, k []byte) ([]byte, error) {
	return integrity.Open(bucketNames[id], k, tx.Bucket(bucketNames[id]).Get(k))
}

func (w *wtx) del(id bucketID, k []byte) error {
	if err := w.tx.Bucket(bucketNames[id]).Delete(k); err != nil {
		return err
	}
	w.rec = append(w.rec, opDelete, byte(id))
	w.rec = binary.AppendUvarint(w.rec, uint64(len(k)))
	w.rec = append(w.rec, k...)
	return nil
}

// changed says whether the write put or deleted anything.
func (w *wtx) changed() bool { return len(w.rec) > journalHeader }

// seal fills in the record's header.
func (w *wtx) seal(seq uint64) []byte {
	r := w.rec
	binary.BigEndian.PutUint32(r[0:], uint32(len(r)-journalHeader))
	binary.BigEndian.PutUint64(r[8:], seq)
	binary.BigEndian.PutUint32(r[4:], crc32.Checksum(r[8:], crcTable))
	return r
}

// recordSeq returns a sealed record's seq.
func recordSeq(r []byte) uint64 { return binary.BigEndian.Uint64(r[8:]) }

// applyRecord applies a record's body to tx. The keys and values are the
// body's bytes, which must stay unchanged until tx ends.
func applyRecord(tx *bolt.Tx, body []byte) error {
	for len(body) > 0 {
		if len(body) < 2 || (body[0] != opPut && body[0] != opDelete) || int(body[1]) >= len(bucketNames) {
			return errors.New("bad operation")
		}
		op, b := body[0], tx.Bucket(bucketNames[body[1]])
		body = body[2:]
		k, rest, ok := cutBytes(body)
		if !ok || len(k) == 0 {
			return errors.New("bad key")
		}
		body = rest
		if op == opDelete {
			if err := b.Delete(k); err != nil {
				return err
			}
			continue
		}
		v, rest, ok := cutBytes(body)
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

// cutBytes splits a uvarint-prefixed byte string off b.
func cutBytes(b []byte) (s, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// journal is the open journal file.
//
// Where it can, the journal maps the first journalMapBytes of its file
// (reserved on disk, zeros to begin with) and copies records in, and a
// checkpoint starts it again at the beginning rather than truncating it.
// Records from before the checkpoint may then follow the new ones in the
// file; they end the journal when it is read, as a torn record does: their
// seqs are not the next one (recoverJournal). A copy into a shared mapping
// is in the page cache at once, so it survives the process as a write
// does, and fdatasync writes it to disk as it does a write's pages.
type journal struct {
	f    *os.File
	path string
	m    []byte // the file's first bytes, mapped; nil when not
	size int64  // where the next record goes
	sync bool
	next uint64 // the next record's seq
	// written counts the bytes ever appended, across resets: a writer
	// waits until synced (Bolt.synced) reaches the count after its record.
	written atomic.Uint64
}

// openJournal opens (or creates) path's journal and returns its bytes.
func openJournal(path string, sync bool) (*journal, []byte, error) {
	jp := path + JournalSuffix
	_, statErr := os.Stat(jp)
	f, err := os.OpenFile(jp, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("store: open journal: %w", err)
	}
	j := &journal{f: f, path: jp, sync: sync}
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

// recordAt returns the record at the start of data when one is there and
// checks out.
func recordAt(data []byte) ([]byte, bool) {
	if len(data) < journalHeader {
		return nil, false
	}
	n := binary.BigEndian.Uint32(data)
	if n == 0 || uint64(n) > uint64(len(data)-journalHeader) {
		return nil, false
	}
	r := data[:journalHeader+int(n)]
	if crc32.Checksum(r[8:], crcTable) != binary.BigEndian.Uint32(r[4:]) {
		return nil, false
	}
	return r, true
}

// scanJournal returns the records of a journal's bytes that follow the
// main file's checkpoint (the record seq last), in order.
//
// The records that check out are read from the start; they end at the
// first that does not, or whose seq is not the next. After that come the
// torn tail of a write that never returned, or bytes of records from
// before a checkpoint (a mapped journal starts again at its beginning,
// journal.reset), whose seqs are at most the checkpoint's. An intact
// record after that point with a seq above the last one taken was
// written after the one that failed: then that one is damaged, not torn,
// and the journal is corrupt.
func scanJournal(data []byte, last uint64) ([][]byte, error) {
	var redo [][]byte
	off := 0
	for {
		r, ok := recordAt(data[off:])
		if !ok {
			break
		}
		seq := recordSeq(r)
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
			if r, ok := recordAt(data[off:]); ok {
				what = fmt.Sprintf("record %d is there", recordSeq(r))
			}
			return nil, &CorruptError{Bucket: "journal", Offset: int64(off), What: fmt.Sprintf("record %d was due and %s, yet record %d follows intact at offset %d: damage, not a torn last write", last+1, what, seq, at)}
		}
	}
	return redo, nil
}

// laterRecord looks for an intact record at or after offset from whose
// seq is above floor.
func laterRecord(data []byte, from int, floor uint64) (int, uint64, bool) {
	for at := from; at+journalHeader <= len(data); at++ {
		seq := binary.BigEndian.Uint64(data[at+8:])
		if seq <= floor || seq > floor+1<<32 {
			continue
		}
		if r, ok := recordAt(data[at:]); ok {
			return at, recordSeq(r), true
		}
	}
	return 0, 0, false
}

// journalHasRecords reports whether path's journal holds a record that
// checks out.
func journalHasRecords(path string) bool {
	data, err := os.ReadFile(path + JournalSuffix)
	if err != nil {
		return false
	}
	_, _, ok := laterRecord(data, 0, 0)
	return ok
}

// append writes a sealed record at the journal's end; Bolt.durable syncs
// it. On failure the journal is cut back to where it was.
func (j *journal) append(r []byte) error {
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
			return fmt.Errorf("%w: write: %v; cutting back: %v", ErrJournalBroken, err, terr)
		}
		return fmt.Errorf("store: journal write: %w", err)
	}
	j.size += int64(len(r))
	j.written.Add(uint64(len(r)))
	j.next++
	return nil
}

// syncJournal syncs the journal file; tests make it fail.
var syncJournal = fdatasync

// reset empties the journal after a checkpoint. A mapped journal starts
// again at its beginning; records left behind (by that, or by a failed
// truncate) are older than the checkpoint, which Open skips.
func (j *journal) reset() {
	if j.m != nil {
		j.size = 0
		return
	}
	if j.f.Truncate(0) == nil {
		j.size = 0
	}
}

// readCheckpoint reads the seq of the last journal record in the main
// file (0 before the first).
func readCheckpoint(tx *bolt.Tx) (uint64, error) {
	v, err := getValue(tx, bMeta, metaJournal)
	if err != nil || v == nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, integrity.Corruptf(bucketMeta, metaJournal, "journal checkpoint is %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func putCheckpoint(tx *bolt.Tx, seq uint64) error {
	return tx.Bucket(bucketMeta).Put(metaJournal, integrity.Seal(nil, bucketMeta, metaJournal, binary.BigEndian.AppendUint64(nil, seq)))
}

// recoverJournal applies the records after the file's last checkpoint to
// the main file, then empties the journal. A journal damaged before its
// end is refused (scanJournal), and the journal left as it is.
func recoverJournal(db *bolt.DB, j *journal, data []byte) error {
	var last uint64
	if err := db.View(func(tx *bolt.Tx) error {
		var err error
		last, err = readCheckpoint(tx)
		return err
	}); err != nil {
		return err
	}
	redo, err := scanJournal(data, last)
	if err != nil {
		return err
	}
	if len(redo) > 0 {
		last = recordSeq(redo[len(redo)-1])
		err := db.Update(func(tx *bolt.Tx) error {
			for _, r := range redo {
				if err := applyRecord(tx, r[journalHeader:]); err != nil {
					return &CorruptError{Bucket: "journal", Offset: -1, What: fmt.Sprintf("record %d: %v", recordSeq(r), err)}
				}
			}
			return putCheckpoint(tx, last)
		})
		if err == nil {
			err = db.Sync() // before the journal is emptied, even without fsync
		}
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				return err
			}
			return fmt.Errorf("store: recover journal: %w", err)
		}
	}
	j.next = last + 1
	if err := j.f.Truncate(0); err != nil {
		return fmt.Errorf("store: empty journal: %w", err)
	}
	j.mapJournal()
	return nil
}

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
