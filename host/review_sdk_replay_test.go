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

// TestReviewSDKRuntimeRandDivergesOnReplay: BUG (guest-sdk/sandflow.go
// Progress, Ask; guest-sdk/step.go Step.Start). With the if-recorded flag,
// the SDK encodes an op's payload with encoding/json only when the host
// answers "live"; on replay it skips the encoding. Encoding a map (and
// encoding a type for the first time) draws from the Go runtime's internal
// generator, so after the first such op a replaying instance and the
// original one are at different points of that generator: math/rand, map
// iteration order and select differ between the live execution and its
// replay. RATIONALE.md and the SDK docs promise they are the same.
//
// The body publishes a map as progress, draws x from math/rand, publishes
// x, sleeps, and returns x. MaxWarm -1 makes the activation after the sleep
// a replay in a fresh instance: it returns its own x, which must be the x
// the live activation recorded.
func TestReviewSDKRuntimeRandDivergesOnReplay(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		r := newReview(t, &host.Options{MaxWarm: -1})
		for i := range 3 {
			ri := r.call("review", `{"mode":"rand-after-progress","ms":1}`)
			if ri.Status != store.StatusWaiting {
				t.Fatalf("status %s: %+v", ri.Status, ri)
			}
			live := string(ri.Progress)
			ri = r.fireUntilDone(ri.ID, 10*time.Second)
			if ri.Status != store.StatusCompleted {
				t.Fatalf("run %d: %+v", i, ri)
			}
			if replayed := string(ri.Result); replayed != live {
				t.Fatalf("run %d: math/rand after a Progress gave %s live and %s on replay", i, live, replayed)
			}
		}
	})
}

// TestReviewSDKEncodeFailureBreaksReplay: BUG (guest-sdk/step.go
// Step.Start). Start first sends the op with the if-recorded flag; when the
// host answers "live" it encodes the input, and when that fails (NaN, a
// channel, a cyclic value) it returns a failed future without sending the
// op, so nothing takes the position. On replay the same flagged op is
// compared with the op the body issued next, which the log holds at that
// position: the deterministic guest is declared non-deterministic (here:
// step "echo" was recorded, the probe asks for "echo" again and gets the
// *next* step's answer; with two different step names it is a
// NonDeterminismError). The same holds for Progress and Ask.
func TestReviewSDKEncodeFailureBreaksReplay(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		r := newReview(t, &host.Options{MaxWarm: -1})
		ctx := context.Background()
		ri, err := r.h.Call(ctx, "review", json.RawMessage(`{"mode":"nan-step"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if ri.Status != store.StatusCompleted {
			t.Fatalf("run did not complete: %+v", ri)
		}
		var got struct {
			NanErr string  `json:"nanErr"`
			V      float64 `json:"v"`
		}
		if err := json.Unmarshal(ri.Result, &got); err != nil {
			t.Fatal(err)
		}
		// Live, the NaN step failed to encode; the replay must see that too.
		if got.NanErr == "<nil>" || got.V != 7 {
			t.Errorf("replay answered the NaN step from the log of the next step: %s", ri.Result)
		}
	})
}

// TestReviewSDKProgressEncodeFailureBreaksReplay: the Progress variant of
// the bug above: Progress(NaN) returns an error live and takes no
// position; the sleep that follows takes position 1. On replay the
// flagged progress is checked against the sleep at position 1.
func TestReviewSDKProgressEncodeFailureBreaksReplay(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		r := newReview(t, &host.Options{MaxWarm: -1})
		ctx := context.Background()
		ri := r.call("review", `{"mode":"nan-progress","ms":1}`)
		if ri.Status != store.StatusWaiting {
			t.Fatalf("%+v", ri)
		}
		if _, err := r.h.FireDue(ctx, ri.CreatedAt.Add(24*3600e9), nil); err != nil {
			t.Fatal(err)
		}
		ri, err := r.h.Drive(ctx, ri.ID)
		if errors.Is(err, host.ErrNonDeterminism) || ri.Stalled != "" {
			t.Fatalf("a deterministic guest is stalled as non-deterministic: %v (stalled: %s)", err, ri.Stalled)
		}
		if err != nil {
			t.Fatal(err)
		}
		if ri.Status != store.StatusCompleted || string(ri.Result) != `{"progressErr":true}` {
			t.Errorf("%+v", ri)
		}
	})
}
