package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/sandflow/sandflow/host/internal/state"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// FuzzHistoryState: a history file ReadHistory accepts is folded into a
// run's state (what CheckReplay does first) without a panic; a log the
// state machine refuses is an error wrapping ErrBadHistory; and a state it
// accepts can be summarised for callers (RunInfo) and encoded.
//
// Seeds: the golden histories (added here), and in
// testdata/fuzz/FuzzHistoryState/ logs that each exercise or break one rule
// of the state machine (retries, hooks, refusals, gaps, events after the
// end, unknown kinds).
func FuzzHistoryState(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no golden histories: %v", err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		hist, err := ReadHistory(bytes.NewReader(b))
		if err != nil {
			return // FuzzReadHistory checks ReadHistory's refusals
		}
		var rs *state.Run
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("folding the history panics: %v\n%s", r, debug.Stack())
				}
			}()
			rs, err = historyState(hist)
		}()
		if err != nil {
			if !errors.Is(err, ErrBadHistory) {
				t.Fatalf("refused with %v, which does not wrap ErrBadHistory", err)
			}
			if rs != nil {
				t.Fatalf("state() returned a state with error %v", err)
			}
			return
		}
		if rs.LastSeq != hist.Events[len(hist.Events)-1].Seq {
			t.Fatalf("the state is at event %d, the history ends at %d", rs.LastSeq, hist.Events[len(hist.Events)-1].Seq)
		}
		for i, o := range rs.Ops {
			if o.Kind == 0 || !o.Kind.Recorded() {
				t.Fatalf("op %d has kind %s, which is not recorded", i+1, o.Kind)
			}
			if o.Settled && (o.State != abi.FutureFulfilled && o.State != abi.FutureRejected || !json.Valid(o.Value)) {
				t.Fatalf("op %d settled as %s with value %q", i+1, o.State, o.Value)
			}
		}
		for id, h := range rs.Hooks {
			if o := rs.Op(id); o == nil || o.Kind != abi.OpHookCreate {
				t.Fatalf("hook %d is not a hook_create op", id)
			}
			for _, p := range h.Nexts {
				if o := rs.Op(p); o == nil || o.Hook != id {
					t.Fatalf("hook %d lists op %d, which is not its hook_next", id, p)
				}
			}
		}
		// A state with an image loads from it, and completes to the
		// folded state.
		if img := rs.Image(); img != nil {
			evs := make([]store.Event, len(hist.Events))
			for i, he := range hist.Events {
				evs[i] = store.Event{Seq: he.Seq, Time: he.Time, Kind: he.Kind, Data: he.Data}
			}
			lz, err := state.FromImage(hist.Run, store.State{Seq: rs.LastSeq, Data: img}, func(n int) ([]store.Event, error) { return evs[:n], nil })
			if err != nil {
				t.Fatalf("the state's own image does not load: %v", err)
			}
			if err := lz.Expand(); err != nil {
				t.Fatalf("the state loaded from its image does not complete: %v", err)
			}
			if a, b := stateDump(lz), stateDump(rs); a != b {
				t.Fatalf("the state loaded from its image completes to\n%s\nnot\n%s", a, b)
			}
		}
		_ = rs.CurrentStatus()
		ri := (&Host{}).info(rs)
		if _, err := json.Marshal(ri); err != nil {
			t.Fatalf("the run's info does not encode: %v", err)
		}
	})
}
