package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/journal"
	bolt "go.etcd.io/bbolt"
)

// fixture is a little of everything the store holds.
type fixture struct {
	runs    []Run
	events  map[string][]Event
	timers  []Timer // sorted by FireAt
	asks    []Ask   // sorted by CreatedAt
	hooks   []Hook
	plugins []Plugin // by name, version
	modules map[string][]byte
}

func writeFixture(t *testing.T, s Store) fixture {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
	f := fixture{events: map[string][]Event{}, modules: map[string][]byte{}}

	big := []byte(`{"log":"` + strings.Repeat("all work and no play ", 200) + `"}`)
	for i, id := range []string{"run-a", "run-b"} {
		evs := []Event{
			{Seq: 1, Time: t0.Add(time.Duration(i) * time.Nanosecond), Kind: "started", Data: []byte(`{"in":1}`)},
			{Seq: 2, Time: t0.Add(time.Second + 7), Kind: "log", Data: big},
		}
		run := Run{ID: id, Tool: "fetch", Plugin: "web", Version: 1, ModuleHash: "m1", Status: StatusRunning,
			CreatedAt: t0.Add(time.Duration(i) * time.Minute), UpdatedAt: t0.Add(time.Hour + 1), LastSeq: 2, Detail: []byte(`{"step":1}`)}
		tm := Timer{RunID: id, ID: "sleep-1", FireAt: t0.Add(time.Duration(10+i)*time.Minute + 999), Kind: "sleep", Position: 3}
		ask := Ask{ID: id + "/q1", RunID: id, Tool: "fetch", Position: 4, Open: true, Request: []byte(`{"q":"ok?"}`), CreatedAt: t0.Add(time.Duration(i) + 1)}
		if err := s.CreateRun(ctx, run, Batch{Events: evs, PutTimers: []Timer{tm}, PutAsks: []Ask{ask}}); err != nil {
			t.Fatalf("CreateRun(%s): %v", id, err)
		}
		f.events[id] = evs
		f.timers = append(f.timers, tm)
		f.asks = append(f.asks, ask)
		f.runs = append([]Run{run}, f.runs...) // newest first
	}
	// One more step on run-a: settle its question, move its timer.
	next := f.runs[1]
	if next.ID != "run-a" {
		t.Fatalf("fixture order: %v", next.ID)
	}
	next.LastSeq = 3
	next.Status = StatusWaiting
	ev := Event{Seq: 3, Time: t0.Add(2 * time.Second), Kind: "waiting", Data: nil}
	settled := f.asks[0]
	settled.Open = false
	moved := f.timers[0]
	moved.FireAt = moved.FireAt.Add(time.Hour)
	if err := s.Append(ctx, "run-a", 2, Batch{Events: []Event{ev}, Run: &next, PutAsks: []Ask{settled}, DeleteTimers: []Timer{f.timers[0]}, PutTimers: []Timer{moved}}); err != nil {
		t.Fatalf("Append: %v", err)
	}
	f.runs[1] = next
	f.events["run-a"] = append(f.events["run-a"], Event{Seq: 3, Time: ev.Time, Kind: ev.Kind})
	f.asks[0] = settled
	f.timers = []Timer{f.timers[1], moved}

	for i, tok := range []string{"hook-1", "hook-2"} {
		if holder, err := s.ClaimHook(ctx, tok, "run-b", uint32(i+1)); err != nil || holder != "" {
			t.Fatalf("ClaimHook(%s) = %q, %v", tok, holder, err)
		}
		f.hooks = append(f.hooks, Hook{Token: tok, RunID: "run-b", HookID: uint32(i + 1)})
	}
	for _, m := range []struct {
		name, hash string
		module     []byte
	}{
		{"web", "m1", []byte("\x00asm small")},
		{"web", "m2", bytes.Repeat([]byte("\x00asm large "), 1000)},
		{"mail", "m1", []byte("\x00asm small")},
	} {
		p, err := s.PutPlugin(ctx, Plugin{Name: m.name, ModuleHash: m.hash, Manifest: []byte(`{"v":1}`), CreatedAt: t0.Add(5)}, m.module)
		if err != nil {
			t.Fatalf("PutPlugin: %v", err)
		}
		f.plugins = append(f.plugins, p)
		f.modules[m.hash] = m.module
	}
	f.plugins = []Plugin{f.plugins[2], f.plugins[0], f.plugins[1]} // mail, web v1, web v2
	return f
}

func checkFixture(t *testing.T, s Store, f fixture) {
	t.Helper()
	ctx := context.Background()
	runs, err := s.Runs(ctx, RunFilter{})
	if err != nil {
		t.Fatalf("Runs: %v", err)
	}
	if d := diffList(runs, f.runs, diffRun); d != "" {
		t.Errorf("Runs: %s", d)
	}
	for _, r := range f.runs {
		got, err := s.Run(ctx, r.ID)
		if err != nil {
			t.Fatalf("Run(%s): %v", r.ID, err)
		}
		if d := diffRun(got, r); d != "" {
			t.Errorf("Run(%s): %s", r.ID, d)
		}
		evs, err := s.Events(ctx, r.ID, 0, 0)
		if err != nil {
			t.Fatalf("Events(%s): %v", r.ID, err)
		}
		if d := diffList(evs, f.events[r.ID], diffEvent); d != "" {
			t.Errorf("Events(%s): %s", r.ID, d)
		}
	}
	due, err := s.DueTimers(ctx, time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), 0)
	if err != nil {
		t.Fatalf("DueTimers: %v", err)
	}
	if d := diffList(due, f.timers, diffTimer); d != "" {
		t.Errorf("DueTimers: %s", d)
	}
	next, ok, err := s.NextTimer(ctx)
	if err != nil || !ok {
		t.Fatalf("NextTimer = %v, %v", ok, err)
	}
	if d := diffTimer(next, f.timers[0]); d != "" {
		t.Errorf("NextTimer: %s", d)
	}
	asks, err := s.Asks(ctx, false)
	if err != nil {
		t.Fatalf("Asks: %v", err)
	}
	if d := diffList(asks, f.asks, diffAsk); d != "" {
		t.Errorf("Asks: %s", d)
	}
	open, err := s.Asks(ctx, true)
	if err != nil {
		t.Fatalf("Asks(open): %v", err)
	}
	if d := diffList(open, f.asks[1:], diffAsk); d != "" {
		t.Errorf("Asks(open): %s", d)
	}
	for _, a := range f.asks {
		got, err := s.Ask(ctx, a.ID)
		if err != nil {
			t.Fatalf("Ask(%s): %v", a.ID, err)
		}
		if d := diffAsk(got, a); d != "" {
			t.Errorf("Ask(%s): %s", a.ID, d)
		}
	}
	for _, h := range f.hooks {
		got, err := s.Hook(ctx, h.Token)
		if err != nil {
			t.Fatalf("Hook(%s): %v", h.Token, err)
		}
		if got != h {
			t.Errorf("Hook(%s) = %+v, want %+v", h.Token, got, h)
		}
	}
	plugins, err := s.Plugins(ctx)
	if err != nil {
		t.Fatalf("Plugins: %v", err)
	}
	if d := diffList(plugins, f.plugins, diffPlugin); d != "" {
		t.Errorf("Plugins: %s", d)
	}
	latest, err := s.Plugin(ctx, "web", 0)
	if err != nil {
		t.Fatalf("Plugin(web, 0): %v", err)
	}
	if d := diffPlugin(latest, f.plugins[2]); d != "" {
		t.Errorf("Plugin(web, latest): %s", d)
	}
	for hash, want := range f.modules {
		got, err := s.Module(ctx, hash)
		if err != nil {
			t.Fatalf("Module(%s): %v", hash, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Module(%s): %d bytes, want %d", hash, len(got), len(want))
		}
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	for _, opts := range []Options{
		{NoSync: true},
		{NoSync: true, CompressThreshold: 16},
		{NoSync: true, CompressThreshold: -1},
		{}, // durable
	} {
		t.Run("", func(t *testing.T) {
			ts := openTestStore(t, opts)
			f := writeFixture(t, ts.S)
			checkFixture(t, ts.S, f)
			ts.reopen()
			checkFixture(t, ts.S, f)
			// The fences survive too: the log position is part of the file.
			err := ts.S.Append(context.Background(), "run-a", 2, Batch{Events: []Event{{Seq: 3, Kind: "late", Time: time.Unix(1, 0)}}})
			wantErr(t, "Append at a stale seq after reopen", err, ErrSeqConflict)
			wantErr(t, "CreateRun of an existing id after reopen",
				ts.S.CreateRun(context.Background(), Run{ID: "run-b"}, Batch{}), ErrRunExists)
			p, err := ts.S.PutPlugin(context.Background(), Plugin{Name: "web", ModuleHash: "m2"}, []byte("x"))
			if err != nil || p.Version != 3 {
				t.Fatalf("PutPlugin after reopen = v%d, %v; want v3", p.Version, err)
			}
		})
	}
}

// Reopening with another compression threshold reads what the old one
// wrote: the flag byte, not the option, says how a value is stored.
func TestReopenWithOtherThreshold(t *testing.T) {
	ts := openTestStore(t, Options{NoSync: true, CompressThreshold: 8})
	f := writeFixture(t, ts.S)
	ts.opts.CompressThreshold = -1
	ts.reopen()
	checkFixture(t, ts.S, f)
}

func TestOpenLocked(t *testing.T) {
	ts := openTestStore(t, Options{NoSync: true})
	start := time.Now()
	s2, err := Open(ts.path, &Options{LockTimeout: 50 * time.Millisecond})
	if err == nil {
		s2.Close()
		t.Fatal("second Open of an open store succeeded")
	}
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("second Open waited %v with a 50ms lock timeout", waited)
	}
	// The first store is unharmed, and the lock goes with Close.
	if _, err := ts.S.Runs(context.Background(), RunFilter{}); err != nil {
		t.Fatalf("Runs on the first store: %v", err)
	}
	ts.reopen()
	if _, err := ts.S.Runs(context.Background(), RunFilter{}); err != nil {
		t.Fatalf("Runs after reopen: %v", err)
	}
}

func TestClosedStore(t *testing.T) {
	ts := openTestStore(t, Options{NoSync: true})
	ctx := context.Background()
	f := writeFixture(t, ts.S)
	s := ts.S
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := map[string]func() error{
		"CreateRun": func() error { return s.CreateRun(ctx, Run{ID: "new"}, Batch{}) },
		"Append":    func() error { return s.Append(ctx, "run-b", 2, Batch{}) },
		"Run":       func() error { _, err := s.Run(ctx, "run-a"); return err },
		"Runs":      func() error { _, err := s.Runs(ctx, RunFilter{}); return err },
		"Events":    func() error { _, err := s.Events(ctx, "run-a", 0, 0); return err },
		"DueTimers": func() error { _, err := s.DueTimers(ctx, time.Now(), 0); return err },
		"NextTimer": func() error { _, _, err := s.NextTimer(ctx); return err },
		"Ask":       func() error { _, err := s.Ask(ctx, "run-a/q1"); return err },
		"Asks":      func() error { _, err := s.Asks(ctx, false); return err },
		"ClaimHook": func() error { _, err := s.ClaimHook(ctx, "hook-3", "run-a", 1); return err },
		"Hook":      func() error { _, err := s.Hook(ctx, "hook-1"); return err },
		"PutPlugin": func() error {
			_, err := s.PutPlugin(ctx, Plugin{Name: "web", ModuleHash: "m9"}, []byte("x"))
			return err
		},
		"Plugin":  func() error { _, err := s.Plugin(ctx, "web", 0); return err },
		"Plugins": func() error { _, err := s.Plugins(ctx); return err },
		"Module":  func() error { _, err := s.Module(ctx, "m1"); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	// Closing twice is harmless.
	if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	// Nothing was written by the refused calls.
	ts.reopen()
	checkFixture(t, ts.S, f)
	if _, err := ts.S.Run(ctx, "new"); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("Run(new) after a refused CreateRun: %v", err)
	}
}

// Close waits for calls in flight and later calls fail cleanly; no call
// may panic or touch a closed bbolt file.
func TestCloseWhileBusy(t *testing.T) {
	ts := openTestStore(t, Options{NoSync: true})
	ctx := context.Background()
	if err := ts.S.CreateRun(ctx, Run{ID: "busy"}, Batch{}); err != nil {
		t.Fatal(err)
	}
	s := ts.S
	done := make(chan error, 4)
	for w := 0; w < 4; w++ {
		go func() {
			for {
				_, err := s.Events(ctx, "busy", 0, 0)
				if err != nil {
					if errors.Is(err, ErrClosed) {
						err = nil
					}
					done <- err
					return
				}
			}
		}()
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for w := 0; w < 4; w++ {
		if err := <-done; err != nil {
			t.Errorf("reader: %v", err)
		}
	}
}

// A format version the build does not read is refused: a newer one as
// not a store it reads, a damaged one as corrupt.
func TestOpenSchemaMismatch(t *testing.T) {
	ts := openTestStore(t, Options{NoSync: true})
	if err := ts.S.Close(); err != nil {
		t.Fatal(err)
	}
	setSchema := func(v []byte) {
		t.Helper()
		db, err := bolt.Open(ts.path, 0o600, &bolt.Options{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaSchema, v) }); err != nil {
			t.Fatal(err)
		}
	}
	sealed := func(n uint32) []byte {
		return integrity.Seal(nil, bucketMeta, metaSchema, binary.BigEndian.AppendUint32(nil, n))
	}
	for _, c := range []struct {
		v    []byte
		want error
	}{
		{sealed(schemaVersion + 1), ErrNotStore},
		{binary.BigEndian.AppendUint32(nil, schemaVersion+1), ErrCorrupt}, // no checksum
		{[]byte{1}, ErrCorrupt},
		{append(sealed(schemaVersion)[:4], 0, 0, 0, 0), ErrCorrupt},
	} {
		setSchema(c.v)
		s, err := Open(ts.path, &Options{LockTimeout: 100 * time.Millisecond})
		if err == nil {
			s.Close()
			t.Fatalf("Open with schema %x succeeded", c.v)
		}
		if !errors.Is(err, c.want) {
			t.Fatalf("Open with schema %x: %v, want %v", c.v, err, c.want)
		}
	}
	// The failed Opens released the file.
	setSchema(sealed(schemaVersion))
	ts.reopen()
}

// writeOldStore writes a store as a build of format old wrote it, values
// without checksums: a run of three events, a timer, a question, a hook,
// a plugin and its module, and a journal record after the checkpoint
// (another event, and the run record that goes with it).
func writeOldStore(t *testing.T, path string, old uint32) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range bucketNames {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		put := func(b, k, v []byte) {
			if err == nil {
				err = tx.Bucket(b).Put(k, v)
			}
		}
		put(bucketMeta, metaSchema, binary.BigEndian.AppendUint32(nil, old))
		put(bucketMeta, metaJournal, binary.BigEndian.AppendUint64(nil, 7))
		r, _ := encodeRun(Run{ID: "old", Tool: "t", Status: StatusWaiting, LastSeq: 3, CreatedAt: time.Unix(1, 0).UTC(), UpdatedAt: time.Unix(2, 0).UTC()})
		put(bucketRuns, []byte("old"), r)
		for seq := uint64(1); seq <= 3; seq++ {
			e, _ := encodeEvent(Event{Seq: seq, Time: time.Unix(int64(seq), 0), Kind: "k", Data: []byte(`{"n":1}`)}, 0)
			put(bucketEvents, eventKey("old", seq), e)
		}
		tm := Timer{RunID: "old", ID: "t1", FireAt: time.Unix(50, 0).UTC()}
		tv, _ := json.Marshal(tm)
		put(bucketTimers, timerKey(tm), tv)
		a, _ := encodeAsk(Ask{ID: "q1", RunID: "old", Tool: "t", Open: true, Request: []byte(`{}`), CreatedAt: time.Unix(3, 0).UTC()})
		put(bucketAsks, []byte("q1"), a)
		h, _ := json.Marshal(Hook{Token: "tok", RunID: "old", HookID: 1})
		put(bucketHooks, []byte("tok"), h)
		p, _ := json.Marshal(Plugin{Name: "p", Version: 1, ModuleHash: "h", Manifest: []byte(`{}`)})
		put(bucketPlugins, pluginKey("p", 1), p)
		put(bucketModules, []byte("h"), packValue(nil, []byte("module bytes"), 0))
		return err
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	// Record 8: event 4 and the run at 4, as the old journal wrote them.
	e4, _ := encodeEvent(Event{Seq: 4, Time: time.Unix(4, 0), Kind: "k", Data: []byte(`{"n":2}`)}, 0)
	r4, _ := encodeRun(Run{ID: "old", Tool: "t", Status: StatusWaiting, LastSeq: 4, CreatedAt: time.Unix(1, 0).UTC(), UpdatedAt: time.Unix(4, 0).UTC()})
	rec := make([]byte, journal.Header)
	for _, kv := range []struct {
		b    bucketID
		k, v []byte
	}{{bEvents, eventKey("old", 4), e4}, {bRuns, []byte("old"), r4}} {
		rec = append(rec, journal.OpPut, byte(kv.b))
		rec = binary.AppendUvarint(rec, uint64(len(kv.k)))
		rec = append(rec, kv.k...)
		rec = binary.AppendUvarint(rec, uint64(len(kv.v)))
		rec = append(rec, kv.v...)
	}
	w := wtx{rec: rec}
	if err := os.WriteFile(path+JournalSuffix, w.seal(8), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A store of a format from before checksums (1, 2, 3) is refused with an
// *OldFormatError and left as it is; Upgrade seals its values, its
// journal's included, after which it opens, reads back and verifies
// clean.
func TestOldFormatRefusedThenUpgraded(t *testing.T) {
	for _, old := range []uint32{1, 2, 3} {
		t.Run(fmt.Sprint(old), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "old.db")
			writeOldStore(t, path, old)
			before, _ := os.ReadFile(path)
			for _, ro := range []bool{false, true} {
				s, err := Open(path, &Options{ReadOnly: ro})
				var oe *OldFormatError
				if !errors.As(err, &oe) || oe.Version != old || !errors.Is(err, ErrOldFormat) {
					if err == nil {
						s.Close()
					}
					t.Fatalf("Open(ReadOnly %v) = %v, want an *OldFormatError of format %d", ro, err, old)
				}
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Fatal("the refused Open changed the file")
			}
			n, err := Upgrade(path)
			if err != nil {
				t.Fatal(err)
			}
			if n != 10 { // 1 run, 4 events, a timer, question, hook, plugin, module
				t.Errorf("Upgrade sealed %d values, want 10", n)
			}
			if _, err := os.Stat(path + JournalSuffix); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("journal after Upgrade: %v, want it removed", err)
			}
			rep, err := Verify(path)
			if err != nil || !rep.OK() {
				t.Fatalf("Verify after Upgrade: %+v, %v", rep, err)
			}
			upgraded, _ := os.ReadFile(path)
			if n, err := Upgrade(path); n != 0 || err != nil {
				t.Fatalf("Upgrade of an upgraded store: %d, %v; want 0, nil", n, err)
			}
			if again, _ := os.ReadFile(path); !bytes.Equal(again, upgraded) {
				t.Fatal("Upgrade of an upgraded store wrote the file")
			}
			s, err := Open(path, &Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r, err := s.Run(context.Background(), "old")
			if err != nil || r.LastSeq != 4 {
				t.Fatalf("run after Upgrade: %+v, %v; want it at event 4 (from the journal)", r, err)
			}
			evs, err := s.Events(context.Background(), "old", 0, 0)
			if err != nil || len(evs) != 4 || string(evs[3].Data) != `{"n":2}` {
				t.Fatalf("events after Upgrade: %+v, %v", evs, err)
			}
			if n, err := Upgrade(path); err == nil || n != 0 {
				// Open holds the file: Upgrade must not get in.
				t.Fatalf("Upgrade of an open store: %d, %v", n, err)
			}
		})
	}
}

func TestOpenNotAStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "garbage.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("not a bbolt file "), 512), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, &Options{LockTimeout: 100 * time.Millisecond})
	if err == nil {
		s.Close()
		t.Fatal("Open of a garbage file succeeded")
	}
	if errors.Is(err, ErrLocked) {
		t.Fatalf("Open of a garbage file: %v; it is not locked", err)
	}
}
