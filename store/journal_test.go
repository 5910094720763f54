package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/journal"
	bolt "go.etcd.io/bbolt"
)

// openJournalTest opens a store whose timer never checkpoints during the
// test, so what is in the journal stays there until the test says.
func openJournalTest(t *testing.T, path string, opts Options) *Bolt {
	t.Helper()
	s, err := Open(path, &opts)
	if err != nil {
		t.Fatal(err)
	}
	s.delay = time.Hour
	return s
}

// appendCrashBatches creates the crash run (journal record 1) and appends
// its batches from..to (record n+1 each).
func appendCrashBatches(t *testing.T, s *Bolt, from, to uint64) {
	t.Helper()
	ctx := context.Background()
	if from == 1 {
		if err := s.CreateRun(ctx, Run{ID: crashRun, Tool: "crash", Status: StatusRunning, CreatedAt: crashBase}, Batch{}); err != nil {
			t.Fatal(err)
		}
	}
	for n := from; n <= to; n++ {
		if err := s.Append(ctx, crashRun, 2*(n-1), crashBatch(n)); err != nil {
			t.Fatalf("batch %d: %v", n, err)
		}
	}
}

// crashCopy copies the store's file and journal to dir as a crash would
// leave them: between writes, with no checkpoint running.
func crashCopy(t *testing.T, s *Bolt, dir string) (db, journal string) {
	t.Helper()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	db = filepath.Join(dir, "copy.db")
	journal = db + JournalSuffix
	for from, to := range map[string]string{s.db.Path(): db, s.j.Path(): journal} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return db, journal
}

// mainFileSeq reads the crash run's LastSeq from the main file alone, as
// bbolt has it, without the journal (0 when the run is not there).
func mainFileSeq(t *testing.T, path string) uint64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var seq uint64
	err = db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketRuns).Get([]byte(crashRun)); v != nil {
			var r Run
			if err := decodeRunValue([]byte(crashRun), v, &r); err != nil {
				return err
			}
			seq = r.LastSeq
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// reopenedSeq opens the store at path (applying its journal) and returns
// the crash run's LastSeq after checking the log matches it batch for
// batch.
func reopenedSeq(t *testing.T, path string) uint64 {
	t.Helper()
	s, err := Open(path, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(context.Background(), crashRun)
	if cerr := s.Close(); cerr != nil {
		t.Fatal(cerr)
	}
	if errors.Is(err, ErrRunNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, path)
	checkCrashLog(t, path, r.LastSeq/2) // the log, timers and questions of exactly those batches
	return r.LastSeq
}

// Writes that returned are in the journal, not yet in the main file, and a
// crash then loses none of them.
func TestJournalKeepsWritesUntilCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := openJournalTest(t, filepath.Join(dir, "s.db"), Options{})
	defer s.Close()
	appendCrashBatches(t, s, 1, 10)
	db, _ := crashCopy(t, s, t.TempDir())
	if got := mainFileSeq(t, db); got != 0 {
		t.Fatalf("main file has the run at seq %d before any checkpoint", got)
	}
	if got := reopenedSeq(t, db); got != 20 {
		t.Fatalf("after the crash the run is at seq %d, want 20", got)
	}
	if _, err := os.Stat(db + JournalSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal after a clean close of the recovered copy: %v, want it removed", err)
	}
	if got := mainFileSeq(t, db); got != 20 {
		t.Fatalf("after recovery and Close the main file has seq %d, want 20", got)
	}
}

// A torn or damaged record ends the journal: what came before it is
// recovered, nothing after.
func TestJournalTornTail(t *testing.T) {
	s := openJournalTest(t, filepath.Join(t.TempDir(), "s.db"), Options{NoSync: true})
	defer s.Close()
	appendCrashBatches(t, s, 1, 6) // records 1 (create) .. 7 (batch 6)
	db, jpath := crashCopy(t, s, t.TempDir())
	// The records alone: a mapped journal's file goes on with zeros (the
	// "zeros after the end" case).
	whole := journalRecords(t, jpath)
	var starts []int // record offsets
	for off := 0; off < len(whole); off += journal.Header + int(binary.BigEndian.Uint32(whole[off:])) {
		starts = append(starts, off)
	}
	if len(starts) != 7 {
		t.Fatalf("journal holds %d records, want 7", len(starts))
	}
	last := starts[6]
	// wantSeq 0 with corrupt: Open refuses the journal with a
	// *CorruptError, and changes neither file.
	cases := []struct {
		name    string
		damage  func(b []byte) []byte
		wantSeq uint64
		corrupt bool
	}{
		{"whole", func(b []byte) []byte { return b }, 12, false},
		{"last record cut short", func(b []byte) []byte { return b[:len(b)-1] }, 10, false},
		{"last record's header only", func(b []byte) []byte { return b[:last+journal.Header] }, 10, false},
		{"half a header", func(b []byte) []byte { return b[:last+5] }, 10, false},
		{"a byte of the last record flipped", func(b []byte) []byte { b[len(b)-3] ^= 1; return b }, 10, false},
		// Damage with intact records after it is not a torn tail: the
		// records after it were written, and returned.
		{"a byte of record 4 flipped", func(b []byte) []byte { b[starts[3]+journal.Header+2] ^= 0x40; return b }, 0, true},
		{"record 3's length zeroed", func(b []byte) []byte { copy(b[starts[2]:], []byte{0, 0, 0, 0}); return b }, 0, true},
		{"a byte of record 1 flipped", func(b []byte) []byte { b[starts[0]+journal.Header+1] ^= 0x01; return b }, 0, true},
		{"record 2's checksum flipped", func(b []byte) []byte { b[starts[1]+5] ^= 0x80; return b }, 0, true},
		{"zeros after the end", func(b []byte) []byte { return append(b, make([]byte, 4096)...) }, 12, false},
		{"empty", func(b []byte) []byte { return nil }, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			p := filepath.Join(d, "c.db")
			raw, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			j := c.damage(append([]byte(nil), whole...))
			if err := os.WriteFile(p+JournalSuffix, j, 0o600); err != nil {
				t.Fatal(err)
			}
			if c.corrupt {
				s, err := Open(p, &Options{NoSync: true})
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Bucket != "journal" || ce.Offset < 0 {
					if err == nil {
						s.Close()
					}
					t.Fatalf("Open = %v, want a *CorruptError naming the journal and an offset", err)
				}
				if got, err := os.ReadFile(p + JournalSuffix); err != nil || !bytes.Equal(got, j) {
					t.Fatalf("the refused journal was changed (%v)", err)
				}
				if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, raw) {
					t.Fatalf("the main file was changed (%v)", err)
				}
				rep, err := Verify(p)
				if err != nil || rep.OK() {
					t.Fatalf("Verify = %+v, %v; want a finding", rep, err)
				}
				return
			}
			if got := reopenedSeq(t, p); got != c.wantSeq {
				t.Fatalf("recovered seq %d, want %d", got, c.wantSeq)
			}
		})
	}
}

// Records left in the journal from before a checkpoint (a mapped journal
// written again from its beginning, a truncate that failed or did not
// reach the disk) are skipped wherever they are.
func TestJournalStaleRecords(t *testing.T) {
	s := openJournalTest(t, filepath.Join(t.TempDir(), "s.db"), Options{NoSync: true})
	defer s.Close()
	if runtime.GOOS == "linux" && !s.j.Mapped() {
		t.Fatal("the journal is not mapped")
	}
	appendCrashBatches(t, s, 1, 5) // records 1..6
	_, j1 := crashCopy(t, s, t.TempDir())
	s.wmu.Lock()
	err := s.checkpoint()
	s.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	appendCrashBatches(t, s, 6, 8) // records 7..9
	db2, j2 := crashCopy(t, s, t.TempDir())
	if got := mainFileSeq(t, db2); got != 10 {
		t.Fatalf("main file after the checkpoint at seq %d, want 10", got)
	}
	asLeft, err := os.ReadFile(j2)
	if err != nil {
		t.Fatal(err)
	}
	// Records 7..9 were written over the start of 1..6, whose remains
	// follow them in the file.
	if seqs := journalSeqs(t, j2); len(seqs) != 3 || seqs[0] != 7 || seqs[2] != 9 {
		t.Fatalf("journal after the checkpoint holds records %v, want 7..9", seqs)
	}
	old, recent := journalRecords(t, j1), journalRecords(t, j2)
	for name, j := range map[string][]byte{
		"as left":         asLeft,
		"old then recent": append(append([]byte(nil), old...), recent...),
		"recent then old": append(append([]byte(nil), recent...), old...),
		"old only":        old,
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.db")
			raw, err := os.ReadFile(db2)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p+JournalSuffix, j, 0o600); err != nil {
				t.Fatal(err)
			}
			want := uint64(16)
			if name == "old only" {
				want = 10
			}
			if got := reopenedSeq(t, p); got != want {
				t.Fatalf("recovered seq %d, want %d", got, want)
			}
		})
	}
}

// A write that fails after it has put keys leaves none of them, and the
// writes journaled before it stay visible, before and after a reopen.
func TestJournalFailedWriteLeavesNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s := openJournalTest(t, path, Options{NoSync: true})
	appendCrashBatches(t, s, 1, 3)
	if err := s.CreateRun(ctx, Run{ID: "holder"}, Batch{ClaimHooks: []Hook{{Token: "tok", RunID: "holder", HookID: 1}}}); err != nil {
		t.Fatal(err)
	}
	if len(s.pending) != 5 {
		t.Fatalf("%d records pending, want 5", len(s.pending))
	}
	b := crashBatch(4)
	b.ClaimHooks = []Hook{{Token: "tok", RunID: crashRun, HookID: 2}}
	if err := s.Append(ctx, crashRun, 6, b); !errors.Is(err, ErrHookTaken) {
		t.Fatalf("Append claiming a held hook: %v, want ErrHookTaken", err)
	}
	check := func(when string) {
		t.Helper()
		evs, err := s.Events(ctx, crashRun, 0, 0)
		if err != nil || len(evs) != 6 {
			t.Fatalf("%s: %d events, %v; want the 6 of batches 1-3", when, len(evs), err)
		}
		if h, err := s.Hook(ctx, "tok"); err != nil || h.RunID != "holder" {
			t.Fatalf("%s: hook %+v, %v", when, h, err)
		}
		open, err := s.Asks(ctx, true)
		if err != nil || len(open) != 1 || open[0].ID != "q3" {
			t.Fatalf("%s: open questions %+v, %v; want q3", when, open, err)
		}
		if r, err := s.Run(ctx, crashRun); err != nil || r.LastSeq != 6 {
			t.Fatalf("%s: run %+v, %v", when, r, err)
		}
	}
	check("after the refused write")
	if err := s.Append(ctx, crashRun, 6, crashBatch(4)); err != nil {
		t.Fatalf("the same batch without the claim: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := reopenedSeq(t, path); got != 8 {
		t.Fatalf("after reopen seq %d, want 8", got)
	}
}

// A journal that cannot be written stops the store's writes with
// ErrJournalBroken; what was written before survives a reopen.
func TestJournalBroken(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s := openJournalTest(t, path, Options{NoSync: true})
	appendCrashBatches(t, s, 1, 2)
	// Unmapped, the journal is written with pwrite, and with its file
	// closed every write and truncate fails. (A copy into the mapping
	// cannot fail: its disk space is reserved.)
	s.j.Close()
	if err := s.Append(ctx, crashRun, 4, crashBatch(3)); !errors.Is(err, ErrJournalBroken) {
		t.Fatalf("Append with the journal closed: %v, want ErrJournalBroken", err)
	}
	if err := s.PutSession(ctx, "x", []byte("y")); !errors.Is(err, ErrJournalBroken) {
		t.Fatalf("a later write: %v, want ErrJournalBroken", err)
	}
	if r, err := s.Run(ctx, crashRun); err != nil || r.LastSeq != 4 {
		t.Fatalf("reading after the break: %+v, %v; want seq 4", r, err)
	}
	if err := s.Close(); !errors.Is(err, ErrJournalBroken) {
		t.Fatalf("Close: %v, want ErrJournalBroken", err)
	}
	if _, err := os.Stat(path + JournalSuffix); err != nil {
		t.Fatalf("the journal must be kept when its checkpoint did not happen: %v", err)
	}
	if got := reopenedSeq(t, path); got != 4 {
		t.Fatalf("after reopen seq %d, want 4", got)
	}
}

// Checkpoints come by count and by time, and Close leaves one file.
func TestJournalCheckpoints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(journalMaxRecords + 40)
	s.delay = time.Hour
	appendCrashBatches(t, s, 1, n)
	s.wmu.Lock()
	pending := len(s.pending)
	s.wmu.Unlock()
	if want := int(n+1) - journalMaxRecords; pending != want {
		t.Fatalf("%d records pending after %d writes, want %d (a checkpoint at %d)", pending, n+1, want, journalMaxRecords)
	}
	s.wmu.Lock()
	s.delay = 10 * time.Millisecond
	s.wmu.Unlock()
	s.timer.Reset(s.delay)
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.wmu.Lock()
		pending, size := len(s.pending), s.j.Size()
		s.wmu.Unlock()
		if pending == 0 && size == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint by time: %d records, %d bytes pending", pending, size)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + JournalSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal after Close: %v, want it removed", err)
	}
	if got := mainFileSeq(t, path); got != 2*n {
		t.Fatalf("main file at seq %d after Close, want %d", got, 2*n)
	}
}

// A log that holds events past its run record's LastSeq (a damaged file)
// is never written over: an Append there is refused with ErrSeqConflict,
// whether the stray event is the next one or far beyond.
func TestAppendRefusesStrayEvents(t *testing.T) {
	for _, stray := range []uint64{5, 40} {
		path := filepath.Join(t.TempDir(), "s.db")
		s := openJournalTest(t, path, Options{NoSync: true})
		appendCrashBatches(t, s, 1, 2) // events 1-4
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		v, err := encodeEvent(Event{Seq: stray, Time: crashBase, Kind: "stray"}, 0)
		if err == nil {
			k := eventKey(crashRun, stray)
			err = db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketEvents).Put(k, integrity.Seal(nil, bucketEvents, k, v))
			})
		}
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		s = openJournalTest(t, path, Options{NoSync: true})
		err = s.Append(context.Background(), crashRun, 4, crashBatch(3))
		if !errors.Is(err, ErrSeqConflict) {
			t.Errorf("stray event %d: Append = %v, want ErrSeqConflict", stray, err)
		}
		if r, err := s.Run(context.Background(), crashRun); err != nil || r.LastSeq != 4 {
			t.Errorf("stray event %d: run after the refused Append: %+v, %v", stray, r, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Checkpoint puts every write into the main file at once; on a closed
// store it fails with ErrClosed.
func TestCheckpointNow(t *testing.T) {
	s := openJournalTest(t, filepath.Join(t.TempDir(), "s.db"), Options{NoSync: true})
	appendCrashBatches(t, s, 1, 3)
	db, _ := crashCopy(t, s, t.TempDir())
	if got := mainFileSeq(t, db); got != 0 {
		t.Fatalf("main file at seq %d before Checkpoint", got)
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	db, journal := crashCopy(t, s, t.TempDir())
	if got := mainFileSeq(t, db); got != 6 {
		t.Fatalf("main file at seq %d after Checkpoint, want 6", got)
	}
	// The journal starts again at its beginning; what it still holds is
	// in the main file already.
	if s.j.Size() != 0 {
		t.Fatalf("journal after Checkpoint ends at %d, want 0", s.j.Size())
	}
	if recs := journalSeqs(t, journal); len(recs) > 0 && recs[len(recs)-1] > 6 {
		t.Fatalf("journal after Checkpoint holds records %v past the main file's 6", recs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Checkpoint after Close: %v, want ErrClosed", err)
	}
}

// A failed sync stops the store: the write it was for fails, later writes
// and reads fail, no checkpoint writes it into the main file, and what was
// synced before survives a reopen.
func TestJournalSyncFails(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s := openJournalTest(t, path, Options{})
	appendCrashBatches(t, s, 1, 2)
	syncJournal = func(*os.File) error { return errors.New("injected: EIO") }
	defer func() { syncJournal = journal.Fdatasync }()
	if err := s.Append(ctx, crashRun, 4, crashBatch(3)); !errors.Is(err, ErrJournalBroken) {
		t.Fatalf("Append whose sync fails: %v, want ErrJournalBroken", err)
	}
	syncJournal = journal.Fdatasync
	if err := s.Append(ctx, crashRun, 4, crashBatch(3)); !errors.Is(err, ErrJournalBroken) {
		t.Fatalf("a later Append: %v, want ErrJournalBroken", err)
	}
	if _, err := s.Run(ctx, crashRun); !errors.Is(err, ErrJournalBroken) {
		t.Fatalf("a read after the failed sync: %v, want ErrJournalBroken", err)
	}
	if err := s.Checkpoint(); !errors.Is(err, ErrJournalBroken) {
		t.Fatalf("Checkpoint after the failed sync: %v, want ErrJournalBroken", err)
	}
	// The timer's checkpoint may come between a failed sync and the store
	// being marked broken: checkpoint itself refuses.
	s.wmu.Lock()
	broken := s.broken
	s.broken = nil
	err := s.checkpoint()
	s.broken = broken
	s.wmu.Unlock()
	if !errors.Is(err, ErrJournalBroken) {
		t.Fatalf("a checkpoint after the failed sync: %v, want ErrJournalBroken", err)
	}
	if err := s.Close(); !errors.Is(err, ErrJournalBroken) {
		t.Fatalf("Close: %v, want ErrJournalBroken", err)
	}
	if got := mainFileSeq(t, path); got != 0 {
		t.Fatalf("main file at seq %d: a checkpoint ran after the failed sync", got)
	}
	// The journal holds the synced batches (and, as after any failed
	// sync, maybe the one it failed for).
	if got := reopenedSeq(t, path); got != 4 && got != 6 {
		t.Fatalf("after reopen seq %d, want 4 (or 6)", got)
	}
}

// A write is seen by no reader before its journal sync is done: with the
// sync held, a reader waits for it too, then sees the write; and writers
// that queue behind a running sync share the next one.
func TestJournalReadWaitsForSync(t *testing.T) {
	ctx := context.Background()
	s := openJournalTest(t, filepath.Join(t.TempDir(), "s.db"), Options{})
	defer s.Close()
	appendCrashBatches(t, s, 1, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	defer let() // before Close, which waits for the writer held in its sync
	var syncs atomic.Int32
	syncJournal = func(f *os.File) error {
		syncs.Add(1)
		<-release
		return journal.Fdatasync(f)
	}
	defer func() { syncJournal = journal.Fdatasync }()

	wrote := make(chan error, 1)
	go func() { wrote <- s.Append(ctx, crashRun, 2, crashBatch(2)) }()
	for syncs.Load() == 0 {
		time.Sleep(time.Millisecond) // the writer is in its sync
	}
	read := make(chan Run, 1)
	go func() {
		r, err := s.Run(ctx, crashRun)
		if err != nil {
			t.Error(err)
		}
		read <- r
	}()
	// Two more writers on other runs queue behind the held sync.
	others := make(chan error, 2)
	for _, id := range []string{"other-1", "other-2"} {
		go func() { others <- s.CreateRun(ctx, Run{ID: id}, Batch{}) }()
	}
	select {
	case r := <-read:
		t.Fatalf("a read returned (seq %d) while the write's sync was held", r.LastSeq)
	case err := <-wrote:
		t.Fatalf("Append returned (%v) before its sync", err)
	case <-time.After(100 * time.Millisecond):
	}
	let()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if r := <-read; r.LastSeq != 4 {
		t.Fatalf("the read after the sync saw seq %d, want 4", r.LastSeq)
	}
	for range 2 {
		if err := <-others; err != nil {
			t.Fatal(err)
		}
	}
	// The held sync, then at most one for the reader and one for the
	// writers queued behind it (they may share the reader's).
	if n := syncs.Load(); n > 3 {
		t.Errorf("%d syncs for 3 writes and a read; queued writers should share one", n)
	}
}

// readJournal returns the records that check out in a journal file, in
// order, up to the first that does not.
func readJournal(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs [][]byte
	for {
		r, ok := journal.RecordAt(data)
		if !ok {
			return recs
		}
		recs = append(recs, r)
		data = data[len(r):]
	}
}

// journalSeqs returns the seqs of readJournal's records.
func journalSeqs(t *testing.T, path string) []uint64 {
	var seqs []uint64
	for _, r := range readJournal(t, path) {
		seqs = append(seqs, journal.Seq(r))
	}
	return seqs
}

// journalRecords returns readJournal's records, one after another, without
// what follows them in the file.
func journalRecords(t *testing.T, path string) []byte {
	var b []byte
	for _, r := range readJournal(t, path) {
		b = append(b, r...)
	}
	return b
}
