package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store/internal/integrity"
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

// checkInvariants verifies the store file (the store must be closed) with
// Verify, which checks what the store promises about its contents (every
// checksum; every run's log dense 1..LastSeq; indexes naming existing
// runs under their own keys; ...), and, for tests, which never delete a
// plugin version, that every plugin's versions are dense from 1.
func checkInvariants(t testing.TB, path string) { checkStoreFile(t, path, true) }

// checkStoreFile is checkInvariants whose check of dense plugin versions is
// made only if denseVersions, for tests that may delete a version.
func checkStoreFile(t testing.TB, path string, denseVersions bool) {
	t.Helper()
	rep, err := Verify(path)
	if err != nil {
		t.Errorf("invariants: verify %s: %v", path, err)
		return
	}
	for _, f := range rep.Findings {
		t.Errorf("invariant violated in %s: %s", path, f)
	}
	if !denseVersions || !rep.OK() || rep.JournalRecords > 0 {
		return // not asked for, or a crash copy whose journal holds the newest plugins
	}
	s, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Errorf("invariants: open %s: %v", path, err)
		return
	}
	defer s.Close()
	ps, err := s.Plugins(context.Background())
	if err != nil {
		t.Errorf("invariants: plugins of %s: %v", path, err)
	}
	last := map[string]int{}
	for _, p := range ps {
		if want := last[p.Name] + 1; p.Version != want {
			t.Errorf("invariant violated in %s: plugin %s: version %d where %d was due", path, p.Name, p.Version, want)
		}
		last[p.Name] = p.Version
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
	// Values are put sealed, with good checksums, so that the checks of
	// content are what must notice; "unsealed value" checks the checksum.
	put := func(tx *bolt.Tx, bucket, k, v []byte) error {
		return tx.Bucket(bucket).Put(k, integrity.Seal(nil, bucket, k, v))
	}
	event1 := func(tx *bolt.Tx) []byte {
		v, err := integrity.Open(bucketEvents, eventKey("r", 1), tx.Bucket(bucketEvents).Get(eventKey("r", 1)))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(v)
	}
	damages := map[string]func(tx *bolt.Tx) error{
		"event gap": func(tx *bolt.Tx) error { return tx.Bucket(bucketEvents).Delete(eventKey("r", 2)) },
		"extra event": func(tx *bolt.Tx) error {
			return put(tx, bucketEvents, eventKey("r", 4), event1(tx))
		},
		"event of unknown run": func(tx *bolt.Tx) error {
			return put(tx, bucketEvents, eventKey("ghost", 1), event1(tx))
		},
		"undecodable event": func(tx *bolt.Tx) error { return put(tx, bucketEvents, eventKey("r", 3), []byte("x")) },
		"unsealed value": func(tx *bolt.Tx) error {
			return tx.Bucket(bucketEvents).Put(eventKey("r", 3), event1(tx))
		},
		"orphan timer": func(tx *bolt.Tx) error {
			tm := Timer{RunID: "ghost", ID: "t", FireAt: time.Unix(10, 0)}
			v, _ := json.Marshal(tm)
			return put(tx, bucketTimers, timerKey(tm), v)
		},
		"orphan ask": func(tx *bolt.Tx) error {
			return put(tx, bucketAsks, []byte("q"), []byte(`{"id":"q","runId":"ghost"}`))
		},
		"plugin version gap": func(tx *bolt.Tx) error {
			return put(tx, bucketPlugins, pluginKey("p", 3), []byte(`{"name":"p","version":3,"moduleHash":"h"}`))
		},
		"run behind its log": func(tx *bolt.Tx) error {
			return put(tx, bucketRuns, []byte("r"), []byte(`{"id":"r","lastSeq":2}`))
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
