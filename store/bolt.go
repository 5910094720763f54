package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sandflow/sandflow/store/internal/filelock"
	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/journal"
	"github.com/sandflow/sandflow/store/internal/pagecheck"
	"github.com/sandflow/sandflow/store/internal/runindex"
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
// its checksum (internal/integrity), the schema's own included; Open refuses
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
	j      *journal.File
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

	// idx is the runs' index (internal/runindex, built by runindex.go);
	// idxBuild serializes its build.
	idx      runindex.Index
	idxBuild sync.Mutex
}

var _ Store = (*Bolt)(nil)

// Open opens the store file at path, creating it when it is missing. opts
// may be nil.
//
// Only a missing file is created. A file that exists is checked before
// bbolt reads it (internal/pagecheck): an empty or foreign file is refused with
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
	if err := filelock.Lock(f, !o.ReadOnly, o.LockTimeout); err != nil {
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
		pages = fc.Pages
		newOK = fc.Meta.TxID <= 1 && fc.Meta.PGID == 4
	}
	var db *bolt.DB
	err = integrity.Guard("open", nil, func() error {
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
	if err := integrity.Guard("open", nil, func() error { return s.init(path, newOK, o) }); err != nil {
		if s.j != nil {
			s.j.Close()
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
func checkExisting(f *os.File, path string) (*pagecheck.Result, error) {
	size, err := pagecheck.Size(f)
	if err != nil {
		return nil, fmt.Errorf("store: stat %s: %w", path, err)
	}
	if size == 0 {
		return nil, &NotStoreError{Path: path, Reason: "the file is empty (0 bytes); a store is never initialised over an existing file: remove it only if it holds nothing you need"}
	}
	fc, err := pagecheck.File(f, size, path)
	if err != nil {
		return nil, err
	}
	if fc.BadMeta >= 0 && !journal.HasRecords(path) {
		return nil, &CorruptError{Bucket: "file", Offset: int64(fc.BadMeta * fc.PageSize), What: fmt.Sprintf("meta page %d is damaged, and no journal explains it as a checkpoint cut off by a crash", fc.BadMeta)}
	}
	return fc, nil
}

// init checks the buckets and the format version (creating them in a
// new file) and opens, checks and applies the journal.
func (s *Bolt) init(path string, newOK bool, o Options) error {
	if s.readOnly {
		return s.initReadOnly(path, newOK, o)
	}
	// Checked in a read: a write transaction writes a meta page even
	// when it changes nothing.
	var fresh bool
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		fresh, err = checkFormat(tx, path, newOK)
		return err
	})
	if err == nil && fresh {
		err = s.db.Update(createBuckets)
	}
	if err != nil {
		return err
	}
	j, data, err := journal.Open(path, !o.NoSync)
	if err != nil {
		return err
	}
	s.j = j
	return recoverJournal(s.db, j, data)
}

// initReadOnly is init for a file opened read-only: the format is
// checked, and a journal holding writes to recover is ErrNeedsRecovery
// (but for Verify's open, which reports it).
func (s *Bolt) initReadOnly(path string, newOK bool, o Options) error {
	err := s.db.View(func(tx *bolt.Tx) error {
		fresh, err := checkFormat(tx, path, newOK)
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
	redo, err := journal.Scan(data, last)
	if err != nil {
		return err
	}
	if len(redo) > 0 {
		return fmt.Errorf("%w: %s holds %d", ErrNeedsRecovery, path+JournalSuffix, len(redo))
	}
	return nil
}

// checkFormat checks that the file at path holds the store's buckets in
// this build's format. fresh says it holds no buckets at all: bbolt's
// new file, the store's buckets not made yet, which is allowed only when
// newOK.
func checkFormat(tx *bolt.Tx, path string, newOK bool) (fresh bool, err error) {
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
		return true, nil
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
	v, err := integrity.Open(bucketMeta, metaSchema, raw)
	if err != nil {
		return false, err
	}
	if len(v) != 4 {
		return false, integrity.Corruptf(bucketMeta, metaSchema, "format version is %d bytes", len(v))
	}
	if n := binary.BigEndian.Uint32(v); n != schemaVersion {
		return false, &NotStoreError{Path: path, Reason: fmt.Sprintf("format %d; this build reads format %d", n, schemaVersion)}
	}
	return false, nil
}

// createBuckets makes the buckets of a new store and marks its format.
func createBuckets(tx *bolt.Tx) error {
	for _, b := range bucketNames {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(metaSchema, integrity.Seal(nil, bucketMeta, metaSchema, binary.BigEndian.AppendUint32(nil, schemaVersion)))
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
		err = integrity.Guard("checkpoint", s.breakLocked, s.checkpoint)
	}
	if s.tx != nil {
		rollback(s.tx)
		s.tx = nil
	}
	empty := err == nil && s.j.Size() == 0
	if cerr := s.j.Close(); err == nil {
		err = cerr
	}
	if empty {
		os.Remove(s.j.Path())
	}
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}
