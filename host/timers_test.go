package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// barrierStore lets n DueTimers calls read the timer index before any of
// them returns: what two schedulers (or the scheduler and an API call of
// FireDue) do when they poll at the same moment.
type barrierStore struct {
	*store.Bolt
	mu      sync.Mutex
	waiting int
	n       int
	open    chan struct{}
}

func (s *barrierStore) DueTimers(ctx context.Context, now time.Time, limit int) ([]store.Timer, error) {
	ts, err := s.Bolt.DueTimers(ctx, now, limit)
	s.mu.Lock()
	if s.open != nil {
		s.waiting++
		if s.waiting == s.n {
			close(s.open)
		}
		open := s.open
		s.mu.Unlock()
		<-open
	} else {
		s.mu.Unlock()
	}
	return ts, err
}

func (s *barrierStore) arm(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n, s.waiting, s.open = n, 0, make(chan struct{})
}

func (s *barrierStore) disarm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open = nil
}

// A retry timer fires only the attempt it was set for. When two FireDue
// calls read the same due timer (two schedulers, or the scheduler and an
// API call), the first fires attempt 2; when attempt 2 fails and sets its
// own retry timer, the second FireDue's stale timer must not start
// attempt 3 before that attempt's backoff.
func TestStaleRetryTimerDoesNotSkipTheBackoff(t *testing.T) {
	ctx := context.Background()
	bolt, err := store.Open(filepath.Join(t.TempDir(), "sandflow.db"), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	st := &barrierStore{Bolt: bolt}
	c := &counter{n: map[string]int{}}
	h, err := host.Open(ctx, st, &host.Options{Engine: sharedEngine(t), Capabilities: map[string]host.Capability{"count": c.capability()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx); bolt.Close() })
	if _, err := h.AddPlugin(ctx, guest(t, kitchenDir), manifest(t, kitchenDir)); err != nil {
		t.Fatal(err)
	}
	// Attempts 1 and 2 fail, 3 succeeds; backoff 50ms doubling (up to 1s).
	ri, err := h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"flaky","token":"stale","fail":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].Kind != "step_retry" {
		t.Fatalf("want a wait on a retry: %+v", ri)
	}
	// Two FireDue calls see the retry timer of attempt 1. "now" is far
	// enough ahead that the timer is due, but the barrier makes both read
	// the index before either fires anything.
	now := time.Now().Add(time.Minute)
	st.arm(2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.FireDue(ctx, now, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	st.disarm()

	// One timer fired once: attempt 2 ran and failed, attempt 3 waits for
	// its own backoff.
	if n := c.get("stale"); n != 2 {
		t.Errorf("the step ran %d times, want 2: a stale retry timer started attempt 3 without its backoff", n)
	}
	ri, err = h.Run(ctx, ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ri.Status != store.StatusWaiting {
		t.Errorf("run is %s, want waiting on the retry of attempt 2", ri.Status)
	}
	evs, _ := h.Events(ctx, ri.ID)
	var failedAt, startedAt time.Time
	var retryAt *time.Time
	for _, e := range evs {
		var d struct {
			Attempt int
			RetryAt *time.Time
		}
		json.Unmarshal(e.Data, &d)
		switch {
		case e.Kind == host.EvStepFailed && d.Attempt == 2:
			failedAt, retryAt = e.Time, d.RetryAt
		case e.Kind == host.EvStepStarted && d.Attempt == 3:
			startedAt = e.Time
		}
	}
	if retryAt != nil && !startedAt.IsZero() && startedAt.Before(*retryAt) {
		t.Errorf("attempt 2 failed at %s and asked for a retry at %s; attempt 3 started at %s",
			failedAt.Format(time.StampMicro), retryAt.Format(time.StampMicro), startedAt.Format(time.StampMicro))
	}
}

// A step error asking for a retry beyond the store's time range (a
// RetryableError asking for a retry in 260 years, a valid time.Duration,
// past the store's year 2262) is not a store error: the attempt's outcome
// is recorded, the step's side effect runs once however often the run is
// driven, and the run does not stay "running".
func TestRetryDelayBeyondTheStoreRangeDoesNotStickTheRun(t *testing.T) {
	r := newEdgeCases(t, nil)
	ctx := context.Background()
	ri, err := r.h.Call(ctx, "edgecases", json.RawMessage(`{"mode":"far-retry","token":"far"}`), nil)
	if errors.Is(err, store.ErrBadBatch) {
		t.Errorf("Call returned a store error for a guest's retry delay: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.h.Drive(ctx, ri.ID); err != nil {
			t.Logf("Drive: %v", err)
		}
	}
	if n := r.count.get("far"); n != 1 {
		t.Errorf("the step's side effect ran %d times for one attempt", n)
	}
	ri, err = r.h.Run(ctx, ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ri.Status == store.StatusRunning {
		t.Errorf("the run is stuck running: %+v", ri)
	}
}
