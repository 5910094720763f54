package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// The output recorded for a run is capped by its plugin's output limit, not
// only the host's: each step attempt is capped, and so is the run's total.
// A plugin limited to 100 bytes whose steps print 3 x 80 records at most
// 100.
func TestStepOutputCountsAgainstThePluginOutputLimit(t *testing.T) {
	r := newEdgeCases(t, nil)
	r.addAs("edgecases-small", &host.ManifestLimits{OutputBytes: 100})
	ctx := context.Background()
	ri, err := r.h.Call(ctx, "edgecases-small", json.RawMessage(`{"mode":"step-print","n":3,"text":"`+strings.Repeat("s", 80)+`"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := result[int](t, ri); got != 240 {
		t.Fatalf("printed %d", got)
	}
	total := 0
	for _, d := range eventsOf(t, r.h, ri.ID, host.EvOutput) {
		s, _ := d["data"].(string)
		total += len(s)
	}
	if total > 100 {
		t.Errorf("recorded %d bytes of output for a plugin whose limit is 100", total)
	}
}

// An answer's text is checked against the payload limit of the run's
// plugin, as a hook payload is: a 10 KB answer to a plugin limited to
// 4 KiB per recorded value is refused with ErrLimit.
func TestAnswerTextIsCheckedAgainstThePluginPayloadLimit(t *testing.T) {
	r := newEdgeCases(t, nil)
	r.addAs("edgecases-small", &host.ManifestLimits{PayloadBytes: 4096})
	ctx := context.Background()
	ri, err := r.h.Call(ctx, "edgecases-small", json.RawMessage(`{"mode":"ask-text"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 {
		t.Fatalf("%+v", ri)
	}
	ri, err = r.h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{Text: strings.Repeat("a", 10_000)})
	if !errors.Is(err, host.ErrLimit) {
		t.Errorf("a 10000-byte answer to a plugin limited to 4096 bytes: err %v, run %s", err, ri.Status)
	}
}

// Payloads sent to a hook the body is not waiting on count against the
// run's events limit like the events of live ops: a run limited to 40
// events never holds more, however many payloads arrive.
func TestHookPayloadsCountAgainstTheEventLimit(t *testing.T) {
	k := newKitchen(t, nil)
	k.tight("kitchen-events", host.ManifestLimits{Events: 40})
	ctx := context.Background()
	ri, err := k.h.Call(ctx, "kitchen-events", json.RawMessage(`{"mode":"hold-hook","token":"spam"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ri.Status != store.StatusWaiting {
		t.Fatalf("%+v", ri)
	}
	var lastErr error
	for i := range 100 {
		if _, err := k.h.ResumeHook(ctx, "spam", json.RawMessage(`{"i":`+mustJSON(t, i)+`}`)); err != nil {
			lastErr = err
			break
		}
	}
	evs, err := k.h.Events(ctx, ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) > 40 {
		ri, _ = k.h.Run(ctx, ri.ID)
		t.Errorf("a run limited to 40 events has %d (status %s, last ResumeHook error %v)", len(evs), ri.Status, lastErr)
	}
}

// The CPU budget covers one activation, so a run that completes on a warm
// instance also completes when it is resumed by replay (after an eviction,
// a restart, or with MaxWarm < 0): each replayed activation gets its own
// budget, not the sum of every earlier activation's compute under the
// budget of one.
//
// The budget is wall-clock time within the guest, so on a loaded machine
// one activation can overrun by chance. The run has 8 activations of about
// a quarter of the limit each: were the replayed compute summed, the last
// replay would compute twice the limit and every attempt would fail; by
// chance, an activation must run 4x slower than calibrated, so one attempt
// in three passing shows the budget is per activation.
func TestCPULimitIsPerActivationOnReplay(t *testing.T) {
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
	cal := newEdgeCases(t, nil)
	timed := func(millions int) time.Duration {
		start := time.Now()
		ri := cal.call("edgecases", fmt.Sprintf(`{"mode":"spin","n":1,"ms":%d}`, millions))
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
		r := newEdgeCases(t, &host.Options{MaxWarm: maxWarm})
		r.addAs("edgecases-cpu", l)
		ri, err := r.h.Call(ctx, "edgecases-cpu", in, nil)
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
