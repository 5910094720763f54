package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/pagecheck"
	bolt "go.etcd.io/bbolt"
)

// A 0-byte file is refused, not initialised as an empty store (which
// would show every run gone, and then write over the file).
func TestOpenRefusesEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandflow.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		s, err := Open(path, &Options{ReadOnly: ro})
		var ne *NotStoreError
		if !errors.As(err, &ne) || !errors.Is(err, ErrNotStore) {
			if err == nil {
				s.Close()
			}
			t.Fatalf("Open(ReadOnly %v) of a 0-byte file = %v, want a *NotStoreError", ro, err)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the refused file: %v, %v; want it left at 0 bytes", fi, err)
	}
	if _, err := os.Stat(path + JournalSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a journal was made for the refused file: %v", err)
	}
	rep, err := Verify(path)
	if err != nil || rep.OK() {
		t.Fatalf("Verify of a 0-byte file: %+v, %v; want a finding", rep, err)
	}
}

// Only a missing file is created; read-only, a missing file is an error.
func TestOpenCreatesOnlyMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandflow.db")
	if _, err := Open(path, &Options{ReadOnly: true}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only Open of a missing file = %v, want os.ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only Open made the file: %v", err)
	}
	s, err := Open(path, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(path)
	if err != nil || !rep.OK() {
		t.Fatalf("Verify of a new store: %+v, %v", rep, err)
	}
}

type fileState struct {
	data  []byte
	mtime time.Time
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{b, fi.ModTime()}
}

// Reading never writes the file: not read-only (ReadOnly, which also
// refuses writes), and not through a read-write open that only reads
// (which used to commit a transaction at every open).
func TestReadsNeverWriteTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandflow.db")
	corpusFixture(t, path)
	before := stateOf(t, path)
	time.Sleep(20 * time.Millisecond) // a write would show in the mtime
	for _, ro := range []bool{true, false} {
		s, err := Open(path, &Options{ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := corpusContents(s); err != nil {
			t.Fatal(err)
		}
		if ro {
			err := s.CreateRun(context.Background(), Run{ID: "new"}, Batch{})
			if !errors.Is(err, ErrReadOnly) {
				t.Errorf("CreateRun on a read-only store = %v, want ErrReadOnly", err)
			}
			if _, err := os.Stat(path + JournalSuffix); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a read-only open made a journal: %v", err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		after := stateOf(t, path)
		if !bytes.Equal(before.data, after.data) || !before.mtime.Equal(after.mtime) {
			t.Errorf("ReadOnly %v: reading changed the file (mtime %v -> %v)", ro, before.mtime, after.mtime)
		}
	}
}

// Two read-only opens may share the file; a writer may not join them.
func TestReadOnlyShares(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandflow.db")
	corpusFixture(t, path)
	a, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("a second read-only open: %v", err)
	}
	defer b.Close()
	if _, err := Open(path, &Options{LockTimeout: 100 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("a writer while readers have the file: %v, want ErrLocked", err)
	}
}

// A read-only open does not apply a journal a crash left; it says so, and
// leaves both files alone.
func TestReadOnlyWithJournalToRecover(t *testing.T) {
	s := openJournalTest(t, filepath.Join(t.TempDir(), "s.db"), Options{NoSync: true})
	defer s.Close()
	appendCrashBatches(t, s, 1, 3)
	db, journal := crashCopy(t, s, t.TempDir())
	dbBefore, jBefore := stateOf(t, db), stateOf(t, journal)
	if _, err := Open(db, &Options{ReadOnly: true}); !errors.Is(err, ErrNeedsRecovery) {
		t.Fatalf("read-only Open with a journal to recover = %v, want ErrNeedsRecovery", err)
	}
	rep, err := Verify(db)
	if err != nil || !rep.OK() || rep.JournalRecords != 4 {
		t.Fatalf("Verify: %+v, %v; want it clean with 4 journal records to recover", rep, err)
	}
	if a, b := stateOf(t, db), stateOf(t, journal); !bytes.Equal(a.data, dbBefore.data) || !bytes.Equal(b.data, jBefore.data) {
		t.Fatal("the read-only open or Verify changed the files")
	}
	if got := reopenedSeq(t, db); got != 6 {
		t.Fatalf("read-write open recovered the run at %d, want 6", got)
	}
}

// A changed byte in a stored value is a *CorruptError naming its bucket
// and key, from every read of it, and a finding of Verify; it used to be
// read back as data.
func TestCorruptValueNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandflow.db")
	corpusFixture(t, path)
	b, _ := os.ReadFile(path)
	b[bytes.Index(b, []byte("MARK-run-b-100"))+5] ^= 0x01
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Events(context.Background(), "run-b", 0, 0)
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Bucket != "events" || !bytes.Equal(ce.Key, eventKey("run-b", 100)) {
		t.Fatalf("Events = %v, want a *CorruptError of events key run-b#100", err)
	}
	if evs, err := s.Events(context.Background(), "run-b", 100, 0); err != nil || len(evs) != 100 {
		t.Fatalf("the events after the damaged one: %d, %v", len(evs), err)
	}
	rep, err := Verify(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Bucket != "events" || rep.Findings[0].Key != integrity.PrintKey(eventKey("run-b", 100)) {
		t.Fatalf("Verify findings %+v, want one for events run-b#100", rep.Findings)
	}
	if rep.Runs != 3 || rep.Events != 600 || rep.Pages == 0 {
		t.Errorf("Verify counted %d runs, %d events, %d pages", rep.Runs, rep.Events, rep.Pages)
	}
}

// guard turns panics from bbolt and faults on the file's map into
// corruption, and raises every other panic again.
func TestGuard(t *testing.T) {
	raised := func(fn func() error) (r any) {
		defer func() { r = recover() }()
		_ = integrity.Guard("test", nil, fn)
		return nil
	}
	if r := raised(func() error { panic("a bug") }); r != "a bug" {
		t.Errorf("a plain panic: recovered %v, want it raised again", r)
	}
	if r := raised(func() error { var p *Run; _ = p.ID; return nil }); r == nil {
		t.Error("a nil dereference in the store's code was taken as corruption")
	}

	// bbolt itself on a damaged file, with no check before it: a page
	// whose header names another page.
	path := filepath.Join(t.TempDir(), "sandflow.db")
	corpusFixture(t, path)
	b, _ := os.ReadFile(path)
	fc, err := pagecheck.File(bytes.NewReader(b), int64(len(b)), path)
	if err != nil {
		t.Fatal(err)
	}
	root := int(fc.Meta.Root) * fc.PageSize
	binary.NativeEndian.PutUint64(b[root:], fc.Meta.Root+1)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	onPanic := 0
	err = integrity.Guard("test", func(error) { onPanic++ }, func() error {
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			return err
		}
		defer db.Close()
		return db.View(func(tx *bolt.Tx) error { return tx.ForEach(func([]byte, *bolt.Bucket) error { return nil }) })
	})
	if !errors.Is(err, ErrCorrupt) || onPanic != 1 {
		t.Fatalf("bbolt on a damaged root page: %v (onPanic %d), want ErrCorrupt", err, onPanic)
	}
}

// A file cut short under an open store faults when bbolt reads its map
// there; the read fails with ErrCorrupt instead of killing the process.
func TestFileCutUnderOpenStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandflow.db")
	corpusFixture(t, path)
	s, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.Truncate(path, 2*4096); err != nil {
		t.Fatal(err)
	}
	_, err = corpusContents(s)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reads of a file cut short: %v, want ErrCorrupt", err)
	}
}

// The page check reads bbolt's format as the bbolt this store is built
// with writes it: a fresh file, and one grown by many writes, check out.
func TestPageCheckMatchesBolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandflow.db")
	corpusFixture(t, path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := pagecheck.Size(f)
	fc, err := pagecheck.File(f, size, path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var inUse uint64
	err = db.View(func(tx *bolt.Tx) error {
		for id := 2; int64(id) < tx.Size()/int64(fc.PageSize); id++ {
			if pi, err := tx.Page(id); err == nil && pi != nil && (pi.Type == "branch" || pi.Type == "leaf") {
				inUse += uint64(1 + pi.OverflowCount)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fc.PageSize != db.Info().PageSize || fc.Pages != inUse+2 { // + the two meta pages
		t.Fatalf("page check: page size %d, %d pages; bbolt: %d, %d branch and leaf pages + 2 meta", fc.PageSize, fc.Pages, db.Info().PageSize, inUse)
	}
}
