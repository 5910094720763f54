package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// TestReviewStepOutputIgnoresPluginOutputLimit: BUG (host/run.go
// recordStep and failActivation: capOutput(..., lpOutputRoom(rs,
// h.limits))). A step's output is cut against the *host's* output limit
// (64 KiB), not the plugin's: each attempt is capped by the plugin's limit
// (stepWriter), but the run's total is not. abi/README.md: "recorded output
// per run ... further output is dropped". A plugin limited to 100 bytes
// records 3 x 80.
func TestReviewStepOutputIgnoresPluginOutputLimit(t *testing.T) {
	r := newReview(t, nil)
	r.addAs("review-small", &host.ManifestLimits{OutputBytes: 100})
	ctx := context.Background()
	ri, err := r.h.Call(ctx, "review-small", json.RawMessage(`{"mode":"step-print","n":3,"text":"`+strings.Repeat("s", 80)+`"}`), nil)
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

// TestReviewAnswerTextIgnoresPluginPayloadLimit: BUG (host/asks.go
// AnswerAsk: checkAnswer(req, a, h.limits.PayloadBytes)). An answer's text
// is checked against the host's payload limit, not the run's plugin's
// (ResumeHook uses limitsOf for the same check), so a plugin limited to
// 4 KiB per recorded value gets a 10 KB answer recorded and delivered.
func TestReviewAnswerTextIgnoresPluginPayloadLimit(t *testing.T) {
	r := newReview(t, nil)
	r.addAs("review-small", &host.ManifestLimits{PayloadBytes: 4096})
	ctx := context.Background()
	ri, err := r.h.Call(ctx, "review-small", json.RawMessage(`{"mode":"ask-text"}`), nil)
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

// TestReviewHookPayloadsBypassEventLimit: BUG (host/asks.go ResumeHook).
// The events limit is checked only when the guest issues a live op
// (workflow.go Op), so payloads sent to a hook the body is not waiting on
// append hook_received events without bound: a run limited to 40 events
// holds 100+, all kept in memory by every load of the run, and the run is
// neither failed nor refused further payloads. abi/README.md: "events per
// run ... the run fails with LimitError".
func TestReviewHookPayloadsBypassEventLimit(t *testing.T) {
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
