package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// testStore owns one store file for a test. openTestStore registers a
// cleanup that closes whichever *Bolt is current and then checks the
// file's invariants by reading it directly with bbolt.
type testStore struct {
	t    testing.TB
	path string
	opts Options
	S    *Bolt
}

// openTestStore opens a fresh store file in t.TempDir().
func openTestStore(t testing.TB, opts Options) *testStore {
	t.Helper()
	ts := &testStore{t: t, path: filepath.Join(t.TempDir(), "sandflow.db"), opts: opts}
	s, err := Open(ts.path, &ts.opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", ts.path, err)
	}
	ts.S = s
	t.Cleanup(func() {
		if err := ts.S.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkInvariants(t, ts.path)
	})
	return ts
}

// reopen closes the current store and opens the same file again.
func (ts *testStore) reopen() {
	ts.t.Helper()
	if err := ts.S.Close(); err != nil {
		ts.t.Fatalf("Close: %v", err)
	}
	s, err := Open(ts.path, &ts.opts)
	if err != nil {
		ts.t.Fatalf("reopen %s: %v", ts.path, err)
	}
	ts.S = s
}

// checkInvariants opens the bbolt file read-only (the store must be closed)
// and checks what the store promises about its contents:
//   - every run record decodes, is keyed by its id, and the id is valid;
//   - every run's events are exactly the keys 1..LastSeq, in order, with no
//     gaps and no extra keys, and every event decodes;
//   - there are no events for runs that do not exist;
//   - every timer and question refers to an existing run and is keyed by
//     its own fields;
//   - every plugin's versions are dense from 1 and its module bytes exist;
//   - every module value decodes; the schema version is recorded.
func checkInvariants(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Errorf("invariants: open %s: %v", path, err)
		return
	}
	defer db.Close()
	var problems []string
	bad := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	err = db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketRuns, bucketEvents, bucketTimers, bucketAsks, bucketHooks, bucketPlugins, bucketModules, bucketMeta} {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("bucket %s missing", name)
			}
		}
		if v := tx.Bucket(bucketMeta).Get([]byte("schema")); len(v) != 4 || binary.BigEndian.Uint32(v) != schemaVersion {
			bad("schema version %x", v)
		}

		runs := map[string]Run{}
		_ = tx.Bucket(bucketRuns).ForEach(func(k, v []byte) error {
			var r Run
			if err := json.Unmarshal(v, &r); err != nil {
				bad("run %q: %v", k, err)
				return nil
			}
			if r.ID != string(k) {
				bad("run keyed %q has id %q", k, r.ID)
			}
			if err := ValidRunID(string(k)); err != nil {
				bad("run key %q: %v", k, err)
			}
			runs[string(k)] = r
			return nil
		})

		// Events: keys are runID 0x00 seq(8). Run ids hold no 0x00, so the
		// split is unambiguous.
		next := map[string]uint64{} // run -> last seq seen
		_ = tx.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
			if len(k) < 10 || k[len(k)-9] != 0 {
				bad("malformed event key %x", k)
				return nil
			}
			id := string(k[:len(k)-9])
			seq := binary.BigEndian.Uint64(k[len(k)-8:])
			r, ok := runs[id]
			if !ok {
				bad("event %d of unknown run %q", seq, id)
				return nil
			}
			if want := next[id] + 1; seq != want {
				bad("run %s: event key %d where %d was due (gap or disorder)", id, seq, want)
			}
			next[id] = seq
			if seq > r.LastSeq {
				bad("run %s: event %d beyond LastSeq %d", id, seq, r.LastSeq)
			}
			if _, err := decodeEvent(seq, v); err != nil {
				bad("run %s: event %d: %v", id, seq, err)
			}
			return nil
		})
		for id, r := range runs {
			if next[id] != r.LastSeq {
				bad("run %s: LastSeq %d but log ends at %d", id, r.LastSeq, next[id])
			}
		}

		_ = tx.Bucket(bucketTimers).ForEach(func(k, v []byte) error {
			var tm Timer
			if err := json.Unmarshal(v, &tm); err != nil {
				bad("timer %x: %v", k, err)
				return nil
			}
			if !bytes.Equal(timerKey(tm), k) {
				bad("timer %+v stored under key %x", tm, k)
			}
			if _, ok := runs[tm.RunID]; !ok {
				bad("timer %s of unknown run %q", tm.ID, tm.RunID)
			}
			return nil
		})
		_ = tx.Bucket(bucketAsks).ForEach(func(k, v []byte) error {
			var a Ask
			if err := json.Unmarshal(v, &a); err != nil {
				bad("ask %q: %v", k, err)
				return nil
			}
			if a.ID != string(k) {
				bad("ask keyed %q has id %q", k, a.ID)
			}
			if _, ok := runs[a.RunID]; !ok {
				bad("ask %s of unknown run %q", a.ID, a.RunID)
			}
			return nil
		})
		_ = tx.Bucket(bucketHooks).ForEach(func(k, v []byte) error {
			var h Hook
			if err := json.Unmarshal(v, &h); err != nil {
				bad("hook %q: %v", k, err)
				return nil
			}
			if h.Token != string(k) || h.RunID == "" {
				bad("hook keyed %q is %+v", k, h)
			}
			return nil
		})
		modules := tx.Bucket(bucketModules)
		_ = modules.ForEach(func(k, v []byte) error {
			if _, err := unpackValue(v); err != nil {
				bad("module %q: %v", k, err)
			}
			return nil
		})
		lastVersion := map[string]int{}
		_ = tx.Bucket(bucketPlugins).ForEach(func(k, v []byte) error {
			var p Plugin
			if err := json.Unmarshal(v, &p); err != nil {
				bad("plugin %q: %v", k, err)
				return nil
			}
			if !bytes.Equal(pluginKey(p.Name, p.Version), k) {
				bad("plugin %s v%d stored under key %x", p.Name, p.Version, k)
			}
			if want := lastVersion[p.Name] + 1; p.Version != want {
				bad("plugin %s: version %d where %d was due", p.Name, p.Version, want)
			}
			lastVersion[p.Name] = p.Version
			if modules.Get([]byte(p.ModuleHash)) == nil {
				bad("plugin %s v%d: module %s missing", p.Name, p.Version, p.ModuleHash)
			}
			return nil
		})
		return nil
	})
	if err != nil {
		t.Errorf("invariants of %s: %v", path, err)
	}
	for _, p := range problems {
		t.Errorf("invariant violated in %s: %s", path, p)
	}
}

// wantErr fails the test unless got matches want: nil for nil, errors.Is
// otherwise.
func wantErr(t testing.TB, what string, got, want error) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Fatalf("%s: unexpected error %v", what, got)
		}
		return
	}
	if !errors.Is(got, want) {
		t.Fatalf("%s: got error %v, want %v", what, got, want)
	}
}

// sameTime reports whether got is the instant want and is in UTC, as every
// time read back from the store must be.
func sameTime(got, want time.Time) bool {
	return got.Equal(want) && got.Location() == time.UTC
}

func timeDiff(field string, got, want time.Time) string {
	if sameTime(got, want) {
		return ""
	}
	return fmt.Sprintf("%s: got %s (%v), want %s", field, got.Format(time.RFC3339Nano), got.Location(), want.Format(time.RFC3339Nano))
}

func rawDiff(field string, got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	return fmt.Sprintf("%s: got %q, want %q", field, trunc(got), trunc(want))
}

func trunc(b []byte) []byte {
	if len(b) > 80 {
		return append(append([]byte(nil), b[:80]...), "..."...)
	}
	return b
}

func join(diffs ...string) string {
	var out []string
	for _, d := range diffs {
		if d != "" {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprint(out)
}

func scalarDiff(field string, got, want any) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	return fmt.Sprintf("%s: got %v, want %v", field, got, want)
}

func diffRun(got, want Run) string {
	return join(
		scalarDiff("ID", got.ID, want.ID),
		scalarDiff("Tool", got.Tool, want.Tool),
		scalarDiff("Plugin", got.Plugin, want.Plugin),
		scalarDiff("Version", got.Version, want.Version),
		scalarDiff("ModuleHash", got.ModuleHash, want.ModuleHash),
		scalarDiff("Status", got.Status, want.Status),
		timeDiff("CreatedAt", got.CreatedAt, want.CreatedAt),
		timeDiff("UpdatedAt", got.UpdatedAt, want.UpdatedAt),
		scalarDiff("LastSeq", got.LastSeq, want.LastSeq),
		rawDiff("Detail", got.Detail, want.Detail),
	)
}

func diffEvent(got, want Event) string {
	return join(
		scalarDiff("Seq", got.Seq, want.Seq),
		timeDiff("Time", got.Time, want.Time),
		scalarDiff("Kind", got.Kind, want.Kind),
		rawDiff("Data", got.Data, want.Data),
	)
}

func diffTimer(got, want Timer) string {
	return join(
		scalarDiff("RunID", got.RunID, want.RunID),
		scalarDiff("ID", got.ID, want.ID),
		timeDiff("FireAt", got.FireAt, want.FireAt),
		scalarDiff("Kind", got.Kind, want.Kind),
		scalarDiff("Position", got.Position, want.Position),
	)
}

func diffAsk(got, want Ask) string {
	return join(
		scalarDiff("ID", got.ID, want.ID),
		scalarDiff("RunID", got.RunID, want.RunID),
		scalarDiff("Tool", got.Tool, want.Tool),
		scalarDiff("Position", got.Position, want.Position),
		scalarDiff("Open", got.Open, want.Open),
		rawDiff("Request", got.Request, want.Request),
		timeDiff("CreatedAt", got.CreatedAt, want.CreatedAt),
	)
}

func diffHook(got, want Hook) string {
	return scalarDiff("Hook", got, want)
}

func diffPlugin(got, want Plugin) string {
	return join(
		scalarDiff("Name", got.Name, want.Name),
		scalarDiff("Version", got.Version, want.Version),
		scalarDiff("ModuleHash", got.ModuleHash, want.ModuleHash),
		rawDiff("Manifest", got.Manifest, want.Manifest),
		timeDiff("CreatedAt", got.CreatedAt, want.CreatedAt),
		scalarDiff("Size", got.Size, want.Size),
	)
}

// diffList compares two slices element by element with diff.
func diffList[T any](got, want []T, diff func(got, want T) string) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d items, want %d", len(got), len(want))
	}
	for i := range got {
		if d := diff(got[i], want[i]); d != "" {
			return fmt.Sprintf("item %d: %s", i, d)
		}
	}
	return ""
}

// errRecorder is a testing.TB that collects Errorf calls, to test the
// invariant checker itself.
type errRecorder struct {
	testing.TB
	msgs []string
}

func (r *errRecorder) Helper() {}

func (r *errRecorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

// The invariant checker must notice each kind of damage.
func TestInvariantCheckerCatchesDamage(t *testing.T) {
	damages := map[string]func(tx *bolt.Tx) error{
		"event gap": func(tx *bolt.Tx) error { return tx.Bucket(bucketEvents).Delete(eventKey("r", 2)) },
		"extra event": func(tx *bolt.Tx) error {
			v := tx.Bucket(bucketEvents).Get(eventKey("r", 1))
			return tx.Bucket(bucketEvents).Put(eventKey("r", 4), bytes.Clone(v))
		},
		"event of unknown run": func(tx *bolt.Tx) error {
			v := tx.Bucket(bucketEvents).Get(eventKey("r", 1))
			return tx.Bucket(bucketEvents).Put(eventKey("ghost", 1), bytes.Clone(v))
		},
		"undecodable event": func(tx *bolt.Tx) error { return tx.Bucket(bucketEvents).Put(eventKey("r", 3), []byte("x")) },
		"orphan timer": func(tx *bolt.Tx) error {
			tm := Timer{RunID: "ghost", ID: "t", FireAt: time.Unix(10, 0)}
			v, _ := json.Marshal(tm)
			return tx.Bucket(bucketTimers).Put(timerKey(tm), v)
		},
		"orphan ask": func(tx *bolt.Tx) error {
			return tx.Bucket(bucketAsks).Put([]byte("q"), []byte(`{"id":"q","runId":"ghost"}`))
		},
		"plugin version gap": func(tx *bolt.Tx) error {
			return tx.Bucket(bucketPlugins).Put(pluginKey("p", 3), []byte(`{"name":"p","version":3,"moduleHash":"h"}`))
		},
		"run behind its log": func(tx *bolt.Tx) error {
			return tx.Bucket(bucketRuns).Put([]byte("r"), []byte(`{"id":"r","lastSeq":2}`))
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "damaged.db")
			s, err := Open(path, &Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			b := Batch{Events: []Event{{Seq: 1, Kind: "a", Time: time.Unix(1, 0)}, {Seq: 2, Kind: "b", Time: time.Unix(2, 0)}, {Seq: 3, Kind: "c", Time: time.Unix(3, 0)}}}
			if err := s.CreateRun(context.Background(), Run{ID: "r", LastSeq: 3}, b); err != nil {
				t.Fatal(err)
			}
			if _, err := s.PutPlugin(context.Background(), Plugin{Name: "p", ModuleHash: "h"}, []byte("m")); err != nil {
				t.Fatal(err)
			}
			s.Close()
			clean := &errRecorder{TB: t}
			checkInvariants(clean, path)
			if len(clean.msgs) != 0 {
				t.Fatalf("undamaged file reported: %v", clean.msgs)
			}
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(damage)
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			rec := &errRecorder{TB: t}
			checkInvariants(rec, path)
			if len(rec.msgs) == 0 {
				t.Errorf("damage %q went unnoticed", name)
			}
		})
	}
}
