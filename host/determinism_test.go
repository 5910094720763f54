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

// The metadata op answers from the run's log, not from the host's current
// configuration: a run started under one BaseURL and resumed by replay
// after a restart with another sees the metadata it saw live, so a body
// that branches on it (here: it publishes the URL as progress only when
// there is one) replays and completes instead of being stalled as
// non-deterministic.
func TestMetadataReplaysFromTheLogAfterBaseURLChanges(t *testing.T) {
	r := newEdgeCases(t, &host.Options{BaseURL: "https://old.invalid"})
	ctx := context.Background()
	ri := r.call("edgecases", `{"mode":"metadata-url","ms":1}`)
	if ri.Status != store.StatusWaiting {
		t.Fatalf("%+v", ri)
	}
	// The operator moves the UI; the process restarts.
	r.opts.BaseURL = ""
	r.restart()
	if _, err := r.h.FireDue(ctx, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	ri, err := r.h.Drive(ctx, ri.ID)
	if errors.Is(err, host.ErrNonDeterminism) || ri.Stalled != "" {
		t.Fatalf("a deterministic guest is stalled after a restart with another BaseURL: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := result[string](t, ri); got != "ok" {
		t.Errorf("%q", got)
	}
}

// A replaying instance and the original one draw the same values from the
// Go runtime's generator, whatever ops came before: encoding an op's
// payload (a map, or a type encoded for the first time) draws from that
// generator, so the SDK encodes payloads live and on replay alike, and
// math/rand, map iteration order and select are the same in the live
// execution and its replay.
//
// The body publishes a map as progress, draws x from math/rand, publishes
// x, sleeps, and returns x. MaxWarm -1 makes the activation after the sleep
// a replay in a fresh instance: it returns its own x, which must be the x
// the live activation recorded.
func TestSDKMathRandAfterProgressIsTheSameOnReplay(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		r := newEdgeCases(t, &host.Options{MaxWarm: -1})
		for i := range 3 {
			ri := r.call("edgecases", `{"mode":"rand-after-progress","ms":1}`)
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

// A step whose input fails to encode (NaN, a channel, a cyclic value)
// fails the same way live and on replay, and takes the same position in
// both: the replay does not answer it from the log entry of the step that
// follows (here the NaN step's error is seen, and the next step's value is
// 7).
func TestSDKStepInputEncodeFailureReplays(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		r := newEdgeCases(t, &host.Options{MaxWarm: -1})
		ctx := context.Background()
		ri, err := r.h.Call(ctx, "edgecases", json.RawMessage(`{"mode":"nan-step"}`), nil)
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

// The Progress variant: Progress(NaN) returns an error live and on replay,
// and the sleep that follows replays at its own position, so the
// deterministic guest completes instead of being stalled as
// non-deterministic.
func TestSDKProgressEncodeFailureReplays(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		r := newEdgeCases(t, &host.Options{MaxWarm: -1})
		ctx := context.Background()
		ri := r.call("edgecases", `{"mode":"nan-progress","ms":1}`)
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
