package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// counter is a capability that tallies calls by key: the test's view of
// how often a side effect really ran.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) capability() host.Capability {
	return func(ctx context.Context, call host.CapabilityCall) (json.RawMessage, error) {
		var key string
		if err := json.Unmarshal(call.Input, &key); err != nil {
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.n[key]++
		return json.Marshal(c.n[key])
	}
}

func (c *counter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

type kitchen struct {
	*fixture
	count *counter
}

const kitchenDir = "host/testdata/guests/kitchen"

// newKitchen opens a host with the kitchen guest registered.
func newKitchen(t testing.TB, opts *host.Options) *kitchen {
	t.Helper()
	c := &counter{n: map[string]int{}}
	var o host.Options
	if opts != nil {
		o = *opts
	}
	o.Capabilities = map[string]host.Capability{"count": c.capability(), "secret": c.capability()}
	k := &kitchen{fixture: newFixture(t, &o), count: c}
	k.add(kitchenDir)
	return k
}

func (k *kitchen) run(input string) host.RunInfo {
	k.t.Helper()
	return k.call("kitchen", input)
}

// settle fires due timers until the run leaves its waits on timers.
func (k *kitchen) settle(id string, limit time.Duration) host.RunInfo {
	k.t.Helper()
	return settleOn(k.t, k.h, id, limit)
}

func result[T any](t testing.TB, ri host.RunInfo) T {
	t.Helper()
	var v T
	if ri.Status != store.StatusCompleted {
		t.Fatalf("run %s is %s, not completed: %+v", ri.ID, ri.Status, ri)
	}
	if err := json.Unmarshal(ri.Result, &v); err != nil {
		t.Fatalf("result %s: %v", ri.Result, err)
	}
	return v
}

type observation struct {
	Now      string
	Rand     int64
	Crypto   string
	MapOrder []string
	Select   []int
	Bodies   int
}

// Time, math/rand, crypto/rand, map order and select inside a guest are
// the same on replay, on a warm instance, on a fresh one after a restart,
// on one restored from a snapshot and on one reused after another run; and
// they differ between runs (the seed is per run). They are observed after
// a step, which a live run waits for and a replay does not.
func TestDeterminismAcrossReplay(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			maxWarm   int
			restart   bool
			preInit   int
			snapshots int // Options.Snapshots; -1 (replay) unless set
			// reuse: runs complete first, so that the pool holds
			// instances reset after use, which the run then starts on.
			reuse bool
		}{
			{"warm", 64, false, 0, -1, false},
			{"fresh-instance", -1, false, 0, -1, false},
			{"after-restart", 64, true, 0, -1, false},
			// Pre-initialised instances: a resume by replay on one sees
			// what the first activation saw.
			{"preinit-warm", 64, false, 2, -1, false},
			{"preinit-fresh-instance", -1, false, 2, -1, false},
			{"preinit-after-restart", -1, true, 2, -1, false},
			// Snapshots: taken when the run suspends unparked, or when
			// the host closes with it parked; restored on resume.
			{"snapshot", -1, false, 0, 1, false},
			{"snapshot-after-restart", -1, true, 0, 1, false},
			{"snapshot-of-parked-after-restart", 64, true, 0, 1, false},
			{"snapshot-preinit-after-restart", -1, true, 2, 1, false},
			// Reused instances: the run starts on one, and resumes on
			// one (its own, reset) or, after a restart, on a new one.
			{"reused", -1, false, 2, -1, true},
			{"reused-after-restart", -1, true, 2, -1, true},
			{"reused-warm", 64, false, 2, -1, true},
			{"reused-snapshot", -1, false, 2, 1, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				k := newKitchen(t, &host.Options{MaxWarm: tc.maxWarm, PreInit: tc.preInit, Snapshots: tc.snapshots})
				wantReuse := tc.reuse && strings.HasPrefix(engineFor(t).Name(), "wazero")
				if tc.reuse {
					for range 3 {
						if ri := k.run(`{"mode":"steps","n":2}`); ri.Status != store.StatusCompleted {
							t.Fatalf("warm-up run: %+v", ri)
						}
					}
					if err := k.h.WaitPreInit(context.Background()); err != nil { // resets finish in the background
						t.Fatal(err)
					}
					if st := k.h.InstanceStats(); (st.Reused > 0) != wantReuse {
						t.Fatalf("instances %+v after three runs; want reuse: %v", st, wantReuse)
					}
				}
				ri := k.run(`{"mode":"determinism-after-step","ms":300}`)
				if ri.Status != store.StatusWaiting {
					t.Fatalf("status %s", ri.Status)
				}
				var first observation
				if err := json.Unmarshal(ri.Progress, &first); err != nil {
					t.Fatal(err)
				}
				k.h.WaitSnapshots() // so that the resume restores it
				if tc.restart {
					k.restart()
				}
				ri = k.settle(ri.ID, 10*time.Second)
				// Only wazero instances are snapshotted.
				wantRestored := tc.snapshots > 0 && strings.HasPrefix(engineFor(t).Name(), "wazero")
				if st := k.h.SnapshotStats(); (st.Restored > 0) != wantRestored || st.Refused != 0 {
					t.Errorf("snapshots: %+v; want restores: %v, and none refused", st, wantRestored)
				}
				out := result[map[string]observation](t, ri)
				before, after := out["before"], out["after"]
				if mustJSON(t, before) != mustJSON(t, first) {
					t.Errorf("replay saw a different world:\n first  %+v\n replay %+v", first, before)
				}
				t0, _ := time.Parse(time.RFC3339Nano, before.Now)
				t1, _ := time.Parse(time.RFC3339Nano, after.Now)
				if d := t1.Sub(t0); d < 300*time.Millisecond {
					t.Errorf("guest clock moved %s across a 300ms sleep", d)
				}
				if before.Rand == after.Rand || before.Crypto == after.Crypto {
					t.Errorf("random values repeat within a run: %+v %+v", before, after)
				}
				if first.Bodies != 1 {
					t.Errorf("the run's first activation was body %d of its instance, want 1", first.Bodies)
				}
				// Another run gets other random values.
				other := k.run(`{"mode":"determinism","ms":1}`)
				var o observation
				if err := json.Unmarshal(other.Progress, &o); err != nil {
					t.Fatal(err)
				}
				if o.Crypto == first.Crypto || (tc.preInit == 0 && o.Rand == first.Rand) {
					t.Errorf("two runs drew the same random values: %+v", o)
				}
				if tc.preInit > 0 && o.Rand != first.Rand {
					// math/rand's global source is seeded while the
					// runtime initialises, which runs share with PreInit.
					t.Errorf("runs with pre-initialised instances drew different math/rand values: %+v %+v", first, o)
				}
			})
		}
	})
}

func TestRetriesAndFatal(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		// Two transient failures, then success: three attempts, each counted.
		ri := k.run(`{"mode":"flaky","token":"f1","fail":2}`)
		ri = k.settle(ri.ID, 10*time.Second)
		if got := result[map[string]any](t, ri); got["calls"] != float64(3) {
			t.Errorf("flaky: %v", got)
		}
		if n := k.count.get("f1"); n != 3 {
			t.Errorf("flaky step ran %d times, want 3", n)
		}
		// A FatalError stops at once.
		ri = k.settle(k.run(`{"mode":"fatal","token":"f2","fail":5}`).ID, 10*time.Second)
		if got := result[map[string]any](t, ri); got["type"] != abi.ErrTypeFatal {
			t.Errorf("fatal: %v", got)
		}
		if n := k.count.get("f2"); n != 1 {
			t.Errorf("fatal step ran %d times, want 1", n)
		}
		// Always failing: three attempts, then the error reaches the body.
		ri = k.settle(k.run(`{"mode":"flaky","token":"f3","fail":9}`).ID, 10*time.Second)
		if got := result[map[string]any](t, ri); got["failed"] != true || got["type"] != abi.ErrTypeError {
			t.Errorf("exhausted: %v", got)
		}
		if n := k.count.get("f3"); n != 3 {
			t.Errorf("exhausted step ran %d times, want 3", n)
		}
		// A panicking step is a failed attempt, retried.
		ri = k.settle(k.run(`{"mode":"panic-step","token":"f4","fail":1}`).ID, 10*time.Second)
		if got := result[map[string]any](t, ri); got["calls"] != float64(2) {
			t.Errorf("panic-step: %v", got)
		}
	})
}

// RetryableError{retryAfter} waits durably: the run waits on a step retry
// timer, which survives a restart.
func TestRetryAfterWaitsDurably(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		ri := k.run(`{"mode":"retry-after","token":"r1","fail":1}`)
		if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].Kind != "step_retry" {
			t.Fatalf("want a wait on a step retry: %+v", ri)
		}
		if d := ri.Waiting[0].Until.Sub(time.Now()); d < 100*time.Millisecond || d > 400*time.Millisecond {
			t.Errorf("retry in %s, want about 300ms", d)
		}
		k.restart()
		ri = k.settle(ri.ID, 10*time.Second)
		if got := result[map[string]any](t, ri); got["calls"] != float64(2) {
			t.Errorf("retry-after: %v", got)
		}
	})
}

func TestSleepSurvivesRestart(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		k.add("examples/remind")
		ri := k.call("remind", `{"note":"n1","delay":"1s"}`)
		if ri.Status != store.StatusWaiting {
			t.Fatalf("%+v", ri)
		}
		k.restart()
		// Not yet due: nothing fires.
		if n, err := k.h.FireDue(context.Background(), time.Now(), nil); err != nil || n != 0 {
			t.Fatalf("fired %d early (%v)", n, err)
		}
		time.Sleep(time.Until(*ri.Waiting[0].Until))
		ri = k.settle(ri.ID, 10*time.Second)
		if got := result[map[string]string](t, ri); got["reminder"] != "n1" {
			t.Errorf("%v", got)
		}
		evs, _ := k.h.Events(context.Background(), ri.ID)
		fired := 0
		for _, e := range evs {
			if e.Kind == host.EvTimerFired {
				fired++
			}
		}
		if fired != 1 {
			t.Errorf("timer fired %d times", fired)
		}
	})
}

func TestRaceAskAgainstSleep(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		// The sleep wins.
		ri := k.settle(k.run(`{"mode":"race","ms":100}`).ID, 10*time.Second)
		if ri.Status != store.StatusCompleted {
			ri = k.settle(ri.ID, 10*time.Second)
		}
		if got := result[string](t, ri); got != "timed out" {
			t.Errorf("sleep should win: %q", got)
		}
		// The question is withdrawn when the run ends.
		qs, _ := k.h.Questions(context.Background(), true)
		if len(qs) != 0 {
			t.Errorf("open questions after the run ended: %+v", qs)
		}
		// The answer wins.
		ri = k.run(`{"mode":"race","ms":600000}`)
		var askID string
		for _, w := range ri.Waiting {
			if w.Kind == "ask" {
				askID = w.AskID
			}
		}
		ri, err := k.h.AnswerAsk(context.Background(), askID, host.Answer{OptionID: "yes"})
		if err != nil {
			t.Fatal(err)
		}
		if got := result[string](t, ri); got != "answered yes" {
			t.Errorf("answer should win: %q", got)
		}
		if n, ok, _ := k.h.Store().NextTimer(context.Background()); ok && n.RunID == ri.ID {
			t.Errorf("the losing sleep's timer is still set")
		}
	})
}

func TestHooks(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		ctx := context.Background()
		ri := k.run(`{"mode":"hooks","token":"orders-1","n":2,"fail":1}`)
		if ri.Status != store.StatusWaiting || ri.Waiting[0].Kind != "hook" || ri.Waiting[0].Token != "orders-1" {
			t.Fatalf("%+v", ri)
		}
		// Another run asking for the same token sees the conflict.
		other := k.run(`{"mode":"hooks","token":"orders-1"}`)
		if got := result[map[string]string](t, other); got["conflict"] != ri.ID || got["type"] != abi.ErrTypeHookConflict {
			t.Errorf("conflict: %v", got)
		}
		if _, err := k.h.ResumeHook(ctx, "orders-1", json.RawMessage(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
		k.restart()
		ri, err := k.h.ResumeHook(ctx, "orders-1", json.RawMessage(`{"n":2}`))
		if err != nil {
			t.Fatal(err)
		}
		got := result[map[string]any](t, ri)
		if mustJSON(t, got["payloads"]) != `[{"n":1},{"n":2}]` || got["afterDispose"] != abi.ErrTypeHookDisposed {
			t.Errorf("hooks: %v", got)
		}
		// Disposed, so the token is free and unknown.
		if _, err := k.h.ResumeHook(ctx, "orders-1", nil); !errors.Is(err, host.ErrUnknownHook) {
			t.Errorf("resume after dispose: %v", err)
		}
		// A random token is at least 128 bits.
		ri = k.run(`{"mode":"hooks","n":1}`)
		var p map[string]string
		json.Unmarshal(ri.Progress, &p)
		if tok := p["token"]; len(strings.TrimPrefix(tok, "hook_")) < 26 {
			t.Errorf("random token %q is short", tok)
		}
		// Auto-dispose at the end of a run: the token is free again.
		hold := k.run(`{"mode":"hold-hook","token":"held"}`)
		if _, err := k.h.Cancel(ctx, hold.ID, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := k.h.ResumeHook(ctx, "held", nil); !errors.Is(err, host.ErrUnknownHook) {
			t.Errorf("token of a cancelled run: %v", err)
		}
		again := k.run(`{"mode":"hooks","token":"held","n":1}`)
		if again.Status != store.StatusWaiting {
			t.Errorf("token not released: %+v", again)
		}
		if _, err := k.h.ResumeHook(ctx, "held", json.RawMessage(`not json`)); !errors.Is(err, host.ErrBadInput) {
			t.Errorf("bad payload: %v", err)
		}
	})
}

func TestAsks(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		ctx := context.Background()
		ri := k.run(`{"mode":"two-asks"}`)
		qs, err := k.h.Questions(ctx, true)
		if err != nil || len(qs) != 2 {
			t.Fatalf("want two open questions: %+v %v", qs, err)
		}
		// Unknown and wrong answers change nothing.
		if _, err := k.h.AnswerAsk(ctx, "ask_nope", host.Answer{OptionID: "a"}); !errors.Is(err, host.ErrUnknownAsk) {
			t.Errorf("unknown: %v", err)
		}
		if _, err := k.h.AnswerAsk(ctx, qs[0].ID, host.Answer{OptionID: "zzz"}); !errors.Is(err, host.ErrBadAnswer) {
			t.Errorf("bad option: %v", err)
		}
		if _, err := k.h.AnswerAsk(ctx, qs[0].ID, host.Answer{Text: "free"}); !errors.Is(err, host.ErrBadAnswer) {
			t.Errorf("text to an options question: %v", err)
		}
		before, _ := k.h.Events(ctx, ri.ID)
		if _, err := k.h.AnswerAsk(ctx, qs[0].ID, host.Answer{OptionID: "a"}); err != nil {
			t.Fatal(err)
		}
		if _, err := k.h.AnswerAsk(ctx, qs[0].ID, host.Answer{OptionID: "a"}); !errors.Is(err, host.ErrAskClosed) {
			t.Errorf("answered twice: %v", err)
		}
		mid, _ := k.h.Events(ctx, ri.ID)
		// The body waits for both: the first answer is recorded, and no
		// activation runs for it.
		if len(mid) != len(before)+1 {
			t.Errorf("first answer added %d events, want 1", len(mid)-len(before))
		}
		ri, err = k.h.AnswerAsk(ctx, qs[1].ID, host.Answer{OptionID: "b"})
		if err != nil {
			t.Fatal(err)
		}
		if got := result[[]string](t, ri); mustJSON(t, got) != `["a","b"]` {
			t.Errorf("%v", got)
		}
		// A withdrawn question resolves as cancelled, once.
		ri = k.run(`{"mode":"ask-text"}`)
		if ri, err = k.h.WithdrawAsk(ctx, ri.Waiting[0].AskID); err != nil {
			t.Fatal(err)
		}
		if got := result[abi.AskAnswer](t, ri); got.Status != abi.AnswerCancelled {
			t.Errorf("withdrawn: %+v", got)
		}
		// Text answers.
		ri = k.run(`{"mode":"ask-text"}`)
		if ri, err = k.h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{Text: "Ada"}); err != nil {
			t.Fatal(err)
		}
		if got := result[abi.AskAnswer](t, ri); got.Status != abi.AnswerAnswered || got.Text != "Ada" {
			t.Errorf("%+v", got)
		}
		// A caller nobody stands behind: unavailable at once.
		ri, err = k.h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"ask-text"}`), &host.CallOptions{NoAsk: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := result[abi.AskAnswer](t, ri); got.Status != abi.AnswerUnavailable {
			t.Errorf("%+v", got)
		}
	})
}

func TestProgressMetadataAndFailures(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, &host.Options{BaseURL: "https://flows.invalid"})
		if got := result[map[string]int](t, k.run(`{"mode":"progress-null"}`)); got["step"] != 2 {
			t.Errorf("null result should fall back to the last progress: %v", got)
		}
		ri, err := k.h.Call(context.Background(), "kitchen", json.RawMessage(`{"mode":"metadata"}`), &host.CallOptions{RunID: "meta-run-1"})
		if err != nil {
			t.Fatal(err)
		}
		md := result[abi.Metadata](t, ri)
		if md.WorkflowName != "kitchen" || md.WorkflowRunID != "meta-run-1" || md.URL != "https://flows.invalid/runs/meta-run-1" {
			t.Errorf("%+v", md)
		}
		if ts, err := time.Parse(time.RFC3339Nano, md.WorkflowStartedAt); err != nil || time.Since(ts) > time.Minute {
			t.Errorf("startedAt %q", md.WorkflowStartedAt)
		}
		if _, err := k.h.Call(context.Background(), "kitchen", json.RawMessage(`{"mode":"metadata"}`), &host.CallOptions{RunID: "meta-run-1"}); !errors.Is(err, host.ErrRunExists) {
			t.Errorf("duplicate run id: %v", err)
		}
		for mode, typ := range map[string]string{"fail": abi.ErrTypeError, "fail-typed": "QuotaError", "panic": "Panic"} {
			ri := k.run(`{"mode":"` + mode + `"}`)
			if ri.Status != store.StatusFailed || ri.Error == nil || ri.Error.Type != typ {
				t.Errorf("%s: %+v", mode, ri)
			}
		}
		// A refused op, caught by the body, replays the same way.
		k2 := newKitchen(t, &host.Options{MaxWarm: -1})
		ri = k2.settle(k2.run(`{"mode":"bad-ask"}`).ID, 10*time.Second)
		if got := result[string](t, ri); !strings.Contains(got, "prompt is required") {
			t.Errorf("bad-ask: %q", got)
		}
	})
}

func TestStepsInParallelAndSequence(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		if got := result[int](t, k.run(`{"mode":"steps","n":20}`)); got != 190 {
			t.Errorf("steps: %d", got)
		}
		if got := result[int](t, k.run(`{"mode":"parallel","n":20}`)); got != 190 {
			t.Errorf("parallel: %d", got)
		}
	})
}

// The Go SDK sends a step whose input is an integer first without its
// input, asking for the recorded result (the if-recorded flag), and again
// with it when the step is new: each step's input is recorded all the
// same, whether the run's instance stays parked or every activation
// replays.
func TestScalarStepInputsRecorded(t *testing.T) {
	for _, maxWarm := range []int{64, -1} {
		t.Run(fmt.Sprintf("maxWarm=%d", maxWarm), func(t *testing.T) {
			k := newKitchen(t, &host.Options{MaxWarm: maxWarm})
			ri := k.run(`{"mode":"steps","n":4}`)
			if got := result[int](t, ri); got != 6 {
				t.Fatalf("steps: %d", got)
			}
			var inputs []string
			for _, e := range exportHistory(t, k.fixture, ri.ID).Events {
				if e.Kind != host.EvStepStarted {
					continue
				}
				var d struct{ Input json.RawMessage }
				if err := json.Unmarshal(e.Data, &d); err != nil {
					t.Fatal(err)
				}
				inputs = append(inputs, string(d.Input))
			}
			if got := strings.Join(inputs, " "); got != "0 1 2 3" {
				t.Errorf("recorded step inputs %q, want 0 1 2 3", got)
			}
		})
	}
}

func TestCapabilities(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		if got := result[int](t, k.run(`{"mode":"count","token":"c"}`)); got != 1 {
			t.Errorf("count: %d", got)
		}
		got := result[map[string]string](t, k.run(`{"mode":"capability-not-listed"}`))
		if got["type"] != abi.ErrTypeBadRequest || !strings.Contains(got["message"], "does not list capability") {
			t.Errorf("%v", got)
		}
		if k.count.get("1") != 0 {
			t.Errorf("an unlisted capability ran")
		}
	})
}

// A guest written from the ABI spec alone, awaiting with the block flag:
// every activation ends its instance and the next replays from the start.
func TestBlockingGuestFromTheSpec(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		k.add("host/testdata/guests/rawabi")
		ri := k.call("rawabi", `{"n":3}`)
		ri = k.settle(ri.ID, 10*time.Second)
		if got := result[map[string]int](t, ri); got["total"] != 12 {
			t.Fatalf("total %v, want 2+4+6", got)
		}
		evs, _ := k.h.Events(context.Background(), ri.ID)
		activations := 0
		for _, e := range evs {
			if e.Kind == host.EvRunResumed {
				activations++
			}
		}
		// One to start, and one after each step and each sleep.
		if activations != 7 {
			t.Errorf("%d activations, want 7", activations)
		}
		// The history replays, blocking awaits and all.
		var buf bytes.Buffer
		if err := k.h.ExportHistory(context.Background(), ri.ID, &buf); err != nil {
			t.Fatal(err)
		}
		hist, err := host.ReadHistory(&buf)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := k.h.CheckReplay(context.Background(), hist, nil)
		if err != nil || rep.End != "completed" || rep.Ops != rep.RecordedOps {
			t.Errorf("replay: %+v %v", rep, err)
		}
	})
}

// A guest cannot read or write host files, and its sleeps are virtual.
func TestSandbox(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, nil)
		got := result[map[string]any](t, k.run(`{"mode":"sandbox"}`))
		if got["read"] != true || got["write"] != true || got["slept"] != "1h0m0s" {
			t.Errorf("%v", got)
		}
		if _, err := os.Stat("/tmp/sandflow-escape"); err == nil {
			t.Errorf("the guest wrote a host file")
		}
	})
}

// The built-in http.fetch reaches, from a step, only the hosts the
// manifest allows, and never a redirect elsewhere.
func TestFetchCapability(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/hello":
				fmt.Fprintf(w, "hello %s", r.Header.Get("X-Step"))
			case "/away":
				http.Redirect(w, r, "http://localhost.invalid/x", http.StatusFound)
			case "/big":
				w.Write(bytes.Repeat([]byte("z"), 4096))
			}
		}))
		defer srv.Close()
		k := newKitchen(t, nil)
		m := manifest(t, kitchenDir)
		m.Name, m.Capabilities, m.HTTPAllow = "fetcher", []string{"http.fetch"}, []string{"127.0.0.1"}
		m.Limits = &host.ManifestLimits{PayloadBytes: 4096}
		if _, err := k.h.AddPlugin(context.Background(), guest(t, kitchenDir), m); err != nil {
			t.Fatal(err)
		}
		fetch := func(tool, url string) map[string]any {
			t.Helper()
			return result[map[string]any](t, k.call(tool, `{"mode":"fetch","text":"`+url+`"}`))
		}
		got := fetch("fetcher", srv.URL+"/hello")
		if got["status"] != float64(200) || !strings.HasPrefix(got["body"].(string), "hello run_") {
			t.Errorf("allowed host: %v", got)
		}
		for name, tc := range map[string]struct{ tool, url, mention string }{
			"not allowed":       {"fetcher", "http://localhost.invalid/", "httpAllow"},
			"redirect away":     {"fetcher", srv.URL + "/away", "redirect"},
			"too big":           {"fetcher", srv.URL + "/big", "over the limit"},
			"not a web URL":     {"fetcher", "file:///etc/passwd", "not an http"},
			"capability absent": {"kitchen", srv.URL + "/hello", "does not list capability"},
		} {
			got := fetch(tc.tool, tc.url)
			if got["error"] == nil || !strings.Contains(got["message"].(string), tc.mention) {
				t.Errorf("%s: %v", name, got)
			}
		}
		bad := manifest(t, kitchenDir)
		bad.Name, bad.HTTPAllow = "nofetch", []string{"example.com"}
		if _, err := k.h.AddPlugin(context.Background(), guest(t, kitchenDir), bad); !errors.Is(err, host.ErrBadManifest) {
			t.Errorf("httpAllow without the capability: %v", err)
		}
	})
}

// Parked instances stay within MaxWarmBytes: past it the least recently
// parked is closed, and its run resumes by replay, to the same result.
func TestParkedMemoryBudget(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		k := newKitchen(t, &host.Options{MaxWarmBytes: -1})
		a := k.run(`{"mode":"determinism","ms":300}`)
		k.run(`{"mode":"determinism","ms":300}`)
		n, two := k.h.Parked()
		if n != 2 || two == 0 {
			t.Fatalf("without a budget: %d parked, %d bytes", n, two)
		}
		// A budget of one instance and a bit: the first run's is evicted
		// when a third parks.
		k = newKitchen(t, &host.Options{MaxWarmBytes: int64(two/2 + two/4)})
		a = k.run(`{"mode":"determinism","ms":300}`)
		if n, _ := k.h.Parked(); n != 1 {
			t.Fatalf("one run: %d parked", n)
		}
		k.run(`{"mode":"determinism","ms":300}`)
		if n, b := k.h.Parked(); n != 1 || b > uint64(two/2+two/4) {
			t.Fatalf("over the budget: %d parked, %d bytes", n, b)
		}
		ri := k.settle(a.ID, 10*time.Second)
		out := result[map[string]observation](t, ri)
		if out["before"].Crypto == "" || out["before"].Crypto == out["after"].Crypto {
			t.Errorf("the evicted run, resumed by replay: %+v", out)
		}
	})
}
