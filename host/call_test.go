package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// commits is a store that counts the transactions that write a run.
type commits struct {
	*store.Bolt
	mu      sync.Mutex
	creates map[string]int
	appends map[string]int
}

func (s *commits) CreateRun(ctx context.Context, r store.Run, b store.Batch) error {
	s.mu.Lock()
	s.creates[r.ID]++
	s.mu.Unlock()
	return s.Bolt.CreateRun(ctx, r, b)
}

func (s *commits) Append(ctx context.Context, id string, last uint64, b store.Batch) error {
	s.mu.Lock()
	s.appends[id]++
	s.mu.Unlock()
	return s.Bolt.Append(ctx, id, last, b)
}

func (s *commits) count(id string) (creates, appends int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates[id], s.appends[id]
}

// Call stores a run with its first commit: a call that completes in one
// activation is one transaction, and one that suspends is stored, whole,
// by the time Call returns. A taken run id fails with ErrRunExists before
// anything runs, and of two calls racing for one id, one wins.
func TestCallCommitsOnce(t *testing.T) {
	ctx := context.Background()
	bolt, err := store.Open(filepath.Join(t.TempDir(), "db"), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	st := &commits{Bolt: bolt, creates: map[string]int{}, appends: map[string]int{}}
	c := &counter{n: map[string]int{}}
	h, err := host.Open(ctx, st, &host.Options{Capabilities: map[string]host.Capability{"count": c.capability()}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	if _, err := h.AddPlugin(ctx, guest(t, kitchenDir), manifest(t, kitchenDir)); err != nil {
		t.Fatal(err)
	}

	ri, err := h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"steps","n":0}`), nil)
	if err != nil || ri.Status != store.StatusCompleted {
		t.Fatalf("%+v %v", ri, err)
	}
	if cr, ap := st.count(ri.ID); cr != 1 || ap != 0 {
		t.Errorf("a one-activation call made %d creates and %d appends, want 1 and 0", cr, ap)
	}
	evs, err := h.Events(ctx, ri.ID)
	if err != nil || len(evs) < 3 || evs[0].Kind != host.EvRunCreated || evs[len(evs)-1].Kind != host.EvRunCompleted {
		t.Fatalf("stored log: %d events, %v", len(evs), err)
	}

	ri, err = h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"two-asks"}`), nil)
	if err != nil || ri.Status != store.StatusWaiting {
		t.Fatalf("%+v %v", ri, err)
	}
	if cr, ap := st.count(ri.ID); cr != 1 || ap != 0 {
		t.Errorf("a call that suspended made %d creates and %d appends, want 1 and 0", cr, ap)
	}
	stored, err := h.Run(ctx, ri.ID)
	if err != nil || stored.Status != store.StatusWaiting || len(stored.Waiting) != 2 {
		t.Fatalf("stored run: %+v %v", stored, err)
	}

	// A taken id: refused before the guest runs (its step would count).
	const id = "run_taken"
	if _, err := h.Start(ctx, "kitchen", json.RawMessage(`{"mode":"steps","n":0}`), &host.CallOptions{RunID: id}); err != nil {
		t.Fatal(err)
	}
	_, err = h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"count","token":"taken"}`), &host.CallOptions{RunID: id})
	if !errors.Is(err, host.ErrRunExists) {
		t.Fatalf("Call with a taken id: %v, want ErrRunExists", err)
	}
	if n := c.get("taken"); n != 0 {
		t.Errorf("the refused call's step ran %d times", n)
	}
	if evs, _ := h.Events(ctx, id); len(evs) != 1 {
		t.Errorf("the taken run has %d events, want its run_created alone", len(evs))
	}

	// Two calls racing for one new id: one completes, one is refused.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"count","token":"race"}`), &host.CallOptions{RunID: "run_race"})
		})
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), host.ErrRunExists) {
		t.Fatalf("racing calls: %v and %v, want one ErrRunExists", errs[0], errs[1])
	}
	if ri, err := h.Run(ctx, "run_race"); err != nil || ri.Status != store.StatusCompleted {
		t.Fatalf("the race's run: %+v %v", ri, err)
	}
	if n := c.get("race"); n != 1 {
		t.Errorf("the race's step ran %d times, want 1", n)
	}
}
