package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store"
)

var ctxBG = context.Background()

var cases = []testCase{
	{"FencedAppendConcurrent", testFencedAppendConcurrent},
	{"AppendRecordOnlyStale", testAppendRecordOnlyStale},
	{"RefusedBatchIsAtomic", testRefusedBatchIsAtomic},
	{"RunIDs", testRunIDs},
	{"Hooks", testHooks},
	{"ClaimHookEmptyRunID", testClaimHookEmptyRunID},
	{"Plugins", testPlugins},
	{"PluginVersionBeyondUint32", testPluginVersionBeyondUint32},
	{"EventsPaging", testEventsPaging},
	{"EventsAfterMaxSeq", testEventsAfterMaxSeq},
	{"EventTimeOutOfRange", testEventTimeOutOfRange},
	{"TimesReadBackInUTC", testTimesReadBackInUTC},
	{"Timers", testTimers},
	{"TimersBeforeEpoch", testTimersBeforeEpoch},
	{"RunsOrderAndFilter", testRunsOrderAndFilter},
	{"Sessions", testSessions},
	{"Snapshots", testSnapshots},
	{"States", testStates},
}

func mustCreate(t *testing.T, s store.Store, id string, events int) store.Run {
	t.Helper()
	run := store.Run{ID: id, Tool: "t", Status: store.StatusRunning, CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 1, time.UTC), LastSeq: uint64(events)}
	var evs []store.Event
	for i := 1; i <= events; i++ {
		evs = append(evs, store.Event{Seq: uint64(i), Time: time.Unix(1700000000, int64(i)), Kind: "e", Data: []byte(fmt.Sprintf(`{"i":%d}`, i))})
	}
	if err := s.CreateRun(ctxBG, run, store.Batch{Events: evs}); err != nil {
		t.Fatalf("CreateRun(%s): %v", id, err)
	}
	return run
}

// Many writers race to append to one run, each from the position it last
// read. Exactly the winners' batches end up in the log, densely, and every
// loser is told store.ErrSeqConflict: with the run record kept, and replaced
// (as the host does, which reads only the stored record's lastSeq).
func testFencedAppendConcurrent(t *testing.T, open Opener) {
	t.Run("record kept", func(t *testing.T) { fencedAppendConcurrent(t, open, false) })
	t.Run("record replaced", func(t *testing.T) { fencedAppendConcurrent(t, open, true) })
}

// A batch that replaces the run record and adds no event is refused when
// the record says the log ends elsewhere: nothing but the record's lastSeq
// stops it from writing a record behind its log.
func testAppendRecordOnlyStale(t *testing.T, open Opener) {
	ts := begin(t, open)
	run := mustCreate(t, ts.S, "r", 3)
	stale := run
	stale.LastSeq = 2
	if err := ts.S.Append(ctxBG, "r", 2, store.Batch{Run: &stale}); !errors.Is(err, store.ErrSeqConflict) {
		t.Fatalf("Append at 2 of a run at 3: %v, want store.ErrSeqConflict", err)
	}
	current := run
	current.Status = store.StatusWaiting
	if err := ts.S.Append(ctxBG, "r", 3, store.Batch{Run: &current}); err != nil {
		t.Fatal(err)
	}
	if r, err := ts.S.Run(ctxBG, "r"); err != nil || r.LastSeq != 3 || r.Status != store.StatusWaiting {
		t.Fatalf("run after the appends: %+v, %v", r, err)
	}
}

func fencedAppendConcurrent(t *testing.T, open Opener, replace bool) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "fenced", 0)
	const writers, attempts = 6, 40
	var mu sync.Mutex
	won := map[string]bool{}
	conflicts := 0
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := 0; a < attempts; a++ {
				r, err := ts.S.Run(ctxBG, "fenced")
				if err != nil {
					t.Errorf("Run: %v", err)
					return
				}
				tag := fmt.Sprintf("w%d-a%d", w, a)
				b := store.Batch{Events: []store.Event{
					{Seq: r.LastSeq + 1, Time: time.Unix(0, 1), Kind: "a", Data: []byte(`"` + tag + `"`)},
					{Seq: r.LastSeq + 2, Time: time.Unix(0, 2), Kind: "b", Data: []byte(`"` + tag + `"`)},
				}}
				if replace {
					rec := r
					rec.LastSeq += 2
					b.Run = &rec
				}
				err = ts.S.Append(ctxBG, "fenced", r.LastSeq, b)
				mu.Lock()
				switch {
				case err == nil:
					won[tag] = true
				case errors.Is(err, store.ErrSeqConflict):
					conflicts++
				default:
					t.Errorf("Append: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	evs, err := ts.S.Events(ctxBG, "fenced", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2*len(won) {
		t.Fatalf("%d events for %d winning batches", len(evs), len(won))
	}
	if len(won)+conflicts != writers*attempts {
		t.Fatalf("%d wins + %d conflicts for %d attempts", len(won), conflicts, writers*attempts)
	}
	seen := map[string]bool{}
	for i := 0; i < len(evs); i += 2 {
		a, b := evs[i], evs[i+1]
		if a.Seq != uint64(i+1) || b.Seq != uint64(i+2) || a.Kind != "a" || b.Kind != "b" || !bytes.Equal(a.Data, b.Data) {
			t.Fatalf("events %d,%d are not one batch: %+v %+v", i+1, i+2, a, b)
		}
		tag := strings.Trim(string(a.Data), `"`)
		if !won[tag] || seen[tag] {
			t.Fatalf("batch %s in the log: won=%v, seen before=%v", tag, won[tag], seen[tag])
		}
		seen[tag] = true
	}
	r, err := ts.S.Run(ctxBG, "fenced")
	if err != nil || r.LastSeq != uint64(len(evs)) {
		t.Fatalf("store.Run = LastSeq %d, %v; want %d", r.LastSeq, err, len(evs))
	}
}

// A refused batch changes nothing, whatever part of it is wrong.
func testRefusedBatchIsAtomic(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "atomic", 2)
	if _, err := ts.S.ClaimHook(ctxBG, "tok", "atomic", 1); err != nil {
		t.Fatal(err)
	}
	good := func() store.Batch {
		return store.Batch{
			Events:       []store.Event{{Seq: 3, Time: time.Unix(5, 5), Kind: "x", Data: []byte(`{}`)}},
			PutTimers:    []store.Timer{{RunID: "atomic", ID: "t", FireAt: time.Unix(100, 0)}},
			PutAsks:      []store.Ask{{ID: "q", RunID: "atomic", Open: true, Request: []byte(`{}`)}},
			ReleaseHooks: []string{"tok"},
		}
	}
	cases := map[string]func(b *store.Batch){
		"timer of another run": func(b *store.Batch) { b.PutTimers = append(b.PutTimers, store.Timer{RunID: "other", ID: "t2"}) },
		"question without id":  func(b *store.Batch) { b.PutAsks = append(b.PutAsks, store.Ask{RunID: "atomic"}) },
		"question of another":  func(b *store.Batch) { b.PutAsks[0].RunID = "other" },
		"empty kind":           func(b *store.Batch) { b.Events[0].Kind = "" },
		"kind of 256 bytes":    func(b *store.Batch) { b.Events[0].Kind = strings.Repeat("k", 256) },
		"seq gap":              func(b *store.Batch) { b.Events[0].Seq = 4 },
		"record behind log":    func(b *store.Batch) { b.Run = &store.Run{ID: "atomic", LastSeq: 2} },
		"record of other run":  func(b *store.Batch) { b.Run = &store.Run{ID: "other", LastSeq: 3} },
	}
	for name, spoil := range cases {
		b := good()
		spoil(&b)
		err := ts.S.Append(ctxBG, "atomic", 2, b)
		if !errors.Is(err, store.ErrBadBatch) {
			t.Errorf("%s: Append = %v, want store.ErrBadBatch", name, err)
		}
	}
	// Detail and Request must be JSON; a batch with broken JSON is refused
	// too (not necessarily as store.ErrBadBatch), and leaves nothing behind.
	b := good()
	b.Run = &store.Run{ID: "atomic", LastSeq: 3, Detail: []byte(`{broken`)}
	if err := ts.S.Append(ctxBG, "atomic", 2, b); err == nil {
		t.Errorf("Append with a broken Detail succeeded")
	}
	b = good()
	b.PutAsks[0].Request = []byte(`[`)
	if err := ts.S.Append(ctxBG, "atomic", 2, b); err == nil {
		t.Errorf("Append with a broken question request succeeded")
	}

	r, err := ts.S.Run(ctxBG, "atomic")
	if err != nil || r.LastSeq != 2 {
		t.Fatalf("store.Run after refused batches: LastSeq %d, %v", r.LastSeq, err)
	}
	if evs, _ := ts.S.Events(ctxBG, "atomic", 0, 0); len(evs) != 2 {
		t.Errorf("%d events after refused batches, want 2", len(evs))
	}
	if _, ok, _ := ts.S.NextTimer(ctxBG); ok {
		t.Errorf("a refused batch left a timer")
	}
	if _, err := ts.S.Ask(ctxBG, "q"); !errors.Is(err, store.ErrAskNotFound) {
		t.Errorf("a refused batch left a question: %v", err)
	}
	if h, err := ts.S.Hook(ctxBG, "tok"); err != nil || h.RunID != "atomic" {
		t.Errorf("a refused batch released a hook: %+v, %v", h, err)
	}
	// And the good batch still goes through.
	if err := ts.S.Append(ctxBG, "atomic", 2, good()); err != nil {
		t.Fatalf("good batch: %v", err)
	}
	if _, err := ts.S.Hook(ctxBG, "tok"); !errors.Is(err, store.ErrHookNotFound) {
		t.Errorf("hook not released: %v", err)
	}
}

func testRunIDs(t *testing.T, open Opener) {
	ts := begin(t, open)
	for _, id := range []string{"", " ", "a b", "a/b", "a\x00b", "é", "a\n", strings.Repeat("a", 129)} {
		err := ts.S.CreateRun(ctxBG, store.Run{ID: id}, store.Batch{})
		if !errors.Is(err, store.ErrBadBatch) {
			t.Errorf("CreateRun(%q) = %v, want store.ErrBadBatch", id, err)
		}
		if !errors.Is(store.ValidRunID(id), store.ErrBadBatch) {
			t.Errorf("store.ValidRunID(%q) accepted it", id)
		}
	}
	for _, id := range []string{"a", "A-z_0.9:x", strings.Repeat("z", 128)} {
		if err := ts.S.CreateRun(ctxBG, store.Run{ID: id}, store.Batch{}); err != nil {
			t.Errorf("CreateRun(%q) = %v", id, err)
		}
		if err := ts.S.CreateRun(ctxBG, store.Run{ID: id}, store.Batch{}); !errors.Is(err, store.ErrRunExists) {
			t.Errorf("second CreateRun(%q) = %v, want store.ErrRunExists", id, err)
		}
	}
	runs, err := ts.S.Runs(ctxBG, store.RunFilter{})
	if err != nil || len(runs) != 3 {
		t.Fatalf("Runs = %d runs, %v; want 3", len(runs), err)
	}
	if err := ts.S.Append(ctxBG, "nope", 0, store.Batch{}); !errors.Is(err, store.ErrRunNotFound) {
		t.Errorf("Append to an unknown run = %v", err)
	}
	if _, err := ts.S.Events(ctxBG, "nope", 0, 0); !errors.Is(err, store.ErrRunNotFound) {
		t.Errorf("Events of an unknown run = %v", err)
	}
}

func testHooks(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "r1", 0)
	mustCreate(t, ts.S, "r2", 0)
	claim := func(tok, run string, id uint32, wantHolder string) {
		t.Helper()
		holder, err := ts.S.ClaimHook(ctxBG, tok, run, id)
		if err != nil || holder != wantHolder {
			t.Fatalf("ClaimHook(%s, %s) = %q, %v; want %q", tok, run, holder, err, wantHolder)
		}
	}
	hook := func(tok string, want store.Hook) {
		t.Helper()
		h, err := ts.S.Hook(ctxBG, tok)
		if err != nil || h != want {
			t.Fatalf("store.Hook(%s) = %+v, %v; want %+v", tok, h, err, want)
		}
	}
	claim("x", "r1", 1, "")
	claim("x", "r1", 2, "") // same run: succeeds, takes the new hook id
	hook("x", store.Hook{Token: "x", RunID: "r1", HookID: 2})
	claim("x", "r2", 3, "r1") // taken: nothing changes
	hook("x", store.Hook{Token: "x", RunID: "r1", HookID: 2})
	// r2 cannot release r1's token.
	if err := ts.S.Append(ctxBG, "r2", 0, store.Batch{ReleaseHooks: []string{"x", "unknown"}}); err != nil {
		t.Fatal(err)
	}
	hook("x", store.Hook{Token: "x", RunID: "r1", HookID: 2})
	if err := ts.S.Append(ctxBG, "r1", 0, store.Batch{ReleaseHooks: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.S.Hook(ctxBG, "x"); !errors.Is(err, store.ErrHookNotFound) {
		t.Fatalf("store.Hook after release = %v", err)
	}
	claim("x", "r2", 4, "")
	hook("x", store.Hook{Token: "x", RunID: "r2", HookID: 4})
	if _, err := ts.S.ClaimHook(ctxBG, "", "r1", 1); !errors.Is(err, store.ErrBadBatch) {
		t.Errorf("ClaimHook with an empty token = %v", err)
	}
}

// ClaimHook with an empty run id is refused (store.ErrBadBatch) or, if
// accepted, never makes a later claim by a real run look like a success it
// is not: the real run is either told the token is taken or holds it.
func testClaimHookEmptyRunID(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "r1", 0)
	if _, err := ts.S.ClaimHook(ctxBG, "tok", "", 1); err != nil {
		if !errors.Is(err, store.ErrBadBatch) {
			t.Fatalf("ClaimHook with no run = %v, want nil or store.ErrBadBatch", err)
		}
		return // refused: fine
	}
	holder, err := ts.S.ClaimHook(ctxBG, "tok", "r1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if holder != "" {
		return // reported as taken: the caller can tell
	}
	h, err := ts.S.Hook(ctxBG, "tok")
	if err != nil || h.RunID != "r1" {
		t.Errorf("ClaimHook(tok, r1) reported success, but store.Hook(tok) = %+v, %v", h, err)
	}
}

func testPlugins(t *testing.T, open Opener) {
	ts := begin(t, open)
	big := bytes.Repeat([]byte("wasm"), 1000)
	put := func(name, hash string, module []byte, wantVersion int) store.Plugin {
		t.Helper()
		p, err := ts.S.PutPlugin(ctxBG, store.Plugin{Name: name, ModuleHash: hash, Manifest: []byte(`{}`), Version: 42, Size: 7}, module)
		if err != nil || p.Version != wantVersion || p.Size != len(module) {
			t.Fatalf("PutPlugin(%s) = v%d size %d, %v; want v%d size %d", name, p.Version, p.Size, err, wantVersion, len(module))
		}
		return p
	}
	put("p", "h1", big, 1)
	put("p", "h1", []byte("other bytes, same hash"), 2)
	put("p", "h2", []byte{}, 3)
	put("p-x", "h2", []byte("y"), 1)
	put("q", "h3", []byte("small"), 1)
	for _, c := range []struct {
		name    string
		version int
		want    int
	}{{"p", 0, 3}, {"p", 1, 1}, {"p", 3, 3}, {"p-x", 0, 1}, {"q", 0, 1}} {
		p, err := ts.S.Plugin(ctxBG, c.name, c.version)
		if err != nil || p.Name != c.name || p.Version != c.want {
			t.Errorf("store.Plugin(%s, %d) = %s v%d, %v; want v%d", c.name, c.version, p.Name, p.Version, err, c.want)
		}
	}
	for _, c := range []struct {
		name    string
		version int
	}{{"p", 4}, {"nope", 0}, {"nope", 1}, {"", 0}, {"p\x00", 0}} {
		if _, err := ts.S.Plugin(ctxBG, c.name, c.version); !errors.Is(err, store.ErrPluginNotFound) {
			t.Errorf("store.Plugin(%q, %d) = %v, want store.ErrPluginNotFound", c.name, c.version, err)
		}
	}
	all, err := ts.S.Plugins(ctxBG)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range all {
		got = append(got, fmt.Sprintf("%s/%d", p.Name, p.Version))
	}
	if want := "p/1 p/2 p/3 p-x/1 q/1"; strings.Join(got, " ") != want {
		t.Errorf("Plugins = %v, want %s", got, want)
	}
	// Module bytes are stored once per hash: the first bytes stay.
	for hash, want := range map[string][]byte{"h1": big, "h2": nil, "h3": []byte("small")} {
		m, err := ts.S.Module(ctxBG, hash)
		if err != nil || !bytes.Equal(m, want) {
			t.Errorf("Module(%s) = %d bytes, %v; want %d", hash, len(m), err, len(want))
		}
	}
	if _, err := ts.S.Module(ctxBG, "h4"); !errors.Is(err, store.ErrModuleNotFound) {
		t.Errorf("Module(h4) = %v", err)
	}
	for _, p := range []store.Plugin{{Name: "", ModuleHash: "h"}, {Name: "a\x00b", ModuleHash: "h"}, {Name: "a"}} {
		if _, err := ts.S.PutPlugin(ctxBG, p, nil); !errors.Is(err, store.ErrBadBatch) {
			t.Errorf("PutPlugin(%+v) = %v, want store.ErrBadBatch", p, err)
		}
	}
}

// A plugin version above MaxUint32 is not found (store.ErrPluginNotFound),
// not taken for another version whose number it shares in 32 bits.
func testPluginVersionBeyondUint32(t *testing.T, open Opener) {
	ts := begin(t, open)
	if _, err := ts.S.PutPlugin(ctxBG, store.Plugin{Name: "p", ModuleHash: "h"}, []byte("m")); err != nil {
		t.Fatal(err)
	}
	if strconv.IntSize < 64 {
		return // int cannot hold such a version
	}
	version := int(uint64(1)<<32 + 1)
	p, err := ts.S.Plugin(ctxBG, "p", version)
	if !errors.Is(err, store.ErrPluginNotFound) {
		t.Errorf("store.Plugin(p, %d) = version %d, %v; want store.ErrPluginNotFound", version, p.Version, err)
	}
}

func testEventsPaging(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "a", 10)
	mustCreate(t, ts.S, "a.b", 3) // shares a prefix with "a"
	mustCreate(t, ts.S, "empty", 0)
	for _, c := range []struct {
		id           string
		after        uint64
		limit        int
		first, count int
	}{
		{"a", 0, 0, 1, 10}, {"a", 0, -1, 1, 10}, {"a", 0, 3, 1, 3}, {"a", 4, 3, 5, 3},
		{"a", 8, 5, 9, 2}, {"a", 10, 0, 0, 0}, {"a", 11, 0, 0, 0}, {"a.b", 1, 0, 2, 2},
		{"empty", 0, 0, 0, 0},
	} {
		evs, err := ts.S.Events(ctxBG, c.id, c.after, c.limit)
		if err != nil {
			t.Fatalf("Events(%s, %d, %d): %v", c.id, c.after, c.limit, err)
		}
		if len(evs) != c.count {
			t.Errorf("Events(%s, %d, %d) = %d events, want %d", c.id, c.after, c.limit, len(evs), c.count)
			continue
		}
		for i, e := range evs {
			if e.Seq != uint64(c.first+i) {
				t.Errorf("Events(%s, %d, %d)[%d].Seq = %d", c.id, c.after, c.limit, i, e.Seq)
			}
		}
	}
}

// Events after the largest seq (MaxUint64) is empty, not the whole log.
func testEventsAfterMaxSeq(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "r", 3)
	evs, err := ts.S.Events(ctxBG, "r", math.MaxUint64, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 0 {
		t.Errorf("Events(r, after MaxUint64) = %d events, want none", len(evs))
	}
}

// An event time the store cannot keep (int64 Unix nanoseconds cover only
// 1678-2262; outside, including the zero time.Time) is either refused
// (store.ErrBadBatch) or read back as the same time, never as another.
func testEventTimeOutOfRange(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "r", 0)
	last := uint64(0)
	for _, tm := range []time.Time{
		{},
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2300, 1, 1, 0, 0, 0, 5, time.UTC),
	} {
		err := ts.S.Append(ctxBG, "r", last, store.Batch{Events: []store.Event{{Seq: last + 1, Time: tm, Kind: "k"}}})
		if errors.Is(err, store.ErrBadBatch) {
			continue
		}
		if err != nil {
			t.Fatalf("Append with time %s: %v", tm, err)
		}
		last++
		evs, err := ts.S.Events(ctxBG, "r", last-1, 1)
		if err != nil || len(evs) != 1 {
			t.Fatalf("Events: %v, %v", evs, err)
		}
		if !evs[0].Time.Equal(tm) {
			t.Errorf("event time %s read back as %s", tm.Format(time.RFC3339Nano), evs[0].Time.Format(time.RFC3339Nano))
		}
	}
}

// Times in range roundtrip to the nanosecond, in UTC, whatever zone they
// were given in: events, runs, timers, questions and plugins alike.
func testTimesReadBackInUTC(t *testing.T, open Opener) {
	ts := begin(t, open)
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	tm := time.Date(2031, 7, 8, 9, 10, 11, 987654321, zone)
	run := store.Run{ID: "r", CreatedAt: tm, UpdatedAt: tm.Add(1), LastSeq: 1}
	b := store.Batch{
		Events:    []store.Event{{Seq: 1, Time: tm.Add(2), Kind: "k"}},
		PutTimers: []store.Timer{{RunID: "r", ID: "t", FireAt: tm.Add(3)}},
		PutAsks:   []store.Ask{{ID: "q", RunID: "r", Request: []byte(`{}`), CreatedAt: tm.Add(4)}},
	}
	if err := ts.S.CreateRun(ctxBG, run, b); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.S.PutPlugin(ctxBG, store.Plugin{Name: "p", ModuleHash: "h", CreatedAt: tm.Add(5)}, nil); err != nil {
		t.Fatal(err)
	}
	check := func(what string, got, want time.Time) {
		t.Helper()
		if !got.Equal(want) {
			t.Errorf("%s: got %s, want %s", what, got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
		} else if got.Location() != time.UTC {
			t.Errorf("%s: read back as %s, not in UTC", what, got.Format(time.RFC3339Nano))
		}
	}
	r, err := ts.S.Run(ctxBG, "r")
	if err != nil {
		t.Fatal(err)
	}
	check("store.Run.CreatedAt", r.CreatedAt, tm)
	check("store.Run.UpdatedAt", r.UpdatedAt, tm.Add(1))
	evs, err := ts.S.Events(ctxBG, "r", 0, 0)
	if err != nil || len(evs) != 1 {
		t.Fatal(evs, err)
	}
	check("store.Event.Time", evs[0].Time, tm.Add(2))
	tmr, ok, err := ts.S.NextTimer(ctxBG)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	check("store.Timer.FireAt", tmr.FireAt, tm.Add(3))
	a, err := ts.S.Ask(ctxBG, "q")
	if err != nil {
		t.Fatal(err)
	}
	check("store.Ask.CreatedAt", a.CreatedAt, tm.Add(4))
	p, err := ts.S.Plugin(ctxBG, "p", 0)
	if err != nil {
		t.Fatal(err)
	}
	check("store.Plugin.CreatedAt", p.CreatedAt, tm.Add(5))
}

func testTimers(t *testing.T, open Opener) {
	ts := begin(t, open)
	base := time.Date(2025, 5, 5, 0, 0, 0, 0, time.UTC)
	mustCreate(t, ts.S, "r1", 0)
	mustCreate(t, ts.S, "r2", 0)
	if _, ok, err := ts.S.NextTimer(ctxBG); ok || err != nil {
		t.Fatalf("NextTimer on an empty index = %v, %v", ok, err)
	}
	put := func(run string, last uint64, tms ...store.Timer) {
		t.Helper()
		if err := ts.S.Append(ctxBG, run, last, store.Batch{PutTimers: tms}); err != nil {
			t.Fatal(err)
		}
	}
	t1 := store.Timer{RunID: "r1", ID: "b", FireAt: base.Add(2)}
	t2 := store.Timer{RunID: "r2", ID: "a", FireAt: base.Add(2)}  // same instant: ordered by run id
	t3 := store.Timer{RunID: "r1", ID: "a", FireAt: base.Add(-1)} // earliest
	t4 := store.Timer{RunID: "r1", ID: "c", FireAt: base.Add(time.Hour)}
	put("r1", 0, t1, t3, t4)
	put("r2", 0, t2)
	due, err := ts.S.DueTimers(ctxBG, base.Add(2), 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffList(due, []store.Timer{t3, t1, t2}, diffTimer); d != "" {
		t.Errorf("DueTimers(base+2): %s", d)
	}
	due, _ = ts.S.DueTimers(ctxBG, base.Add(1), 0)
	if d := diffList(due, []store.Timer{t3}, diffTimer); d != "" {
		t.Errorf("DueTimers(base+1): %s", d)
	}
	due, _ = ts.S.DueTimers(ctxBG, base.Add(time.Hour), 2)
	if d := diffList(due, []store.Timer{t3, t1}, diffTimer); d != "" {
		t.Errorf("DueTimers(limit 2): %s", d)
	}
	// Deleting needs the exact FireAt; deleting and putting again in one
	// batch keeps the timer.
	if err := ts.S.Append(ctxBG, "r1", 0, store.Batch{DeleteTimers: []store.Timer{t3, {RunID: "r1", ID: "b", FireAt: base}}, PutTimers: []store.Timer{t4}}); err != nil {
		t.Fatal(err)
	}
	next, ok, err := ts.S.NextTimer(ctxBG)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if d := diffTimer(next, t1); d != "" {
		t.Errorf("NextTimer after delete: %s", d)
	}
	due, _ = ts.S.DueTimers(ctxBG, base.Add(time.Hour), 0)
	if d := diffList(due, []store.Timer{t1, t2, t4}, diffTimer); d != "" {
		t.Errorf("DueTimers after delete: %s", d)
	}
}

// Timers before 1970 (and the zero time.Time) sort before later ones:
// NextTimer returns the oldest, DueTimers finds it due, and a "now" before
// 1970 does not make later timers due.
func testTimersBeforeEpoch(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "r", 0)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	later := store.Timer{RunID: "r", ID: "later", FireAt: now.Add(-time.Hour)}
	old := store.Timer{RunID: "r", ID: "old", FireAt: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)}
	if err := ts.S.Append(ctxBG, "r", 0, store.Batch{PutTimers: []store.Timer{later, old}}); err != nil {
		t.Fatal(err)
	}
	next, ok, err := ts.S.NextTimer(ctxBG)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if next.ID != "old" {
		t.Errorf("NextTimer = %s at %s, want old (1969)", next.ID, next.FireAt)
	}
	due, err := ts.S.DueTimers(ctxBG, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffList(due, []store.Timer{old, later}, diffTimer); d != "" {
		t.Errorf("DueTimers(2025): %s", d)
	}
	// A "now" before 1970 must not make 2024 timers due.
	due, err = ts.S.DueTimers(ctxBG, time.Date(1969, 12, 31, 23, 59, 59, 500, time.UTC), 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffList(due, []store.Timer{old}, diffTimer); d != "" {
		t.Errorf("DueTimers(1969): %s", d)
	}
}

func testRunsOrderAndFilter(t *testing.T, open Opener) {
	ts := begin(t, open)
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, r := range []store.Run{
		{ID: "a", Tool: "x", Status: store.StatusRunning, CreatedAt: base.Add(1)},
		{ID: "b", Tool: "y", Status: store.StatusCompleted, CreatedAt: base.Add(3)},
		{ID: "c", Tool: "x", Status: store.StatusCompleted, CreatedAt: base.Add(3)}, // tie with b: higher id first
		{ID: "d", Tool: "x", Status: store.StatusWaiting, CreatedAt: base.Add(2)},
	} {
		if err := ts.S.CreateRun(ctxBG, r, store.Batch{}); err != nil {
			t.Fatalf("CreateRun %d: %v", i, err)
		}
	}
	for _, c := range []struct {
		f    store.RunFilter
		want string
	}{
		{store.RunFilter{}, "c b d a"},
		{store.RunFilter{Limit: 2}, "c b"},
		{store.RunFilter{Limit: -1}, "c b d a"},
		{store.RunFilter{Tool: "x"}, "c d a"},
		{store.RunFilter{Status: store.StatusCompleted}, "c b"},
		{store.RunFilter{Status: store.StatusCompleted, Tool: "x", Limit: 5}, "c"},
		{store.RunFilter{Status: store.StatusFailed}, ""},
		// Time bounds: From <= created < To.
		{store.RunFilter{From: base.Add(2)}, "c b d"},
		{store.RunFilter{To: base.Add(3)}, "d a"},
		{store.RunFilter{From: base.Add(2), To: base.Add(3)}, "d"},
		{store.RunFilter{From: base.Add(4)}, ""},
		// A cursor: the runs after it in the newest-first order, a tie on
		// the time broken by the id.
		{store.RunFilter{Before: &store.RunCursor{CreatedAt: base.Add(3), ID: "c"}}, "b d a"},
		{store.RunFilter{Before: &store.RunCursor{CreatedAt: base.Add(3), ID: "b"}, Limit: 1}, "d"},
		{store.RunFilter{Before: &store.RunCursor{CreatedAt: base.Add(2), ID: "d"}, Tool: "x"}, "a"},
		{store.RunFilter{Before: &store.RunCursor{CreatedAt: base.Add(9), ID: ""}, Status: store.StatusCompleted}, "c b"},
		{store.RunFilter{Before: &store.RunCursor{CreatedAt: base, ID: "z"}}, ""},
	} {
		if got := runIDs(t, ts.S, c.f); got != c.want {
			t.Errorf("Runs(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
	// A run's new status moves it between filters; a new run joins.
	d := store.Run{ID: "d", Tool: "x", Status: store.StatusCompleted, CreatedAt: base.Add(2), LastSeq: 1}
	if err := ts.S.Append(ctxBG, "d", 0, store.Batch{Events: []store.Event{{Seq: 1, Time: base, Kind: "k", Data: json.RawMessage(`{}`)}}, Run: &d}); err != nil {
		t.Fatal(err)
	}
	if err := ts.S.CreateRun(ctxBG, store.Run{ID: "e", Tool: "x", Status: store.StatusCompleted, CreatedAt: base.Add(1)}, store.Batch{}); err != nil {
		t.Fatal(err)
	}
	if got := runIDs(t, ts.S, store.RunFilter{Status: store.StatusCompleted, Tool: "x"}); got != "c d e" {
		t.Errorf("completed runs of x after d completed and e was made: %q, want \"c d e\"", got)
	}
	// Counts by status and tool, where the store keeps them.
	rc, ok := ts.S.(store.RunCounter)
	if !ok {
		return
	}
	counts, err := rc.RunCounts(ctxBG)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range counts {
		got = append(got, fmt.Sprintf("%s/%s=%d", c.Status, c.Tool, c.N))
	}
	if want := "completed/x=3 completed/y=1 running/x=1"; strings.Join(got, " ") != want {
		t.Errorf("RunCounts = %q, want %q", strings.Join(got, " "), want)
	}
}

// runIDs lists the ids of the runs f selects, in the order Runs gives.
func runIDs(t *testing.T, s store.Store, f store.RunFilter) string {
	t.Helper()
	runs, err := s.Runs(ctxBG, f)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	return strings.Join(ids, " ")
}

func testSessions(t *testing.T, open Opener) {
	ts := begin(t, open)
	s := ts.S
	ctx := context.Background()
	if _, err := s.Session(ctx, "s1"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("missing session: %v", err)
	}
	big := []byte(`{"tasks":"` + strings.Repeat("x", 10000) + `"}`)
	if err := s.PutSession(ctx, "s1", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, "s2", big); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, "s1", []byte(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, "", nil); err == nil {
		t.Error("a session without an id was stored")
	}
	ts.reopen()
	s = ts.S
	if got, err := s.Session(ctx, "s1"); err != nil || string(got) != `{"v":2}` {
		t.Errorf("s1 = %s, %v", got, err)
	}
	if got, err := s.Session(ctx, "s2"); err != nil || !bytes.Equal(got, big) {
		t.Errorf("s2: %d bytes, %v", len(got), err)
	}
	if ids, err := s.SessionIDs(ctx); err != nil || len(ids) != 2 || ids[0] != "s1" || ids[1] != "s2" {
		t.Errorf("ids %v, %v", ids, err)
	}
}

// testSnapshots: one snapshot per run, newer replacing older, kept across a
// reopen, dropped when the run ends, never kept for an ended run.
func testSnapshots(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "r", 2)
	if _, err := ts.S.Snapshot(ctxBG, "r"); !errors.Is(err, store.ErrSnapshotNotFound) {
		t.Fatalf("store.Snapshot before any: %v, want store.ErrSnapshotNotFound", err)
	}
	if err := ts.S.PutSnapshot(ctxBG, "nope", store.Snapshot{Seq: 1, Data: []byte("x")}); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("PutSnapshot of an unknown run: %v, want store.ErrRunNotFound", err)
	}
	want := func(seq uint64, data string) {
		t.Helper()
		got, err := ts.S.Snapshot(ctxBG, "r")
		if err != nil || got.Seq != seq || string(got.Data) != data {
			t.Fatalf("store.Snapshot = %d %q %v, want %d %q", got.Seq, got.Data, err, seq, data)
		}
	}
	if err := ts.S.PutSnapshot(ctxBG, "r", store.Snapshot{Seq: 2, Data: []byte("two")}); err != nil {
		t.Fatal(err)
	}
	want(2, "two")
	if err := ts.S.PutSnapshot(ctxBG, "r", store.Snapshot{Seq: 1, Data: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	want(2, "two") // an older one does not replace it
	b := store.Batch{Events: []store.Event{{Seq: 3, Time: time.Unix(1, 0), Kind: "e", Data: []byte(`{}`)}}}
	if err := ts.S.Append(ctxBG, "r", 2, b); err != nil {
		t.Fatal(err)
	}
	want(2, "two") // the log moving on leaves it
	if err := ts.S.PutSnapshot(ctxBG, "r", store.Snapshot{Seq: 3, Data: []byte("three")}); err != nil {
		t.Fatal(err)
	}
	want(3, "three")
	ts.reopen()
	want(3, "three")
	r, err := ts.S.Run(ctxBG, "r")
	if err != nil {
		t.Fatal(err)
	}
	r.Status, r.LastSeq = store.StatusCompleted, 4
	end := store.Batch{Events: []store.Event{{Seq: 4, Time: time.Unix(2, 0), Kind: "done", Data: []byte(`{}`)}}, Run: &r}
	if err := ts.S.Append(ctxBG, "r", 3, end); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.S.Snapshot(ctxBG, "r"); !errors.Is(err, store.ErrSnapshotNotFound) {
		t.Fatalf("store.Snapshot after the run ended: %v, want store.ErrSnapshotNotFound", err)
	}
	if err := ts.S.PutSnapshot(ctxBG, "r", store.Snapshot{Seq: 5, Data: []byte("five")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.S.Snapshot(ctxBG, "r"); !errors.Is(err, store.ErrSnapshotNotFound) {
		t.Fatalf("store.Snapshot of an ended run was kept: %v", err)
	}
}

// A state image rides in a batch, at the batch's last event; the next one
// replaces it, it survives a reopen (from the journal, then from the main
// file), a batch that ends the run drops it, and one at the wrong seq
// fails the whole batch.
func testStates(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "r", 2)
	if _, err := ts.S.State(ctxBG, "r"); !errors.Is(err, store.ErrStateNotFound) {
		t.Fatalf("store.State before any: %v, want store.ErrStateNotFound", err)
	}
	want := func(seq uint64, data string) {
		t.Helper()
		got, err := ts.S.State(ctxBG, "r")
		if err != nil || got.Seq != seq || string(got.Data) != data {
			t.Fatalf("store.State = %d %q %v, want %d %q", got.Seq, got.Data, err, seq, data)
		}
	}
	ev := func(seq uint64) store.Event {
		return store.Event{Seq: seq, Time: time.Unix(int64(seq), 0), Kind: "e", Data: []byte(`{}`)}
	}
	if err := ts.S.Append(ctxBG, "r", 2, store.Batch{Events: []store.Event{ev(3)}, PutState: &store.State{Seq: 3, Data: []byte("three")}}); err != nil {
		t.Fatal(err)
	}
	want(3, "three")
	err := ts.S.Append(ctxBG, "r", 3, store.Batch{Events: []store.Event{ev(4)}, PutState: &store.State{Seq: 3, Data: []byte("stale")}})
	if !errors.Is(err, store.ErrBadBatch) {
		t.Fatalf("a state image behind its batch: %v, want store.ErrBadBatch", err)
	}
	if evs, err := ts.S.Events(ctxBG, "r", 3, 0); err != nil || len(evs) != 0 {
		t.Fatalf("the refused batch left events %v (%v)", evs, err)
	}
	want(3, "three")
	if err := ts.S.Append(ctxBG, "r", 3, store.Batch{Events: []store.Event{ev(4)}}); err != nil {
		t.Fatal(err)
	}
	want(3, "three") // a batch without one leaves it
	if err := ts.S.Append(ctxBG, "r", 4, store.Batch{Events: []store.Event{ev(5)}, PutState: &store.State{Seq: 5, Data: []byte("five")}}); err != nil {
		t.Fatal(err)
	}
	ts.reopen()
	want(5, "five")
	want(5, "five")
	r, err := ts.S.Run(ctxBG, "r")
	if err != nil {
		t.Fatal(err)
	}
	r.Status, r.LastSeq = store.StatusCompleted, 6
	end := store.Batch{Events: []store.Event{ev(6)}, Run: &r, PutState: &store.State{Seq: 6, Data: []byte("six")}}
	if err := ts.S.Append(ctxBG, "r", 5, end); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.S.State(ctxBG, "r"); !errors.Is(err, store.ErrStateNotFound) {
		t.Fatalf("store.State after the run ended: %v, want store.ErrStateNotFound", err)
	}
}
