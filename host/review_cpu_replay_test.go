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

// TestReviewReplayCostCountsAgainstCPULimit: BUG (host/run.go activate,
// host/wazero.go callResult: the CPU budget covers the whole sandflow_run
// call, replay included, and failActivation fails the run on the
// resulting LimitError). Whether a run survives depends on whether its
// instance stayed parked: the same run, each of whose activations is well
// within the limit, completes on a warm instance and fails with
// CPULimitError when it is resumed by replay (after an eviction, a restart,
// or with MaxWarm < 0), because the replay redoes the compute of every
// earlier activation under the budget of one. A replay should get its own
// budget (or a failed replay should leave the run intact, as for
// non-determinism), not fail the run permanently.
func TestReviewReplayCostCountsAgainstCPULimit(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		ctx := context.Background()
		// Calibrate: how long does one activation's compute take here?
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
		// Each activation computes about 80ms; the limit is 3x that.
		millions := max(1, int(80*time.Millisecond/perMillion))
		limit := max(3*time.Duration(millions)*perMillion, 100*time.Millisecond)
		in := json.RawMessage(fmt.Sprintf(`{"mode":"spin","n":5,"ms":%d}`, millions))
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
		warm := run(64)
		if warm.Status != store.StatusCompleted {
			t.Skipf("the warm run did not complete within its limit of %s (machine too loaded?): %+v", limit, warm.Error)
		}
		fresh := run(-1)
		if fresh.Status != store.StatusCompleted {
			t.Errorf("the same run completes on a warm instance but, resumed by replay, ends %s: %+v", fresh.Status, fresh.Error)
		}
	})
}
