package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// A Cancel issued while a step executes is not held up until the run ends:
// the run is cancelled once the step's attempt is over, and the step after
// it never runs its side effect. Cancel and the driver contend for the
// run's lock, which the driver holds while the run has work; the driver
// has to notice a pending cancel between steps.
func TestCancelDuringStepStopsTheRunBeforeTheNextStep(t *testing.T) {
	r := newEdgeCases(t, nil)
	ctx := context.Background()
	called := make(chan host.RunInfo, 1)
	go func() {
		ri, err := r.h.Call(ctx, "edgecases", json.RawMessage(`{"mode":"block-then-count","token":"cx"}`), nil)
		if err != nil {
			t.Error(err)
		}
		called <- ri
	}()
	<-r.block.entered // the first step is executing
	type res struct {
		ri  host.RunInfo
		err error
	}
	cancelled := make(chan res, 1)
	id := runIDOf(t, r)
	go func() {
		ri, err := r.h.Cancel(ctx, id, "stop")
		cancelled <- res{ri, err}
	}()
	// The step ends only once the Cancel is done (it commits while the
	// step runs) or waits for the run.
	var c res
	done := false
	for !done && !host.CancelWaiting(r.h, id) {
		select {
		case c = <-cancelled:
			done = true
		case <-time.After(time.Millisecond):
		}
	}
	close(r.block.release)
	<-called
	if !done {
		c = <-cancelled
	}
	if errors.Is(c.err, host.ErrRunEnded) || c.ri.Status != store.StatusCancelled {
		t.Errorf("Cancel during a step: %v; run %s", c.err, c.ri.Status)
	}
	if n := r.count.get("cx"); n != 0 {
		t.Errorf("the step after the cancelled one ran its side effect %d time(s)", n)
	}
}

// runIDOf returns the id of the only run.
func runIDOf(t *testing.T, r *edgeCases) string {
	t.Helper()
	runs, err := r.h.Runs(context.Background(), store.RunFilter{})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs: %v %v", runs, err)
	}
	return runs[0].ID
}

// TestStepSeesAbort: a step attempt in flight sees the run's abort
// (StepContext.Aborted: a step that receives the signal sees the
// abort), and a step called after an abort does not count that one,
// only the next.
func TestStepSeesAbort(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		ctx := context.Background()
		k := newKitchen(t, nil)
		done := make(chan host.RunInfo, 1)
		go func() { done <- k.run(`{"mode":"abort-step","token":"sa"}`) }()
		id := ""
		abortWhenRunning := func(key, reason string) {
			t.Helper()
			deadline := time.Now().Add(20 * time.Second)
			for k.count.get(key) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("step %s never ran", key)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if id == "" {
				runs, err := k.h.Runs(ctx, store.RunFilter{})
				if err != nil || len(runs) != 1 {
					t.Fatalf("runs: %v %v", runs, err)
				}
				id = runs[0].ID
			}
			if _, err := k.h.Abort(ctx, id, reason); err != nil {
				t.Fatal(err)
			}
		}
		abortWhenRunning("sa", "task_cancel")
		abortWhenRunning("sa-after", "steer")
		var ri host.RunInfo
		select {
		case ri = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the run did not end")
		}
		if ri.Status != store.StatusCompleted {
			t.Fatalf("run: %s %v", ri.Status, ri.Error)
		}
		got := result[map[string]any](t, ri)
		want := `{"after":{"early":false,"reason":"steer"},"inFlight":{"early":false,"reason":"task_cancel"},"signalled":true}`
		if mustJSON(t, got) != want {
			t.Fatalf("result %s\nwant   %s", mustJSON(t, got), want)
		}
	})
}
