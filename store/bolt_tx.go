package store

import (
	"errors"
	"fmt"

	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/journal"
	bolt "go.etcd.io/bbolt"
)

// view runs fn on the open write transaction when there is one, so it
// sees every write that returned, else in a read transaction.
func (s *Bolt) view(fn func(tx *bolt.Tx) error) error {
	return integrity.Guard("read", s.markBroken, func() error { return s.view1(fn) })
}

func (s *Bolt) view1(fn func(tx *bolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if s.readOnly {
		return s.db.View(fn)
	}
	s.wmu.Lock()
	if s.tx == nil && len(s.pending) == 0 {
		s.wmu.Unlock()
		return s.db.View(fn)
	}
	defer s.wmu.Unlock()
	// No write is seen before it is durable: what was appended and waits
	// for a sync is synced now, with the writes held off. After a failed
	// sync nothing is read.
	if err := s.durable(s.j.Written()); err != nil {
		s.broken = err
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	return fn(s.tx)
}

// update runs fn on the open write transaction and journals what it
// wrote. When fn fails after writing, the transaction is rebuilt from the
// journal's records, so nothing of fn's stays.
func (s *Bolt) update(fn func(w *wtx) error) error {
	if s.readOnly {
		return ErrReadOnly
	}
	return integrity.Guard("write", s.markBroken, func() error { return s.update1(fn) })
}

// markBroken stops the store's writes after bbolt failed on the file in
// the middle of a transaction, whose state is then unknown.
func (s *Bolt) markBroken(err error) {
	if s.readOnly {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.broken == nil {
		s.broken = err
	}
	if s.tx != nil {
		rollback(s.tx)
		s.tx = nil
	}
}

// rollback ends a transaction, which bbolt may fail to do on a damaged
// file: that is then known already.
func rollback(tx *bolt.Tx) {
	_ = integrity.Guard("rollback", nil, tx.Rollback)
}

func (s *Bolt) update1(fn func(w *wtx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	end, err := s.apply1(fn)
	if err != nil || end == 0 {
		return err
	}
	if err := s.durable(end); err != nil {
		s.wmu.Lock()
		if s.broken == nil {
			s.broken = err
		}
		s.wmu.Unlock()
		return err
	}
	return nil
}

// apply1 is update's part under wmu: fn applied and its record appended.
// It returns the journal count the record ends at, or 0 when fn wrote
// nothing.
func (s *Bolt) apply1(fn func(w *wtx) error) (uint64, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.broken != nil {
		return 0, s.broken
	}
	if err := s.begin(); err != nil {
		return 0, err
	}
	w := wtx{tx: s.tx, rec: make([]byte, journal.Header, max(s.recCap, minRecCap))}
	err := fn(&w)
	if !w.changed() {
		return 0, err
	}
	if err == nil {
		r := w.seal(s.j.Next())
		s.recCap = min(len(r), maxRecCap)
		if err = s.j.Append(r); err == nil {
			s.idx.Put(w.runs)
			end := s.j.Written()
			s.pending = append(s.pending, r)
			s.jbytes += len(r)
			if len(s.pending) >= journalMaxRecords || s.jbytes >= journalMaxBytes {
				// The write is in the journal: a failed checkpoint is
				// tried again by the next write or by Close.
				_ = s.checkpoint()
			} else if !s.armed {
				s.armed = true
				s.timer.Reset(s.delay)
			}
			return end, nil
		}
		if errors.Is(err, ErrJournalBroken) {
			s.broken = err
		}
	}
	// Undo fn's writes: the transaction again, from the records before.
	s.tx.Rollback()
	s.tx = nil
	if berr := s.begin(); berr != nil {
		return 0, errors.Join(err, berr)
	}
	return 0, err
}

// syncJournal syncs the journal file; tests make it fail.
var syncJournal = journal.Fdatasync

// The bounds of Bolt.recCap.
const (
	minRecCap = 512
	maxRecCap = 64 << 10
)

// durable returns when the journal is synced up to count end (at once
// without fsync). The first writer to find no sync running syncs
// everything appended so far; the others wait for it, and go again if it
// did not reach them.
func (s *Bolt) durable(end uint64) error {
	if !s.j.Syncs() {
		return nil
	}
	s.smu.Lock()
	defer s.smu.Unlock()
	for s.synced < end {
		if s.syncErr != nil {
			return s.syncErr
		}
		if s.syncing {
			s.synCond.Wait()
			continue
		}
		s.syncing = true
		target := s.j.Written() // not below end: end was read after its append
		s.smu.Unlock()
		err := syncJournal(s.j.OS())
		s.smu.Lock()
		s.syncing = false
		if err != nil {
			// What a failed sync left on disk is unknown: the store stops.
			s.syncErr = fmt.Errorf("%w: sync: %v", ErrJournalBroken, err)
		} else if target > s.synced {
			s.synced = target
		}
		s.synCond.Broadcast()
	}
	return nil
}

// allDurable notes that everything appended is durable (in the main
// file, after a checkpoint), releasing the writers waiting for a sync.
func (s *Bolt) allDurable() {
	s.smu.Lock()
	if w := s.j.Written(); w > s.synced {
		s.synced = w
	}
	s.smu.Unlock()
	s.synCond.Broadcast()
}

// begin makes sure the write transaction is open and holds every pending
// record.
func (s *Bolt) begin() error {
	if s.tx != nil {
		return nil
	}
	tx, err := s.db.Begin(true)
	if err != nil {
		return err
	}
	for _, r := range s.pending {
		if err := journal.Apply(tx, r[journal.Header:], bucketNames[:]); err != nil {
			tx.Rollback()
			s.broken = fmt.Errorf("%w: record %d again: %v", ErrJournalBroken, journal.Seq(r), err)
			return s.broken
		}
	}
	// Events (a run's keys grow with its seq) and questions (their IDs
	// grow with time) are added at the end of a key range: pages split
	// there are kept nearly full rather than half full.
	tx.Bucket(bucketEvents).FillPercent = 0.9
	tx.Bucket(bucketAsks).FillPercent = 0.9
	s.tx = tx
	return nil
}

// checkpoint commits the write transaction into the main file and
// empties the journal. On failure the records stay pending.
func (s *Bolt) checkpoint() error {
	s.smu.Lock()
	serr := s.syncErr
	s.smu.Unlock()
	if serr != nil {
		// Records whose writers were told their sync failed must not
		// reach the main file.
		return serr
	}
	if len(s.pending) == 0 {
		if s.tx != nil {
			s.tx.Rollback() // reads only
			s.tx = nil
		}
		return nil
	}
	if err := s.begin(); err != nil {
		return err
	}
	tx := s.tx
	s.tx = nil
	last := journal.Seq(s.pending[len(s.pending)-1])
	if err := putCheckpoint(tx, last); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	s.pending, s.jbytes = nil, 0
	s.j.Reset()
	s.allDurable()
	return nil
}

// Checkpoint writes what the journal holds into the main file now and
// empties the journal, as the store does by itself every 256 writes,
// 8 MiB or 50 ms. Until the next write, the main file alone then holds
// everything, and the memory the pending writes held is released.
func (s *Bolt) Checkpoint() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if s.readOnly {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	return integrity.Guard("checkpoint", s.breakLocked, s.checkpoint)
}

// breakLocked is markBroken for a caller holding wmu.
func (s *Bolt) breakLocked(err error) {
	if s.broken == nil {
		s.broken = err
	}
	if s.tx != nil {
		rollback(s.tx)
		s.tx = nil
	}
}

// checkpointLater is the timer's: a checkpoint journalMaxDelay after the
// first record since the last.
func (s *Bolt) checkpointLater() {
	_ = integrity.Guard("checkpoint", s.markBroken, func() error { s.checkpointLater1(); return nil })
}

func (s *Bolt) checkpointLater1() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.armed = false
	if s.broken == nil {
		_ = s.checkpoint()
	}
}

// JournalBytes is the size of the journal now: the writes appended since
// the last checkpoint folded them into the main file (0 when read-only).
func (s *Bolt) JournalBytes() int64 {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.j == nil {
		return 0
	}
	return s.j.Size()
}

// packed reads a value stored with packValue (a session's record, a
// module's bytes) and returns a copy of its bytes, unpacked: the stored
// ones are only valid in the transaction. A missing key is notFound.
func (s *Bolt) packed(id bucketID, key string, notFound error) ([]byte, error) {
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		v, err := getValue(tx, id, []byte(key))
		if err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("%w: %s", notFound, key)
		}
		data, err := unpackValue(v)
		if err != nil {
			return integrity.Corruptf(bucketNames[id], []byte(key), "%v", err)
		}
		out = append([]byte(nil), data...)
		return nil
	})
	return out, err
}
