package storetest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store"
)

func init() {
	cases = append(cases,
		testCase{"ClosedStore", testClosedStore},
		testCase{"DeletePluginVersion", testDeletePluginVersion},
		testCase{"LargeValues", testLargeValues},
	)
}

// Every call on a closed store returns ErrClosed and changes nothing;
// closing twice is harmless.
func testClosedStore(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "run-a", 2)
	if _, err := ts.S.PutPlugin(ctxBG, store.Plugin{Name: "web", ModuleHash: "m1"}, []byte("m")); err != nil {
		t.Fatal(err)
	}
	s := ts.S
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := map[string]func() error{
		"CreateRun": func() error { return s.CreateRun(ctxBG, store.Run{ID: "new"}, store.Batch{}) },
		"Append":    func() error { return s.Append(ctxBG, "run-a", 2, store.Batch{}) },
		"Run":       func() error { _, err := s.Run(ctxBG, "run-a"); return err },
		"Runs":      func() error { _, err := s.Runs(ctxBG, store.RunFilter{}); return err },
		"Events":    func() error { _, err := s.Events(ctxBG, "run-a", 0, 0); return err },
		"DueTimers": func() error { _, err := s.DueTimers(ctxBG, time.Now(), 0); return err },
		"NextTimer": func() error { _, _, err := s.NextTimer(ctxBG); return err },
		"Ask":       func() error { _, err := s.Ask(ctxBG, "q"); return err },
		"Asks":      func() error { _, err := s.Asks(ctxBG, false); return err },
		"ClaimHook": func() error { _, err := s.ClaimHook(ctxBG, "hook", "run-a", 1); return err },
		"Hook":      func() error { _, err := s.Hook(ctxBG, "hook"); return err },
		"PutPlugin": func() error {
			_, err := s.PutPlugin(ctxBG, store.Plugin{Name: "web", ModuleHash: "m9"}, []byte("x"))
			return err
		},
		"Plugin":              func() error { _, err := s.Plugin(ctxBG, "web", 0); return err },
		"Plugins":             func() error { _, err := s.Plugins(ctxBG); return err },
		"Module":              func() error { _, err := s.Module(ctxBG, "m1"); return err },
		"DeletePluginVersion": func() error { return s.DeletePluginVersion(ctxBG, "web", 1) },
		"PutSession":          func() error { return s.PutSession(ctxBG, "s", []byte("x")) },
		"Session":             func() error { _, err := s.Session(ctxBG, "s"); return err },
		"SessionIDs":          func() error { _, err := s.SessionIDs(ctxBG); return err },
		"PutSnapshot":         func() error { return s.PutSnapshot(ctxBG, "run-a", store.Snapshot{Seq: 2}) },
		"Snapshot":            func() error { _, err := s.Snapshot(ctxBG, "run-a"); return err },
		"State":               func() error { _, err := s.State(ctxBG, "run-a"); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ts.S = open(t)
	if _, err := ts.S.Run(ctxBG, "new"); !errors.Is(err, store.ErrRunNotFound) {
		t.Errorf("Run(new) after a refused CreateRun: %v", err)
	}
	if evs, err := ts.S.Events(ctxBG, "run-a", 0, 0); err != nil || len(evs) != 2 {
		t.Errorf("Events after the refused calls = %d, %v; want 2", len(evs), err)
	}
	if ps, err := ts.S.Plugins(ctxBG); err != nil || len(ps) != 1 {
		t.Errorf("Plugins after the refused calls = %d, %v; want 1", len(ps), err)
	}
}

// A version is deleted unless a run that has not ended is pinned to it;
// its module bytes go with its hash's last version.
func testDeletePluginVersion(t *testing.T, open Opener) {
	ts := begin(t, open)
	s := ts.S
	for _, h := range []string{"h1", "h1", "h2"} {
		if _, err := s.PutPlugin(ctxBG, store.Plugin{Name: "p", ModuleHash: h}, []byte("bytes of "+h)); err != nil {
			t.Fatal(err)
		}
	}
	pinned := store.Run{ID: "r", Plugin: "p", Version: 2, Status: store.StatusWaiting}
	if err := s.CreateRun(ctxBG, pinned, store.Batch{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePluginVersion(ctxBG, "p", 2); !errors.Is(err, store.ErrPluginInUse) {
		t.Fatalf("deleting a pinned version = %v, want ErrPluginInUse", err)
	}
	for _, v := range []int{0, -1, 4, 1 << 40} {
		if err := s.DeletePluginVersion(ctxBG, "p", v); !errors.Is(err, store.ErrPluginNotFound) {
			t.Errorf("DeletePluginVersion(p, %d) = %v, want ErrPluginNotFound", v, err)
		}
	}
	if err := s.DeletePluginVersion(ctxBG, "nope", 1); !errors.Is(err, store.ErrPluginNotFound) {
		t.Errorf("DeletePluginVersion(nope, 1) = %v, want ErrPluginNotFound", err)
	}
	if err := s.DeletePluginVersion(ctxBG, "p", 1); err != nil {
		t.Fatalf("DeletePluginVersion(p, 1): %v", err)
	}
	if _, err := s.Plugin(ctxBG, "p", 1); !errors.Is(err, store.ErrPluginNotFound) {
		t.Errorf("Plugin(p, 1) after its delete = %v", err)
	}
	if m, err := s.Module(ctxBG, "h1"); err != nil || string(m) != "bytes of h1" {
		t.Errorf("Module(h1), still used by version 2 = %q, %v", m, err)
	}
	done := pinned
	done.Status = store.StatusCompleted
	if err := s.Append(ctxBG, "r", 0, store.Batch{Run: &done}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePluginVersion(ctxBG, "p", 2); err != nil {
		t.Fatalf("deleting a version only ended runs use: %v", err)
	}
	if _, err := s.Module(ctxBG, "h1"); !errors.Is(err, store.ErrModuleNotFound) {
		t.Errorf("Module(h1) after its last version went = %v, want ErrModuleNotFound", err)
	}
	if p, err := s.Plugin(ctxBG, "p", 0); err != nil || p.Version != 3 {
		t.Errorf("Plugin(p, latest) = v%d, %v; want v3", p.Version, err)
	}
	if err := s.DeletePluginVersion(ctxBG, "p", 2); !errors.Is(err, store.ErrPluginNotFound) {
		t.Errorf("deleting a version twice = %v, want ErrPluginNotFound", err)
	}
	ts.reopen()
	if ps, err := ts.S.Plugins(ctxBG); err != nil || len(ps) != 1 || ps[0].Version != 3 {
		t.Errorf("Plugins after the reopen = %+v, %v; want v3 alone", ps, err)
	}
}

// Values far above any compression threshold, compressible or not, come
// back byte for byte: events, modules, sessions, snapshots, state images.
func testLargeValues(t *testing.T, open Opener) {
	ts := begin(t, open)
	mustCreate(t, ts.S, "r", 0)
	text := bytes.Repeat([]byte(`{"row":[1,2,3],"name":"same again"},`), 30000) // ~1 MB, compressible
	noise := make([]byte, 300000)
	x := uint32(1)
	for i := range noise {
		x = x*1664525 + 1013904223
		noise[i] = byte(x >> 24)
	}
	data := append(append([]byte(`["`), bytes.Repeat([]byte("z"), 100000)...), `"]`...)
	b := store.Batch{
		Events: []store.Event{
			{Seq: 1, Time: time.Unix(1, 0), Kind: "big", Data: text},
			{Seq: 2, Time: time.Unix(2, 0), Kind: "big", Data: data},
		},
		PutState: &store.State{Seq: 2, Data: noise},
	}
	if err := ts.S.Append(ctxBG, "r", 0, b); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.S.PutPlugin(ctxBG, store.Plugin{Name: "p", ModuleHash: "n"}, noise); err != nil {
		t.Fatal(err)
	}
	if err := ts.S.PutSession(ctxBG, "s", text); err != nil {
		t.Fatal(err)
	}
	if err := ts.S.PutSnapshot(ctxBG, "r", store.Snapshot{Seq: 2, Data: text}); err != nil {
		t.Fatal(err)
	}
	ts.reopen()
	evs, err := ts.S.Events(ctxBG, "r", 0, 0)
	if err != nil || len(evs) != 2 || !bytes.Equal(evs[0].Data, text) || !bytes.Equal(evs[1].Data, data) {
		t.Errorf("large events came back changed (%d events, %v)", len(evs), err)
	}
	if m, err := ts.S.Module(ctxBG, "n"); err != nil || !bytes.Equal(m, noise) {
		t.Errorf("large module came back changed (%d bytes, %v)", len(m), err)
	}
	if v, err := ts.S.Session(ctxBG, "s"); err != nil || !bytes.Equal(v, text) {
		t.Errorf("large session came back changed (%d bytes, %v)", len(v), err)
	}
	if v, err := ts.S.Snapshot(ctxBG, "r"); err != nil || !bytes.Equal(v.Data, text) {
		t.Errorf("large snapshot came back changed (%d bytes, %v)", len(v.Data), err)
	}
	if v, err := ts.S.State(ctxBG, "r"); err != nil || !bytes.Equal(v.Data, noise) {
		t.Errorf("large state image came back changed (%d bytes, %v)", len(v.Data), err)
	}
}

func init() { cases = append(cases, testCase{"BatchHookClaims", testBatchHookClaims}) }

// A batch's hook claims: a token free or already the run's is given to
// it (with the new hook id); one another run holds fails the whole batch
// with ErrHookTaken; a release in the same batch comes first.
func testBatchHookClaims(t *testing.T, open Opener) {
	ts := begin(t, open)
	s := ts.S
	claim := func(tok, run string, id uint32) store.Hook { return store.Hook{Token: tok, RunID: run, HookID: id} }
	if err := s.CreateRun(ctxBG, store.Run{ID: "a"}, store.Batch{ClaimHooks: []store.Hook{claim("x", "a", 1)}}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "b", 0)
	b := store.Batch{
		Events:     []store.Event{{Seq: 1, Time: time.Unix(1, 0), Kind: "k"}},
		PutTimers:  []store.Timer{{RunID: "b", ID: "t", FireAt: time.Unix(9, 0)}},
		ClaimHooks: []store.Hook{claim("y", "b", 2), claim("x", "b", 3)},
	}
	if err := s.Append(ctxBG, "b", 0, b); !errors.Is(err, store.ErrHookTaken) {
		t.Fatalf("a batch claiming another run's token = %v, want ErrHookTaken", err)
	}
	if r, err := s.Run(ctxBG, "b"); err != nil || r.LastSeq != 0 {
		t.Fatalf("the refused batch moved the log: %+v, %v", r, err)
	}
	if _, err := s.Hook(ctxBG, "y"); !errors.Is(err, store.ErrHookNotFound) {
		t.Errorf("the refused batch kept its other claim: %v", err)
	}
	if _, ok, err := s.NextTimer(ctxBG); ok || err != nil {
		t.Errorf("the refused batch kept its timer (%v)", err)
	}
	if h, err := s.Hook(ctxBG, "x"); err != nil || h != claim("x", "a", 1) {
		t.Errorf("Hook(x) = %+v, %v; want a's", h, err)
	}
	// a claims x again with a new hook id, and b gets y.
	if err := s.Append(ctxBG, "a", 0, store.Batch{ClaimHooks: []store.Hook{claim("x", "a", 4)}}); err != nil {
		t.Fatal(err)
	}
	b.ClaimHooks = b.ClaimHooks[:1]
	if err := s.Append(ctxBG, "b", 0, b); err != nil {
		t.Fatal(err)
	}
	// a releases x and b claims it: the release in b's batch does
	// nothing (b does not hold it); a's release frees it.
	if err := s.Append(ctxBG, "b", 1, store.Batch{ReleaseHooks: []string{"x"}, ClaimHooks: []store.Hook{claim("x", "b", 5)}}); !errors.Is(err, store.ErrHookTaken) {
		t.Fatalf("claiming a's token after releasing it for b = %v, want ErrHookTaken", err)
	}
	if err := s.Append(ctxBG, "a", 0, store.Batch{ReleaseHooks: []string{"x"}, ClaimHooks: []store.Hook{claim("x", "a", 6)}}); err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]store.Hook{"x": claim("x", "a", 6), "y": claim("y", "b", 2)} {
		if h, err := s.Hook(ctxBG, tok); err != nil || h != want {
			t.Errorf("Hook(%s) = %+v, %v; want %+v", tok, h, err, want)
		}
	}
	for _, bad := range []store.Hook{claim("", "a", 1), claim("z", "b", 1)} {
		if err := s.Append(ctxBG, "a", 0, store.Batch{ClaimHooks: []store.Hook{bad}}); !errors.Is(err, store.ErrBadBatch) {
			t.Errorf("claim %+v in a batch of a = %v, want ErrBadBatch", bad, err)
		}
	}
}
