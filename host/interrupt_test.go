package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// cutter is a "count" capability whose first call for a key blocks until
// its context ends (the host cuts the attempt off) or the test releases
// it; every call is tallied, with the attempt and step id it came from.
// It is the side effect the tests count.
type cutter struct {
	mu      sync.Mutex
	calls   map[string][]host.CapabilityCall
	entered chan string // a blocked call has begun
	release chan struct{}
}

func newCutter() *cutter {
	return &cutter{calls: map[string][]host.CapabilityCall{}, entered: make(chan string, 16), release: make(chan struct{})}
}

func (b *cutter) capability() host.Capability {
	return func(ctx context.Context, call host.CapabilityCall) (json.RawMessage, error) {
		var key string
		if err := json.Unmarshal(call.Input, &key); err != nil {
			return nil, err
		}
		b.mu.Lock()
		b.calls[key] = append(b.calls[key], call)
		n := len(b.calls[key])
		b.mu.Unlock()
		if n == 1 {
			b.entered <- key
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-b.release:
			}
		}
		return json.Marshal(n)
	}
}

func (b *cutter) get(key string) []host.CapabilityCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]host.CapabilityCall(nil), b.calls[key]...)
}

func (b *cutter) waitEntered(t *testing.T, key string) {
	t.Helper()
	select {
	case k := <-b.entered:
		if k != key {
			t.Fatalf("blocked call for %q, want %q", k, key)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no call for %q", key)
	}
}

// newCutterKitchen is a kitchen whose "count" capability is b.
func newCutterKitchen(t *testing.T, b *cutter) *fixture {
	t.Helper()
	f := newFixture(t, &host.Options{Capabilities: map[string]host.Capability{"count": b.capability()}})
	f.add(kitchenDir)
	return f
}

// stepEvent is a step event of a log, decoded.
type stepEvent struct {
	Kind    string
	Op      uint32
	Attempt int
	Error   *abi.ErrorObject
	RetryAt *time.Time
}

func stepEvents(t *testing.T, h *host.Host, runID string) []stepEvent {
	t.Helper()
	evs, err := h.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var out []stepEvent
	for _, e := range evs {
		switch e.Kind {
		case host.EvStepStarted, host.EvStepCompleted, host.EvStepFailed:
		default:
			continue
		}
		var d stepEvent
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		d.Kind = e.Kind
		out = append(out, d)
	}
	return out
}

// interruption checks that ev is attempt's failure as interrupted with
// cause, and whether it is retried.
func interruption(t *testing.T, ev stepEvent, attempt int, cause string, retried bool) {
	t.Helper()
	if ev.Kind != host.EvStepFailed || ev.Attempt != attempt {
		t.Fatalf("event %+v, want step_failed of attempt %d", ev, attempt)
	}
	ie, ok := host.AsStepInterrupted(ev.Error, "")
	if !ok {
		t.Fatalf("attempt %d failed with %+v, not a StepInterruptedError", attempt, ev.Error)
	}
	if !errors.Is(ie, host.ErrStepInterrupted) || ie.Cause != cause || ie.Attempt != attempt {
		t.Fatalf("interruption %+v, want cause %s of attempt %d", ie, cause, attempt)
	}
	if (ev.RetryAt != nil) != retried {
		t.Fatalf("attempt %d retry at %v, want retried=%v", attempt, ev.RetryAt, retried)
	}
}

// wantKinds checks the kinds and attempt numbers of a run's step events.
func wantKinds(t *testing.T, evs []stepEvent, want ...any) {
	t.Helper()
	if len(evs) != len(want)/2 {
		t.Fatalf("step events %+v, want %v", evs, want)
	}
	for i, e := range evs {
		if e.Kind != want[2*i].(string) || e.Attempt != want[2*i+1].(int) {
			t.Fatalf("step event %d is %s of attempt %d, want %v (all: %+v)", i, e.Kind, e.Attempt, want, evs)
		}
	}
}

// startBlocked starts a kitchen run whose step blocks in its capability,
// drives it on a goroutine, and returns once the attempt is inside the
// capability, with the channel Drive's error arrives on.
func startBlocked(t *testing.T, f *fixture, b *cutter, ctx context.Context, input, key string) (host.RunInfo, <-chan error) {
	t.Helper()
	ri, err := f.h.Start(context.Background(), "kitchen", json.RawMessage(input), nil)
	if err != nil {
		t.Fatal(err)
	}
	driven := make(chan error, 1)
	go func() {
		_, err := f.h.Drive(ctx, ri.ID)
		driven <- err
	}()
	b.waitEntered(t, key)
	return ri, driven
}

// A step attempt cut off by closing the host is in the log as attempt 1
// interrupted (host_closed), and after a restart the step runs again as
// attempt 2, after the policy's backoff, with the same step id: the side
// effect ran twice, and the log says so. Before, the log showed one
// attempt 1 although the step ran twice.
func TestStepCutOffByCloseRunsAgainAsAttempt2(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		b := newCutter()
		f := newCutterKitchen(t, b)
		ri, driven := startBlocked(t, f, b, context.Background(), `{"mode":"count","token":"deploy"}`, "deploy")
		f.restart()
		if err := <-driven; !errors.Is(err, host.ErrClosed) {
			t.Fatalf("Drive cut off by Close: %v, want ErrClosed", err)
		}
		// The reloaded data dir keeps the attempt's state: attempt 1
		// failed, a retry is due.
		info, err := f.h.Run(context.Background(), ri.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiting) != 1 || info.Waiting[0].Kind != "step_retry" || info.Waiting[0].Attempt != 1 || info.Waiting[0].Until == nil {
			t.Fatalf("after the restart: %+v", info)
		}
		evs := stepEvents(t, f.h, ri.ID)
		wantKinds(t, evs, host.EvStepStarted, 1, host.EvStepFailed, 1)
		interruption(t, evs[1], 1, abi.InterruptHostClosed, true)
		if got := evs[1].RetryAt.Sub(time.Now()); got > time.Second {
			t.Errorf("retry in %s, over the default first backoff", got)
		}
		k := &kitchen{fixture: f}
		info = k.settle(ri.ID, 30*time.Second)
		if n := result[int](t, info); n != 2 {
			t.Errorf("result %d, want 2 (the second call)", n)
		}
		wantKinds(t, stepEvents(t, f.h, ri.ID), host.EvStepStarted, 1, host.EvStepFailed, 1, host.EvStepStarted, 2, host.EvStepCompleted, 2)
		calls := b.get("deploy")
		if len(calls) != 2 || calls[0].Attempt != 1 || calls[1].Attempt != 2 {
			t.Fatalf("side effect ran %d times: %+v, want attempts 1 and 2", len(calls), calls)
		}
		if calls[0].StepID != calls[1].StepID || calls[0].StepID == "" {
			t.Errorf("step ids %q and %q: the idempotency key must stay the step id", calls[0].StepID, calls[1].StepID)
		}
		// The history, interrupted attempt and all, replays to its end.
		var buf bytes.Buffer
		if err := f.h.ExportHistory(context.Background(), ri.ID, &buf); err != nil {
			t.Fatal(err)
		}
		hist, err := host.ReadHistory(&buf)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := f.h.CheckReplay(context.Background(), hist, guest(t, kitchenDir))
		if err != nil || rep.End != "completed" || rep.Ops != rep.RecordedOps {
			t.Fatalf("replay: %+v %v", rep, err)
		}
	})
}

// commitCounter counts the store writes of runs: creations and appends.
type commitCounter struct {
	store.Store
	mu sync.Mutex
	n  int
}

func (c *commitCounter) CreateRun(ctx context.Context, r store.Run, b store.Batch) error {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Store.CreateRun(ctx, r, b)
}

func (c *commitCounter) Append(ctx context.Context, id string, last uint64, b store.Batch) error {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Store.Append(ctx, id, last, b)
}

// Beginning an attempt in the log costs no commit of its own: its
// step_started rides the activation's commit. A run of n sequential steps
// commits once to start, then twice a step (the step's result, and the
// activation that starts the next step or completes).
func TestStepAttemptCostsNoCommitOfItsOwn(t *testing.T) {
	f := newFixture(t, nil)
	cc := &commitCounter{Store: f.st}
	h, err := host.Open(context.Background(), cc, &f.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	if _, err := h.AddPlugin(context.Background(), guest(t, kitchenDir), manifest(t, kitchenDir)); err != nil {
		t.Fatal(err)
	}
	const n = 10
	cc.mu.Lock()
	cc.n = 0
	cc.mu.Unlock()
	ri, err := h.Call(context.Background(), "kitchen", json.RawMessage(`{"mode":"steps","n":10}`), nil)
	if err != nil || ri.Status != store.StatusCompleted {
		t.Fatalf("%+v %v", ri, err)
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.n != 2*n+1 {
		t.Errorf("%d steps made %d commits, want %d", n, cc.n, 2*n+1)
	}
}

// A host that stops without recording how an attempt ended (it crashed)
// leaves the attempt open in the log; the next host to drive the run
// records it as interrupted (crashed) before anything else, and retries
// it as attempt 2. Here the first host stays blocked, as a hung or dead
// process would, while a second host on the same store recovers the run.
func TestStepCutOffByCrashIsRecordedOnRecovery(t *testing.T) {
	b := newCutter()
	f := newCutterKitchen(t, b)
	ri, driven := startBlocked(t, f, b, context.Background(), `{"mode":"count","token":"deploy"}`, "deploy")
	h2, err := host.Open(context.Background(), f.st, &f.opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Recover(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		info, err := h2.Run(context.Background(), ri.ID)
		return err != nil || len(info.Waiting) == 1 && info.Waiting[0].Kind == "step_retry"
	})
	evs := stepEvents(t, h2, ri.ID)
	wantKinds(t, evs, host.EvStepStarted, 1, host.EvStepFailed, 1)
	interruption(t, evs[1], 1, abi.InterruptCrashed, true)
	k := &kitchen{fixture: &fixture{t: t, h: h2}}
	info := k.settle(ri.ID, 30*time.Second)
	if n := result[int](t, info); n != 2 {
		t.Errorf("result %d, want 2", n)
	}
	wantKinds(t, stepEvents(t, h2, ri.ID), host.EvStepStarted, 1, host.EvStepFailed, 1, host.EvStepStarted, 2, host.EvStepCompleted, 2)
	if calls := b.get("deploy"); len(calls) != 2 || calls[1].Attempt != 2 {
		t.Fatalf("side effect calls %+v, want 2, the second of attempt 2", calls)
	}
	// The first host's attempt ends late; what it records is fenced off
	// by the log it no longer matches, and changes nothing.
	close(b.release)
	<-driven
	if err := h2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.restart()
	wantKinds(t, stepEvents(t, f.h, ri.ID), host.EvStepStarted, 1, host.EvStepFailed, 1, host.EvStepStarted, 2, host.EvStepCompleted, 2)
}

// With no retries left (maxAttempts 1), the interrupted attempt fails the
// step with the StepInterruptedError, and the run fails with it.
func TestStepInterruptedWithoutRetriesFailsTheStep(t *testing.T) {
	b := newCutter()
	f := newCutterKitchen(t, b)
	// abort-step's first step, untilAborted, has maxAttempts 1 and calls
	// count first.
	ri, driven := startBlocked(t, f, b, context.Background(), `{"mode":"abort-step","token":"once"}`, "once")
	f.restart()
	<-driven
	evs := stepEvents(t, f.h, ri.ID)
	wantKinds(t, evs, host.EvStepStarted, 1, host.EvStepFailed, 1)
	interruption(t, evs[1], 1, abi.InterruptHostClosed, false)
	info, err := f.h.Drive(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != store.StatusFailed {
		t.Fatalf("run %+v, want failed", info)
	}
	if err := info.Err(); !errors.Is(err, host.ErrStepInterrupted) {
		t.Fatalf("run error %v, want ErrStepInterrupted", err)
	}
	if n := len(b.get("once")); n != 1 {
		t.Errorf("side effect ran %d times, want 1", n)
	}
}

// A Drive whose context ends while its step runs records the attempt as
// interrupted (host_stopped) and its retry; the retry runs attempt 2.
func TestStepCutOffByDriverContextIsRecorded(t *testing.T) {
	b := newCutter()
	f := newCutterKitchen(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	ri, driven := startBlocked(t, f, b, ctx, `{"mode":"count","token":"deploy"}`, "deploy")
	cancel()
	if err := <-driven; !errors.Is(err, context.Canceled) {
		t.Fatalf("Drive: %v, want context.Canceled", err)
	}
	evs := stepEvents(t, f.h, ri.ID)
	wantKinds(t, evs, host.EvStepStarted, 1, host.EvStepFailed, 1)
	interruption(t, evs[1], 1, abi.InterruptHostStopped, true)
	// A Drive now does not run the step again before its backoff.
	info, err := f.h.Drive(context.Background(), ri.ID)
	if err != nil || len(info.Waiting) != 1 || info.Waiting[0].Kind != "step_retry" {
		t.Fatalf("drive before the retry: %+v %v", info, err)
	}
	k := &kitchen{fixture: f}
	if n := result[int](t, k.settle(ri.ID, 30*time.Second)); n != 2 {
		t.Errorf("result %d, want 2", n)
	}
	if calls := b.get("deploy"); len(calls) != 2 || calls[1].Attempt != 2 {
		t.Fatalf("side effect calls %+v", calls)
	}
}

// Cancelling a run while its step runs ends the attempt in the log as
// interrupted (cancelled), before run_cancelled: every attempt the log
// begins, it ends. Before, the log ended with the attempt open.
func TestStepInFlightWhenCancelledEndsInTheLog(t *testing.T) {
	b := newCutter()
	f := newCutterKitchen(t, b)
	ri, driven := startBlocked(t, f, b, context.Background(), `{"mode":"count","token":"deploy"}`, "deploy")
	info, err := f.h.Cancel(context.Background(), ri.ID, "")
	if err != nil || info.Status != store.StatusCancelled {
		t.Fatalf("cancel: %+v %v", info, err)
	}
	// The attempt runs to its end (a step is not cut off by a cancel);
	// what it returns no longer counts.
	close(b.release)
	if err := <-driven; err != nil {
		t.Fatalf("Drive after the cancel: %v", err)
	}
	evs := stepEvents(t, f.h, ri.ID)
	wantKinds(t, evs, host.EvStepStarted, 1, host.EvStepFailed, 1)
	interruption(t, evs[1], 1, abi.InterruptCancelled, false)
	all, err := f.h.Events(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := all[len(all)-1]; last.Kind != host.EvRunCancelled {
		t.Errorf("last event %s, want %s", last.Kind, host.EvRunCancelled)
	}
}

// The golden history of a deploy whose apply step was cut off by a crash
// decodes with the interruption in it, and replays to the same end.
func TestGoldenInterruptedDeployReplays(t *testing.T) {
	f := newFixture(t, nil)
	raw, err := os.ReadFile(filepath.Join("testdata", "histories", "deploy-interrupted.json"))
	if err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var evs []stepEvent
	for _, e := range hist.Events {
		if e.Kind != host.EvStepStarted && e.Kind != host.EvStepCompleted && e.Kind != host.EvStepFailed {
			continue
		}
		d := stepEvent{Kind: e.Kind}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, d)
	}
	wantKinds(t, evs, host.EvStepStarted, 1, host.EvStepCompleted, 1, host.EvStepStarted, 1, host.EvStepFailed, 1, host.EvStepStarted, 2, host.EvStepCompleted, 2)
	interruption(t, evs[3], 1, abi.InterruptCrashed, true)
	rep, err := f.h.CheckReplay(context.Background(), hist, guest(t, "examples/deploy"))
	if err != nil || rep.End != "completed" || rep.Ops != rep.RecordedOps {
		t.Fatalf("replay: %+v %v", rep, err)
	}
}
