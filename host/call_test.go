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

// openCommits opens a store, closed when the test ends, that counts its
// commits.
func openCommits(t *testing.T) *commits {
	t.Helper()
	bolt, err := store.Open(filepath.Join(t.TempDir(), "db"), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bolt.Close() })
	return &commits{Bolt: bolt, creates: map[string]int{}, appends: map[string]int{}}
}

// Call stores a run with its first commit: a call that completes in one
// activation is one transaction, and one that suspends is stored, whole,
// by the time Call returns. A taken run id fails with ErrRunExists before
// anything runs, and of two calls racing for one id, one wins.
func TestCallCommitsOnce(t *testing.T) {
	ctx := context.Background()
	st := openCommits(t)
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

// An answer is stored in one commit with the activation it wakes, and
// whatever that activation does, the answer is in the log and its
// question closed: when the run completes, when its guest fails, and when
// the caller's context ends before the activation.
func TestAnswerStoredWithActivation(t *testing.T) {
	ctx := context.Background()
	st := openCommits(t)
	h, err := host.Open(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	if _, err := h.AddPlugin(ctx, guest(t, kitchenDir), manifest(t, kitchenDir)); err != nil {
		t.Fatal(err)
	}
	ask := func() (host.RunInfo, string) {
		t.Helper()
		ri, err := h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"ask-then"}`), nil)
		if err != nil || ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 {
			t.Fatalf("%+v %v", ri, err)
		}
		return ri, ri.Waiting[0].AskID
	}
	// settledBefore checks the log: the answer is there, before the
	// event that ends the run when it ended, and its question is closed.
	settledBefore := func(id, askID, end string) {
		t.Helper()
		evs, err := h.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		at, endAt := -1, -1
		for i, e := range evs {
			switch e.Kind {
			case host.EvAskSettled:
				at = i
			case end:
				endAt = i
			}
		}
		if at < 0 || (end != "" && endAt < at) {
			t.Errorf("run %s: ask_settled at %d, %s at %d", id, at, end, endAt)
		}
		if q, err := h.Question(ctx, askID); err != nil || q.Open {
			t.Errorf("question %s: %+v %v, want it closed", askID, q, err)
		}
	}

	ri, askID := ask()
	ri, err = h.AnswerAsk(ctx, askID, host.Answer{Text: "done"})
	if err != nil || ri.Status != store.StatusCompleted || string(ri.Result) != `"done"` {
		t.Fatalf("answered: %+v %v", ri, err)
	}
	if _, ap := st.count(ri.ID); ap != 1 {
		t.Errorf("an answer that completed its run made %d appends, want 1", ap)
	}
	settledBefore(ri.ID, askID, host.EvRunCompleted)

	ri, askID = ask()
	ri, err = h.AnswerAsk(ctx, askID, host.Answer{Text: "exit"})
	if err != nil || ri.Status != store.StatusFailed {
		t.Fatalf("answered exit: %+v %v", ri, err)
	}
	if _, ap := st.count(ri.ID); ap != 1 {
		t.Errorf("an answer whose activation failed made %d appends, want 1", ap)
	}
	settledBefore(ri.ID, askID, host.EvRunFailed)

	ri, askID = ask()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := h.AnswerAsk(cctx, askID, host.Answer{Text: "later"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("answer with a cancelled context: %v", err)
	}
	settledBefore(ri.ID, askID, "")
	if _, err := h.AnswerAsk(ctx, askID, host.Answer{Text: "again"}); !errors.Is(err, host.ErrAskClosed) {
		t.Errorf("a second answer: %v, want ErrAskClosed", err)
	}
	if ri, err = h.Drive(ctx, ri.ID); err != nil || string(ri.Result) != `"later"` {
		t.Fatalf("driven after the cancelled answer: %+v %v", ri, err)
	}
}
