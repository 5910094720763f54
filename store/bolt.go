package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Options configures Open. The zero value is the durable default.
type Options struct {
	// NoSync skips fsync on commit. A crash may then lose recent commits
	// (never corrupt the file). For tests and benchmarks only.
	NoSync bool
	// CompressThreshold is the size from which event data and module bytes
	// are stored zstd-compressed; 0 means 1 KiB, negative disables it.
	CompressThreshold int
	// LockTimeout is how long Open waits for another process to release the
	// file; 0 means 1 second.
	LockTimeout time.Duration
	// ReadOnly opens the file for reading only: it is never written (nor
	// its journal), every write returns ErrReadOnly, and other readers may
	// have it open at the same time (not a writer). A missing file is not
	// created, and a journal holding writes to recover is ErrNeedsRecovery.
	ReadOnly bool

	verify bool // Verify's open: a journal to recover is reported, not refused
}

var (
	bucketRuns    = []byte("runs")
	bucketEvents  = []byte("events")
	bucketTimers  = []byte("timers")
	bucketAsks    = []byte("asks")
	bucketHooks   = []byte("hooks")
	bucketPlugins = []byte("plugins")
	bucketModules = []byte("modules")
	bucketMeta    = []byte("meta")
	// bucketSessions holds the session layer's records, opaque here.
	bucketSessions = []byte("sessions")
	// bucketSnapshots holds one snapshot per suspended run: its Seq (8
	// bytes, big-endian), then the host's data.
	bucketSnapshots = []byte("snapshots")
	// bucketStates holds one state image per run that has not ended: its
	// Seq (8 bytes, big-endian), then the host's data.
	bucketStates = []byte("states")
)

// schemaVersion is written on first open and checked on every open.
// Version 2 files may have a journal (journal.go), which a build that reads
// only version 1 would ignore, losing what it holds; so such a build
// refuses them. Version 3 adds the states bucket, whose writes a version 2
// build could not replay from the journal. Version 4 ends every value with
// its checksum (integrity.go), the schema's own included; Open refuses
// older files with an *OldFormatError, and Upgrade converts them.
const schemaVersion = 4

// metaSchema is the meta key holding the format version (u32).
var metaSchema = []byte("schema")

// Bolt is the embedded store: one bbolt file, and its journal while open
// (see journal.go).
type Bolt struct {
	db        *bolt.DB
	threshold int
	mu        sync.RWMutex // held to read closed; Close takes it to write
	closed    bool
	readOnly  bool
	pages     uint64 // pages of the file checked when it was opened

	// wmu guards the write transaction and the journal. tx, when not nil,
	// holds every record in pending, which are in the journal and not yet
	// in the main file; when nil with records pending (a checkpoint
	// failed), the next use applies them to a new one.
	wmu     sync.Mutex
	tx      *bolt.Tx
	pending [][]byte
	jbytes  int // bytes in pending
	// recCap is the capacity a write's record starts with: the size of
	// the last one, within limits, so that a run's commits, alike from one
	// to the next, do not grow theirs by doubling.
	recCap int
	j      *journal
	timer  *time.Timer // checkpoints delay after the first pending record
	delay  time.Duration
	armed  bool
	broken error

	// Group commit: a write appends its record under wmu, lets go of it,
	// and then waits until the journal is synced past its record; one
	// fdatasync serves every write appended before it began. smu guards
	// the rest; a goroutine holding wmu may take smu, never the reverse.
	smu     sync.Mutex
	synced  uint64 // journal bytes known durable (journal.written's count)
	syncing bool   // a sync is running
	syncErr error
	synCond *sync.Cond

	// idx is the runs' index (runindex.go); idxBuild serializes its
	// build.
	idx      runIndex
	idxBuild sync.Mutex
}

var _ Store = (*Bolt)(nil)

// Open opens the store file at path, creating it when it is missing. opts
// may be nil.
//
// Only a missing file is created. A file that exists is checked before
// bbolt reads it (pagecheck.go): an empty or foreign file is refused with
// a *NotStoreError, a damaged one with a *CorruptError, a store of an
// older format with an *OldFormatError. With Options.ReadOnly the file is
// opened for reading only and never written, and a missing file is
// os.ErrNotExist.
func Open(path string, opts *Options) (*Bolt, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.CompressThreshold == 0 {
		o.CompressThreshold = 1024
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = time.Second
	}
	f, created, err := openFile(path, o.ReadOnly)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := lockFile(f, !o.ReadOnly, o.LockTimeout); err != nil {
		f.Close()
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	var pages uint64
	// A file with none of the store's buckets is a new store only when
	// it is bbolt's first four pages, not past their first transaction
	// (a crash between bbolt's making it and the store's first write).
	newOK := created
	if !created {
		fc, err := checkExisting(f, path)
		if err != nil {
			f.Close()
			return nil, err
		}
		pages = fc.pages
		newOK = fc.meta.txid <= 1 && fc.meta.pgid == 4
	}
	var db *bolt.DB
	err = guard("open", nil, func() error {
		var err error
		db, err = bolt.Open(path, 0o600, &bolt.Options{
			Timeout: o.LockTimeout, NoSync: o.NoSync, NoGrowSync: o.NoSync, NoFreelistSync: true, ReadOnly: o.ReadOnly,
			OpenFile: func(string, int, os.FileMode) (*os.File, error) { return f, nil },
		})
		return err
	})
	if err != nil {
		f.Close()
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		if errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s := &Bolt{db: db, threshold: o.CompressThreshold, delay: journalMaxDelay, readOnly: o.ReadOnly, pages: pages}
	if err := guard("open", nil, func() error { return s.init(path, newOK, o) }); err != nil {
		if s.j != nil {
			s.j.unmapJournal()
			s.j.f.Close()
		}
		db.Close()
		return nil, err
	}
	s.synCond = sync.NewCond(&s.smu)
	if !o.ReadOnly {
		s.timer = time.AfterFunc(time.Hour, s.checkpointLater)
		s.timer.Stop()
	}
	return s, nil
}

// openFile opens path, or creates it when it is missing (unless
// readOnly); created says it did.
func openFile(path string, readOnly bool) (f *os.File, created bool, err error) {
	if readOnly {
		f, err = os.OpenFile(path, os.O_RDONLY, 0)
		return f, false, err
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, false, err
	}
	f, err = os.OpenFile(path, os.O_RDWR, 0)
	return f, false, err
}

// checkExisting refuses a file that is empty, foreign or damaged, before
// bbolt reads it. A damaged meta page is bbolt's way back to the commit
// before it, which is right only after a crash in the middle of a
// checkpoint: then the journal still holds what that checkpoint wrote.
// Without such records it is damage.
func checkExisting(f *os.File, path string) (*fileCheck, error) {
	size, err := statSize(f)
	if err != nil {
		return nil, fmt.Errorf("store: stat %s: %w", path, err)
	}
	if size == 0 {
		return nil, &NotStoreError{Path: path, Reason: "the file is empty (0 bytes); a store is never initialised over an existing file: remove it only if it holds nothing you need"}
	}
	fc, err := checkFile(f, size, path)
	if err != nil {
		return nil, err
	}
	if fc.badMeta >= 0 && !journalHasRecords(path) {
		return nil, &CorruptError{Bucket: "file", Offset: int64(fc.badMeta * fc.pageSize), What: fmt.Sprintf("meta page %d is damaged, and no journal explains it as a checkpoint cut off by a crash", fc.badMeta)}
	}
	return fc, nil
}

// init checks the buckets and the format version (creating them in a
// new file) and opens, checks and applies the journal.
func (s *Bolt) init(path string, newOK bool, o Options) error {
	check := func(tx *bolt.Tx) (fresh bool, err error) {
		var ours, other int
		if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			if bucketIndex(name) >= 0 {
				ours++
			} else {
				other++
			}
			return nil
		}); err != nil {
			return false, err
		}
		if ours == 0 && other == 0 {
			if !newOK {
				return false, &CorruptError{Bucket: "file", Offset: -1, What: "the file holds no buckets, yet has been written since bbolt made it"}
			}
			return true, nil // bbolt's new file, our buckets not made yet
		}
		if ours == 0 {
			return false, &NotStoreError{Path: path, Reason: "a bbolt file of another program (none of the store's buckets)"}
		}
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return false, &CorruptError{Bucket: "meta", Offset: -1, What: "bucket missing"}
		}
		raw := meta.Get(metaSchema)
		if raw == nil {
			return false, &OldFormatError{Path: path, Version: 1}
		}
		if len(raw) == 4 && binary.BigEndian.Uint32(raw) >= 1 && binary.BigEndian.Uint32(raw) < schemaVersion {
			return false, &OldFormatError{Path: path, Version: binary.BigEndian.Uint32(raw)}
		}
		v, err := openValue(bucketMeta, metaSchema, raw)
		if err != nil {
			return false, err
		}
		if len(v) != 4 {
			return false, corruptf(bucketMeta, metaSchema, "format version is %d bytes", len(v))
		}
		if n := binary.BigEndian.Uint32(v); n != schemaVersion {
			return false, &NotStoreError{Path: path, Reason: fmt.Sprintf("format %d; this build reads format %d", n, schemaVersion)}
		}
		return false, nil
	}
	if s.readOnly {
		err := s.db.View(func(tx *bolt.Tx) error {
			fresh, err := check(tx)
			if err == nil && fresh {
				err = &NotStoreError{Path: path, Reason: "a bbolt file the store never initialised"}
			}
			return err
		})
		if err != nil || o.verify {
			return err
		}
		last, err := s.checkpointSeq()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path + JournalSuffix)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("store: read journal: %w", err)
		}
		redo, err := scanJournal(data, last)
		if err != nil {
			return err
		}
		if len(redo) > 0 && !o.verify {
			return fmt.Errorf("%w: %s holds %d", ErrNeedsRecovery, path+JournalSuffix, len(redo))
		}
		return nil
	}
	// Checked in a read: a write transaction writes a meta page even
	// when it changes nothing.
	var fresh bool
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		fresh, err = check(tx)
		return err
	})
	if err == nil && fresh {
		err = s.db.Update(createBuckets)
	}
	if err != nil {
		return err
	}
	j, data, err := openJournal(path, !o.NoSync)
	if err != nil {
		return err
	}
	s.j = j
	return recoverJournal(s.db, j, data)
}

// createBuckets makes the buckets of a new store and marks its format.
func createBuckets(tx *bolt.Tx) error {
	for _, b := range bucketNames {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(metaSchema, sealValue(nil, bucketMeta, metaSchema, binary.BigEndian.AppendUint32(nil, schemaVersion)))
}

// bucketIndex is a bucket name's index in bucketNames, or -1.
func bucketIndex(name []byte) int {
	for i, b := range bucketNames {
		if bytes.Equal(b, name) {
			return i
		}
	}
	return -1
}

// checkpointSeq reads the seq of the last journal record in the main file.
func (s *Bolt) checkpointSeq() (uint64, error) {
	var last uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		last, err = readCheckpoint(tx)
		return err
	})
	return last, err
}

// Path returns the file the store lives in.
func (s *Bolt) Path() string { return s.db.Path() }

// Close writes what the journal holds into the main file, removes the
// journal and closes the file. If that checkpoint fails, the journal is
// kept and the next Open applies it.
func (s *Bolt) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.readOnly {
		return s.db.Close()
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.timer.Stop()
	err := s.broken
	if err == nil {
		err = guard("checkpoint", s.breakLocked, s.checkpoint)
	}
	if s.tx != nil {
		rollback(s.tx)
		s.tx = nil
	}
	empty := err == nil && s.j.size == 0
	s.j.unmapJournal()
	if cerr := s.j.f.Close(); err == nil {
		err = cerr
	}
	if empty {
		os.Remove(s.j.path)
	}
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// view runs fn on the open write transaction when there is one, so it
// sees every write that returned, else in a read transaction.
func (s *Bolt) view(fn func(tx *bolt.Tx) error) error {
	return guard("read", s.markBroken, func() error { return s.view1(fn) })
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
	if err := s.durable(s.j.written.Load()); err != nil {
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
	return guard("write", s.markBroken, func() error { return s.update1(fn) })
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
	_ = guard("rollback", nil, tx.Rollback)
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
	w := wtx{tx: s.tx, rec: make([]byte, journalHeader, max(s.recCap, minRecCap))}
	err := fn(&w)
	if !w.changed() {
		return 0, err
	}
	if err == nil {
		r := w.seal(s.j.next)
		s.recCap = min(len(r), maxRecCap)
		if err = s.j.append(r); err == nil {
			s.idx.put(w.runs)
			end := s.j.written.Load()
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
	if !s.j.sync {
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
		target := s.j.written.Load() // not below end: end was read after its append
		s.smu.Unlock()
		err := syncJournal(s.j.f)
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
	if w := s.j.written.Load(); w > s.synced {
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
		if err := applyRecord(tx, r[journalHeader:]); err != nil {
			tx.Rollback()
			s.broken = fmt.Errorf("%w: record %d again: %v", ErrJournalBroken, recordSeq(r), err)
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
	last := recordSeq(s.pending[len(s.pending)-1])
	if err := putCheckpoint(tx, last); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	s.pending, s.jbytes = nil, 0
	s.j.reset()
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
	return guard("checkpoint", s.breakLocked, s.checkpoint)
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
	_ = guard("checkpoint", s.markBroken, func() error { s.checkpointLater1(); return nil })
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

// CreateRun implements Store.
func (s *Bolt) CreateRun(ctx context.Context, run Run, b Batch) error {
	if err := ValidRunID(run.ID); err != nil {
		return err
	}
	return s.update(func(w *wtx) error {
		if w.read(bRuns).Get([]byte(run.ID)) != nil {
			return fmt.Errorf("%w: %s", ErrRunExists, run.ID)
		}
		if b.Run == nil {
			r := run
			b.Run = &r
		}
		return s.apply(w, run.ID, 0, b)
	})
}

// Append implements Store.
func (s *Bolt) Append(ctx context.Context, runID string, expectLastSeq uint64, b Batch) error {
	return s.update(func(w *wtx) error {
		if b.Run != nil {
			// The record is replaced: only where its log ends matters.
			rv, err := w.get(bRuns, []byte(runID))
			if err != nil {
				return err
			}
			if last, ok := runLastSeq(rv, runID); ok {
				if last != expectLastSeq {
					return fmt.Errorf("%w: run %s is at event %d, not %d", ErrSeqConflict, runID, last, expectLastSeq)
				}
				return s.apply(w, runID, expectLastSeq, b)
			}
		}
		cur, err := runRecord(w.tx, runID)
		if err != nil {
			return err
		}
		if cur.LastSeq != expectLastSeq {
			return fmt.Errorf("%w: run %s is at event %d, not %d", ErrSeqConflict, runID, cur.LastSeq, expectLastSeq)
		}
		if b.Run == nil {
			if len(b.Events) > 0 {
				cur.LastSeq = b.Events[len(b.Events)-1].Seq
			}
			b.Run = &cur
		}
		return s.apply(w, runID, expectLastSeq, b)
	})
}

func (s *Bolt) apply(w *wtx, runID string, last uint64, b Batch) error {
	if len(b.Events) > 0 {
		// No event of the run at or after the first new one: else the run
		// record and the log disagree, and the batch is refused rather
		// than overwrite the truth. One seek for the whole batch.
		first := eventKey(runID, last+1)
		if k, _ := w.read(bEvents).Cursor().Seek(first); k != nil && bytes.HasPrefix(k, first[:len(runID)+1]) {
			return fmt.Errorf("%w: run %s already has events after %d", ErrSeqConflict, runID, last)
		}
	}
	for i, e := range b.Events {
		if e.Seq != last+uint64(i)+1 {
			return fmt.Errorf("%w: event %d of run %s should have seq %d", ErrBadBatch, e.Seq, runID, last+uint64(i)+1)
		}
		key := eventKey(runID, e.Seq)
		v, err := encodeEvent(e, s.threshold)
		if err != nil {
			return err
		}
		if err := w.put(bEvents, key, v); err != nil {
			return err
		}
	}
	newLast := last + uint64(len(b.Events))
	if b.Run.ID != runID || b.Run.LastSeq != newLast {
		return fmt.Errorf("%w: run record %s at seq %d does not match log at %d", ErrBadBatch, b.Run.ID, b.Run.LastSeq, newLast)
	}
	r := *b.Run
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	rv, err := encodeRun(r)
	if err != nil {
		return fmt.Errorf("%w: run record: %v", ErrBadBatch, err)
	}
	if err := w.put(bRuns, []byte(runID), rv); err != nil {
		return err
	}
	w.runs = append(w.runs, indexEntry{created: r.CreatedAt, id: r.ID, status: r.Status, tool: r.Tool})
	if r.Status.Terminal() {
		for _, bk := range []bucketID{bSnapshots, bStates} {
			if w.read(bk).Get([]byte(runID)) != nil {
				if err := w.del(bk, []byte(runID)); err != nil {
					return err
				}
			}
		}
	} else if ps := b.PutState; ps != nil {
		if ps.Seq != newLast {
			return fmt.Errorf("%w: state image of run %s at seq %d, the batch ends at %d", ErrBadBatch, runID, ps.Seq, newLast)
		}
		v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(ps.Data)), ps.Seq)
		if err := w.put(bStates, []byte(runID), append(v, ps.Data...)); err != nil {
			return err
		}
	}
	for _, t := range b.PutTimers {
		if t.RunID != runID {
			return fmt.Errorf("%w: timer for run %s in a batch of run %s", ErrBadBatch, t.RunID, runID)
		}
		if err := checkTime(t.FireAt, "timer"); err != nil {
			return err
		}
		t.FireAt = t.FireAt.UTC()
		tv, err := json.Marshal(t)
		if err != nil {
			return err
		}
		if err := w.put(bTimers, timerKey(t), tv); err != nil {
			return err
		}
	}
	for _, t := range b.DeleteTimers {
		if t.RunID != runID {
			return fmt.Errorf("%w: deleting a timer of run %s in a batch of run %s", ErrBadBatch, t.RunID, runID)
		}
		if err := w.del(bTimers, timerKey(t)); err != nil {
			return err
		}
	}
	for _, a := range b.PutAsks {
		if a.RunID != runID || a.ID == "" {
			return fmt.Errorf("%w: question %q for run %s in a batch of run %s", ErrBadBatch, a.ID, a.RunID, runID)
		}
		v, err := w.get(bAsks, []byte(a.ID))
		if err != nil {
			return err
		}
		if v != nil && !askOfRun(v, a.ID, runID) {
			var prev Ask
			if err := decodeAsk(v, &prev); err != nil {
				return corruptf(bucketAsks, []byte(a.ID), "question record does not decode: %v", err)
			}
			if prev.RunID != runID {
				return fmt.Errorf("%w: question %s belongs to run %s", ErrBadBatch, a.ID, prev.RunID)
			}
		}
		a.CreatedAt = a.CreatedAt.UTC()
		av, err := encodeAsk(a)
		if err != nil {
			return fmt.Errorf("%w: question %s: %v", ErrBadBatch, a.ID, err)
		}
		if err := w.put(bAsks, []byte(a.ID), av); err != nil {
			return err
		}
	}
	for _, tok := range b.ReleaseHooks {
		h, ok, err := w.hook(tok)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if h.RunID == runID {
			if err := w.del(bHooks, []byte(tok)); err != nil {
				return err
			}
		}
	}
	for _, c := range b.ClaimHooks {
		if c.Token == "" || c.RunID != runID {
			return fmt.Errorf("%w: hook claim %+v in a batch of run %s", ErrBadBatch, c, runID)
		}
		if h, ok, err := w.hook(c.Token); err != nil {
			return err
		} else if ok {
			if h.RunID != runID {
				return fmt.Errorf("%w: %q is held by run %s", ErrHookTaken, c.Token, h.RunID)
			}
		}
		v, err := json.Marshal(c)
		if err != nil {
			return err
		}
		if err := w.put(bHooks, []byte(c.Token), v); err != nil {
			return err
		}
	}
	return nil
}

// Run implements Store.
func (s *Bolt) Run(ctx context.Context, id string) (Run, error) {
	var r Run
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		r, err = runRecord(tx, id)
		return err
	})
	return r, err
}

// Runs implements Store.
func (s *Bolt) Runs(ctx context.Context, f RunFilter) ([]Run, error) {
	if err := s.indexRuns(); err != nil {
		return nil, err
	}
	var out []Run
	g := f
	for {
		es := s.idx.match(g)
		err := s.view(func(tx *bolt.Tx) error {
			runs := tx.Bucket(bucketRuns)
			for _, e := range es {
				var r Run
				k := []byte(e.id)
				v := runs.Get(k)
				if v == nil {
					return corruptf(bucketRuns, k, "the run is indexed and has no record")
				}
				if err := decodeRunValue(k, v, &r); err != nil {
					return err
				}
				// The index was read before the records: a run whose
				// status changed between the two reads is left out.
				if f.Matches(r) {
					out = append(out, r)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		// A run left out makes the page short: the index goes on after
		// the last run it gave.
		if f.Limit <= 0 || len(out) >= f.Limit || len(es) < g.Limit {
			return out, nil
		}
		last := es[len(es)-1]
		g.Before, g.Limit = &RunCursor{CreatedAt: last.created, ID: last.id}, f.Limit-len(out)
	}
}

// RunCounts implements RunCounter, from the run index.
func (s *Bolt) RunCounts(ctx context.Context) ([]RunCount, error) {
	if err := s.indexRuns(); err != nil {
		return nil, err
	}
	return s.idx.counts(), nil
}

// indexRuns builds the runs' index, once. On a writable store it reads the
// records with the write lock held, so that every write after the read
// updates the index (apply1) and none falls between.
func (s *Bolt) indexRuns() error {
	s.idx.mu.RLock()
	built := s.idx.built
	s.idx.mu.RUnlock()
	if built {
		return nil
	}
	s.idxBuild.Lock()
	defer s.idxBuild.Unlock()
	s.idx.mu.RLock()
	built = s.idx.built
	s.idx.mu.RUnlock()
	if built {
		return nil
	}
	if s.readOnly {
		return s.view(s.idx.build)
	}
	return guard("read", s.markBroken, func() error {
		s.mu.RLock()
		defer s.mu.RUnlock()
		if s.closed {
			return ErrClosed
		}
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if s.tx != nil {
			return s.idx.build(s.tx)
		}
		return s.db.View(s.idx.build)
	})
}

// Events implements Store.
func (s *Bolt) Events(ctx context.Context, runID string, after uint64, limit int) ([]Event, error) {
	var out []Event
	if after == math.MaxUint64 {
		_, err := s.Run(ctx, runID)
		return nil, err
	}
	err := s.view(func(tx *bolt.Tx) error {
		cur, err := runRecord(tx, runID)
		if err != nil {
			return err
		}
		// Sized once; kinds shared; data copied into large blocks, not
		// one allocation per event: a long log loads in one pass.
		if cur.LastSeq > after {
			n := cur.LastSeq - after
			if limit > 0 {
				n = min(n, uint64(limit))
			}
			out = make([]Event, 0, min(n, 1<<20))
		}
		var d eventDecoder
		prefix := append([]byte(runID), 0)
		c := tx.Bucket(bucketEvents).Cursor()
		for k, v := c.Seek(eventKey(runID, after+1)); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(k) != len(prefix)+8 {
				continue
			}
			v, err := openValue(bucketEvents, k, v)
			if err != nil {
				return err
			}
			e, err := d.decode(binary.BigEndian.Uint64(k[len(prefix):]), v)
			if err != nil {
				return corruptf(bucketEvents, k, "%v", err)
			}
			out = append(out, e)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// DueTimers implements Store.
func (s *Bolt) DueTimers(ctx context.Context, now time.Time, limit int) ([]Timer, error) {
	var out []Timer
	end := timeKey(now)
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketTimers).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) < 8 || binary.BigEndian.Uint64(k) > end {
				break
			}
			t, err := decodeTimer(k, v)
			if err != nil {
				return err
			}
			out = append(out, t)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// NextTimer implements Store.
func (s *Bolt) NextTimer(ctx context.Context) (Timer, bool, error) {
	var t Timer
	var ok bool
	err := s.view(func(tx *bolt.Tx) error {
		k, v := tx.Bucket(bucketTimers).Cursor().First()
		if k == nil {
			return nil
		}
		ok = true
		var err error
		t, err = decodeTimer(k, v)
		return err
	})
	return t, ok, err
}

// Ask implements Store.
func (s *Bolt) Ask(ctx context.Context, id string) (Ask, error) {
	var a Ask
	err := s.view(func(tx *bolt.Tx) error {
		sv := tx.Bucket(bucketAsks).Get([]byte(id))
		if sv == nil {
			return fmt.Errorf("%w: %s", ErrAskNotFound, id)
		}
		return decodeAskValue([]byte(id), sv, &a)
	})
	return a, err
}

// Asks implements Store.
func (s *Bolt) Asks(ctx context.Context, openOnly bool) ([]Ask, error) {
	var out []Ask
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAsks).ForEach(func(k, sv []byte) error {
			var a Ask
			if err := decodeAskValue(k, sv, &a); err != nil {
				return err
			}
			if !openOnly || a.Open {
				out = append(out, a)
			}
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, err
}

// ClaimHook implements Store.
func (s *Bolt) ClaimHook(ctx context.Context, token, runID string, hookID uint32) (string, error) {
	if token == "" || runID == "" {
		return "", fmt.Errorf("%w: hook token and run id must not be empty", ErrBadBatch)
	}
	var holder string
	err := s.update(func(w *wtx) error {
		if h, ok, err := w.hook(token); err != nil {
			return err
		} else if ok {
			if h.RunID != runID {
				holder = h.RunID
				return nil
			}
		}
		v, err := json.Marshal(Hook{Token: token, RunID: runID, HookID: hookID})
		if err != nil {
			return err
		}
		return w.put(bHooks, []byte(token), v)
	})
	return holder, err
}

// Hook implements Store.
func (s *Bolt) Hook(ctx context.Context, token string) (Hook, error) {
	var h Hook
	err := s.view(func(tx *bolt.Tx) error {
		sv := tx.Bucket(bucketHooks).Get([]byte(token))
		if sv == nil {
			return fmt.Errorf("%w: %q", ErrHookNotFound, token)
		}
		var err error
		h, err = decodeHook([]byte(token), sv)
		return err
	})
	return h, err
}

// PutPlugin implements Store.
func (s *Bolt) PutPlugin(ctx context.Context, p Plugin, module []byte) (Plugin, error) {
	if p.Name == "" || strings.ContainsRune(p.Name, 0) {
		return Plugin{}, fmt.Errorf("%w: plugin name %q", ErrBadBatch, p.Name)
	}
	if p.ModuleHash == "" {
		return Plugin{}, fmt.Errorf("%w: plugin %s has no module hash", ErrBadBatch, p.Name)
	}
	err := s.update(func(w *wtx) error {
		plugins := w.read(bPlugins)
		latest := 0
		prefix := append([]byte(p.Name), 0)
		c := plugins.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(k) == len(prefix)+4 {
				latest = int(binary.BigEndian.Uint32(k[len(prefix):]))
			}
		}
		p.Version = latest + 1
		p.Size = len(module)
		p.CreatedAt = p.CreatedAt.UTC()
		v, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("%w: plugin %s: %v", ErrBadBatch, p.Name, err)
		}
		if err := w.put(bPlugins, pluginKey(p.Name, p.Version), v); err != nil {
			return err
		}
		if w.read(bModules).Get([]byte(p.ModuleHash)) == nil {
			return w.put(bModules, []byte(p.ModuleHash), packValue(nil, module, s.threshold))
		}
		return nil
	})
	if err != nil {
		return Plugin{}, err
	}
	return p, nil
}

// Plugin implements Store.
func (s *Bolt) Plugin(ctx context.Context, name string, version int) (Plugin, error) {
	var p Plugin
	if version < 0 || version > math.MaxUint32 {
		return p, fmt.Errorf("%w: %s version %d", ErrPluginNotFound, name, version)
	}
	err := s.view(func(tx *bolt.Tx) error {
		plugins := tx.Bucket(bucketPlugins)
		var v, vk []byte
		if version > 0 {
			vk = pluginKey(name, version)
			v = plugins.Get(vk)
		} else {
			prefix := append([]byte(name), 0)
			c := plugins.Cursor()
			for k, kv := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, kv = c.Next() {
				if len(k) == len(prefix)+4 {
					v, vk = kv, k
				}
			}
		}
		if v == nil {
			if version > 0 {
				return fmt.Errorf("%w: %s version %d", ErrPluginNotFound, name, version)
			}
			return fmt.Errorf("%w: %s", ErrPluginNotFound, name)
		}
		var err error
		p, err = decodePlugin(vk, v)
		return err
	})
	return p, err
}

// Plugins implements Store.
func (s *Bolt) Plugins(ctx context.Context) ([]Plugin, error) {
	var out []Plugin
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPlugins).ForEach(func(k, v []byte) error {
			p, err := decodePlugin(k, v)
			if err != nil {
				return err
			}
			out = append(out, p)
			return nil
		})
	})
	return out, err
}

// PutSession implements Store.
func (s *Bolt) PutSession(ctx context.Context, id string, data []byte) error {
	if id == "" {
		return fmt.Errorf("%w: a session needs an id", ErrSessionNotFound)
	}
	return s.update(func(w *wtx) error {
		return w.put(bSessions, []byte(id), packValue(nil, data, s.threshold))
	})
}

// Session implements Store.
func (s *Bolt) Session(ctx context.Context, id string) ([]byte, error) {
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		v, err := getValue(tx, bSessions, []byte(id))
		if err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("%w: %s", ErrSessionNotFound, id)
		}
		data, err := unpackValue(v)
		if err != nil {
			return corruptf(bucketSessions, []byte(id), "%v", err)
		}
		out = append([]byte(nil), data...) // v is only valid in the transaction
		return nil
	})
	return out, err
}

// SessionIDs implements Store.
func (s *Bolt) SessionIDs(ctx context.Context) ([]string, error) {
	var out []string
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// DeletePluginVersion implements Store.
func (s *Bolt) DeletePluginVersion(ctx context.Context, name string, version int) error {
	if version <= 0 || version > math.MaxUint32 {
		return fmt.Errorf("%w: %s version %d", ErrPluginNotFound, name, version)
	}
	return s.update(func(w *wtx) error {
		plugins := w.read(bPlugins)
		key := pluginKey(name, version)
		v := plugins.Get(key)
		if v == nil {
			return fmt.Errorf("%w: %s version %d", ErrPluginNotFound, name, version)
		}
		p, err := decodePlugin(key, v)
		if err != nil {
			return err
		}
		var inUse []string
		err = w.read(bRuns).ForEach(func(k, rv []byte) error {
			var r Run
			if err := decodeRunValue(k, rv, &r); err != nil {
				return err
			}
			if r.Plugin == name && r.Version == version && !r.Status.Terminal() {
				inUse = append(inUse, r.ID)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(inUse) > 0 {
			return fmt.Errorf("%w: %s version %d is used by %d run(s), such as %s", ErrPluginInUse, name, version, len(inUse), inUse[0])
		}
		if err := w.del(bPlugins, key); err != nil {
			return err
		}
		shared := false
		err = plugins.ForEach(func(k, pv []byte) error {
			q, err := decodePlugin(k, pv)
			if err != nil {
				return err
			}
			if q.ModuleHash == p.ModuleHash {
				shared = true
			}
			return nil
		})
		if err != nil || shared {
			return err
		}
		return w.del(bModules, []byte(p.ModuleHash))
	})
}

// Module implements Store.
func (s *Bolt) Module(ctx context.Context, hash string) ([]byte, error) {
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		v, err := getValue(tx, bModules, []byte(hash))
		if err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("%w: %s", ErrModuleNotFound, hash)
		}
		data, err := unpackValue(v)
		if err != nil {
			return corruptf(bucketModules, []byte(hash), "%v", err)
		}
		out = append([]byte(nil), data...)
		return nil
	})
	return out, err
}

// ValidRunID reports whether id can name a run: 1-128 letters, digits and
// - _ . : (which keeps ids printable and free of the key separator).
func ValidRunID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("%w: run id must be 1-128 characters", ErrBadBatch)
	}
	for _, r := range id {
		ok := r == '-' || r == '_' || r == '.' || r == ':' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !ok {
			return fmt.Errorf("%w: run id %q may hold only letters, digits and - _ . :", ErrBadBatch, id)
		}
	}
	return nil
}

// PutSnapshot implements Store.
func (s *Bolt) PutSnapshot(ctx context.Context, runID string, snap Snapshot) error {
	return s.update(func(w *wtx) error {
		cur, err := runRecord(w.tx, runID)
		if err != nil || cur.Status.Terminal() {
			return err
		}
		return putSnapshot(w, runID, snap)
	})
}

// runRecord reads a run's record in a transaction.
func runRecord(tx *bolt.Tx, runID string) (Run, error) {
	var cur Run
	v := tx.Bucket(bucketRuns).Get([]byte(runID))
	if v == nil {
		return cur, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
	}
	return cur, decodeRunValue([]byte(runID), v, &cur)
}

func putSnapshot(w *wtx, runID string, snap Snapshot) error {
	v, err := w.get(bSnapshots, []byte(runID))
	if err != nil {
		return err
	}
	if len(v) >= 8 && binary.BigEndian.Uint64(v) >= snap.Seq {
		return nil
	}
	v = binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(snap.Data)), snap.Seq)
	return w.put(bSnapshots, []byte(runID), append(v, snap.Data...))
}

// State implements Store.
func (s *Bolt) State(ctx context.Context, runID string) (State, error) {
	seq, data, err := s.seqValue(bStates, runID, ErrStateNotFound, "state image")
	return State{Seq: seq, Data: data}, err
}

// Snapshot implements Store.
func (s *Bolt) Snapshot(ctx context.Context, runID string) (Snapshot, error) {
	seq, data, err := s.seqValue(bSnapshots, runID, ErrSnapshotNotFound, "snapshot")
	return Snapshot{Seq: seq, Data: data}, err
}

// seqValue reads a run's value that begins with a seq (8 bytes,
// big-endian): a snapshot or a state image.
func (s *Bolt) seqValue(bucket bucketID, runID string, notFound error, what string) (uint64, []byte, error) {
	var seq uint64
	var data []byte
	err := s.view(func(tx *bolt.Tx) error {
		v, err := getValue(tx, bucket, []byte(runID))
		if err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("%w: run %s", notFound, runID)
		}
		if len(v) < 8 {
			return corruptf(bucketNames[bucket], []byte(runID), "%s is %d bytes", what, len(v))
		}
		seq, data = binary.BigEndian.Uint64(v), append([]byte(nil), v[8:]...)
		return nil
	})
	return seq, data, err
}

// decodeRunValue checks and decodes a stored run record.
func decodeRunValue(k, sv []byte, r *Run) error {
	v, err := openValue(bucketRuns, k, sv)
	if err != nil {
		return err
	}
	if err := decodeRun(v, r); err != nil {
		return corruptf(bucketRuns, k, "run record does not decode: %v", err)
	}
	return nil
}

// decodeAskValue checks and decodes a stored question record.
func decodeAskValue(k, sv []byte, a *Ask) error {
	v, err := openValue(bucketAsks, k, sv)
	if err != nil {
		return err
	}
	if err := decodeAsk(v, a); err != nil {
		return corruptf(bucketAsks, k, "question record does not decode: %v", err)
	}
	return nil
}

// decodeTimer checks and decodes a stored timer.
func decodeTimer(k, sv []byte) (Timer, error) {
	var t Timer
	v, err := openValue(bucketTimers, k, sv)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(v, &t); err != nil {
		return t, corruptf(bucketTimers, k, "timer does not decode: %v", err)
	}
	return t, nil
}

// decodeHook checks and decodes a stored hook token's holder.
func decodeHook(k, sv []byte) (Hook, error) {
	var h Hook
	v, err := openValue(bucketHooks, k, sv)
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(v, &h); err != nil {
		return h, corruptf(bucketHooks, k, "hook does not decode: %v", err)
	}
	return h, nil
}

// decodePlugin checks and decodes a stored plugin version.
func decodePlugin(k, sv []byte) (Plugin, error) {
	var p Plugin
	v, err := openValue(bucketPlugins, k, sv)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(v, &p); err != nil {
		return p, corruptf(bucketPlugins, k, "plugin record does not decode: %v", err)
	}
	return p, nil
}

// hook reads a token's holder in a write; ok is false when none holds it.
func (w *wtx) hook(token string) (Hook, bool, error) {
	sv := w.read(bHooks).Get([]byte(token))
	if sv == nil {
		return Hook{}, false, nil
	}
	h, err := decodeHook([]byte(token), sv)
	return h, err == nil, err
}

// JournalBytes is the size of the journal now: the writes appended since
// the last checkpoint folded them into the main file (0 when read-only).
func (s *Bolt) JournalBytes() int64 {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.j == nil {
		return 0
	}
	return s.j.size
}
