package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// TestReviewReplayCostCountsAgainstCPULimit: the CPU budget covers one
// activation, so a run that completes on a warm instance also completes
// when it is resumed by replay (after an eviction, a restart, or with
// MaxWarm < 0): each replayed activation gets its own budget, not the sum
// of every earlier activation's compute under the budget of one.
//
// The budget is wall-clock time within the guest, so on a loaded machine
// one activation can overrun by chance. The run has 8 activations of about
// a quarter of the limit each: with the bug, the last replay computes
// twice the limit and every attempt fails; by chance, an activation must
// run 4x slower than calibrated, so one attempt in three passing shows the
// budget is per activation.
func TestReviewReplayCostCountsAgainstCPULimit(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		var failures []string
		for attempt := 1; attempt <= 3; attempt++ {
			why := replayWithinCPULimit(t)
			if why == "" {
				return
			}
			failures = append(failures, fmt.Sprintf("attempt %d: %s", attempt, why))
		}
		t.Errorf("no attempt completed both runs:\n%v", failures)
	})
}

// replayWithinCPULimit runs the same run warm and by replay under one
// calibrated limit and says what went wrong, or "".
func replayWithinCPULimit(t *testing.T) string {
	ctx := context.Background()
	const activations = 8
	cal := newReview(t, nil)
	timed := func(millions int) time.Duration {
		start := time.Now()
		ri := cal.call("review", fmt.Sprintf(`{"mode":"spin","n":1,"ms":%d}`, millions))
		if ri.Status != store.StatusCompleted {
			t.Fatalf("calibration: %+v", ri)
		}
		return time.Since(start)
	}
	timed(1)
	perMillion := max((timed(40)-timed(4))/36, time.Microsecond)
	// Each activation computes about 50ms; the limit is 4x that.
	millions := max(1, int(50*time.Millisecond/perMillion))
	limit := max(4*time.Duration(millions)*perMillion, 100*time.Millisecond)
	in := json.RawMessage(fmt.Sprintf(`{"mode":"spin","n":%d,"ms":%d}`, activations, millions))
	l := &host.ManifestLimits{CPUMs: limit.Milliseconds()}
	t.Logf("calibration: %s per million rounds; %d million per activation, limit %s", perMillion, millions, limit)

	run := func(maxWarm int) host.RunInfo {
		r := newReview(t, &host.Options{MaxWarm: maxWarm})
		r.addAs("review-cpu", l)
		ri, err := r.h.Call(ctx, "review-cpu", in, nil)
		if err != nil {
			t.Fatal(err)
		}
		for ri.Status == store.StatusWaiting {
			if _, err := r.h.FireDue(ctx, time.Now().Add(time.Hour), nil); err != nil {
				t.Fatal(err)
			}
			if ri, err = r.h.Run(ctx, ri.ID); err != nil {
				t.Fatal(err)
			}
		}
		return ri
	}
	if warm := run(64); warm.Status != store.StatusCompleted {
		return fmt.Sprintf("the warm run ended %s within its limit of %s: %+v", warm.Status, limit, warm.Error)
	}
	if fresh := run(-1); fresh.Status != store.StatusCompleted {
		return fmt.Sprintf("the run completes on a warm instance but, resumed by replay, ends %s: %+v", fresh.Status, fresh.Error)
	}
	return ""
}
