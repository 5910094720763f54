package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/journal"
	"github.com/sandflow/sandflow/store/internal/runindex"
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
// never see a write a crash could lose. The transaction is committed
// into the bbolt file, a checkpoint, when journalMaxRecords records or
// journalMaxBytes bytes are waiting, journalMaxDelay after the first of
// them, and on Close; the journal is emptied after each. Open applies the records after the file's
// last checkpoint again, so a write that returned survives a crash as it
// would a bbolt commit.
//
// The journal file and its records' format are internal/journal's.

// JournalSuffix is appended to the store's path to name its journal. The
// journal exists while the store is open and is removed by Close once
// everything in it is in the main file.
const JournalSuffix = journal.Suffix

// When a checkpoint is due: this many records or bytes waiting, or this
// long after the first of them.
const (
	journalMaxRecords = 256
	journalMaxBytes   = 8 << 20
	journalMaxDelay   = 50 * time.Millisecond
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

// wtx is a write in progress: the open transaction, for reads, and the
// journal record its puts and deletes are written into.
type wtx struct {
	tx  *bolt.Tx
	rec []byte // header room, then the body
	// runs are the run records written, for the runs' index once the
	// record is in the journal.
	runs []runindex.Entry
}

// read returns a bucket to read. Writes go through put and del, which
// journal them.
func (w *wtx) read(id bucketID) *bolt.Bucket { return w.tx.Bucket(bucketNames[id]) }

// put stores v, sealed with its checksum (internal/integrity), under k. The
// sealed value is written into the record, and bbolt is given the
// record's bytes: they stay unchanged until the transaction ends (the
// record only grows past them, and pending keeps it).
func (w *wtx) put(id bucketID, k, v []byte) error {
	name := bucketNames[id]
	w.rec = append(w.rec, journal.OpPut, byte(id))
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
	w.rec = append(w.rec, journal.OpDelete, byte(id))
	w.rec = binary.AppendUvarint(w.rec, uint64(len(k)))
	w.rec = append(w.rec, k...)
	return nil
}

// changed says whether the write put or deleted anything.
func (w *wtx) changed() bool { return len(w.rec) > journal.Header }

// seal fills in the record's header.
func (w *wtx) seal(seq uint64) []byte { return journal.Seal(w.rec, seq) }

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
// end is refused (journal.Scan), and the journal left as it is.
func recoverJournal(db *bolt.DB, j *journal.File, data []byte) error {
	var last uint64
	if err := db.View(func(tx *bolt.Tx) error {
		var err error
		last, err = readCheckpoint(tx)
		return err
	}); err != nil {
		return err
	}
	redo, err := journal.Scan(data, last)
	if err != nil {
		return err
	}
	if len(redo) > 0 {
		last = journal.Seq(redo[len(redo)-1])
		err := db.Update(func(tx *bolt.Tx) error {
			for _, r := range redo {
				if err := journal.Apply(tx, r[journal.Header:], bucketNames[:]); err != nil {
					return &CorruptError{Bucket: "journal", Offset: -1, What: fmt.Sprintf("record %d: %v", journal.Seq(r), err)}
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
	return j.Restart(last + 1)
}
