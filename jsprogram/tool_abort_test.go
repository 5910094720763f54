package jsprogram_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

const abortTool = `defineWorkflowTool({ description: "waits, and unwinds when aborted", inputSchema: { type: "object" },
  async execute({ ignore }, ctx) {
    "use workflow";
    if (ignore) {
      await sleep("1h");
      return { slept: true };
    }
    const question = ctx.ask({ prompt: "go on?" });
    const aborted = new Promise((resolve) => ctx.abortSignal.addEventListener("abort", resolve));
    await Promise.race([question, aborted, sleep("1h")]);
    const answer = await question;
    if (!ctx.abortSignal.aborted) return { done: true };
    const late = await ctx.ask({ prompt: "asked while unwinding" });
    await cleanup(ctx.abortSignal.reason.reason);
    return { answer: answer.status, late: late.status, reason: ctx.abortSignal.reason.name + ": " + ctx.abortSignal.reason.message };
  } });
async function cleanup(why) { "use step"; console.log("side effect: cleaned up after " + why); }
`

// Abort: the body's abortSignal fires, its open question is withdrawn as
// cancelled (and so is one asked while unwinding), a cleanup step runs
// once, and the run ends cancelled with the body's result kept. Across a
// restart the history replays. A body that ignores the signal is
// cancelled when the grace period ends.
func TestToolAbort(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddJS("unwinds", abortTool)
	ctx := context.Background()

	ri := f.Call("unwinds", `{}`)
	waitsOn(t, ri, "ask", "sleep")
	f.Restart()
	if _, err := f.H.Abort(ctx, ri.ID, "task_cancel"); err != nil {
		t.Fatal(err)
	}
	testhost.WaitUntil(t, "the run to unwind", func() bool { ri, _ = f.H.Run(ctx, ri.ID); return ri.Status.Terminal() })
	if ri.Status != store.StatusCancelled || ri.Aborted != "task_cancel" {
		t.Fatalf("after the abort: %s %q %+v", ri.Status, ri.Aborted, ri.Error)
	}
	kept := keptResult(t, f.H, ri.ID)
	if kept != `{"answer":"cancelled","late":"cancelled","reason":"AbortError: the call was aborted (task_cancel)"}` {
		t.Errorf("the body's result: %s", kept)
	}
	if n := strings.Count(output(t, f.H, ri.ID), "side effect: cleaned up after task_cancel"); n != 1 {
		t.Errorf("cleanup ran %d times", n)
	}
	if _, err := f.H.Abort(ctx, ri.ID, "again"); !errors.Is(err, host.ErrRunEnded) {
		t.Errorf("an abort after the end: %v", err)
	}
	replaysWhole(t, f.H, ri.ID)

	// Ignored: cancelled at the end of the grace period, not before.
	ri = f.Call("unwinds", `{"ignore":true}`)
	waitsOn(t, ri, "sleep")
	if _, err := f.H.Abort(ctx, ri.ID, "turn_ended"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.H.FireDue(ctx, time.Now().Add(29*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if ri, _ = f.H.Run(ctx, ri.ID); ri.Status != store.StatusWaiting {
		t.Fatalf("cancelled before the grace period ended: %s", ri.Status)
	}
	if _, err := f.H.FireDue(ctx, time.Now().Add(31*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if ri, _ = f.H.Run(ctx, ri.ID); ri.Status != store.StatusCancelled || ri.Aborted != "turn_ended" {
		t.Fatalf("after the grace period: %s %q", ri.Status, ri.Aborted)
	}
}

// A serve task's stretch is aborted: the waiting call ends cancelled, the
// body catches the abort and goes back to receive(), so the task stays
// available past the grace period; the next call gets a fresh signal and
// is answered.
func TestToolServeAbort(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddJS("patient", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    for (;;) {
      const { input, abortSignal } = await receive();
      try {
        if (input.slow) {
          await Promise.race([sleep("1h"), new Promise((_, reject) => abortSignal.addEventListener("abort", () => reject(abortSignal.reason)))]);
        }
        ctx.reply({ done: input, aborted: abortSignal.aborted });
      } catch (error) {
        if (!abortSignal.aborted) throw error; // cancelled: wait for the next call
      }
    }
  } });`)
	ctx := context.Background()
	ri := f.Call("patient", `{"slow":true}`)
	waitsOn(t, ri, "sleep")
	if _, err := f.H.Abort(ctx, ri.ID, "task_cancel"); err != nil {
		t.Fatal(err)
	}
	testhost.WaitUntil(t, "the body to go back to receive", func() bool {
		ri, _ = f.H.Run(ctx, ri.ID)
		for _, w := range ri.Waiting {
			if w.Kind == "receive" {
				return true
			}
		}
		return false
	})
	if ri.Working() || ri.Calls[0].Status != "cancelled" {
		t.Errorf("the aborted call: %+v", ri.Calls)
	}
	if _, err := f.H.FireDue(ctx, time.Now().Add(time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.H.SendCall(ctx, ri.ID, "", []byte(`{"n":2}`)); err != nil {
		t.Fatalf("the task after the grace period: %v", err)
	}
	ri, _ = f.H.Drive(ctx, ri.ID)
	if len(ri.Calls) != 2 || ri.Calls[1].Status != "completed" || string(ri.Calls[1].Output) != `{"done":{"n":2},"aborted":false}` {
		t.Errorf("the next call: %+v", ri.Calls)
	}
}

// send(message, { signal }): a turn sent with the run's abort signal ends
// cancelled when the run is aborted while it runs (the backend's context
// is cancelled, and no result is recorded from it); one sent after the
// abort is never sent; one sent without the signal runs to its end. A
// signal that is not the run's is refused.
func TestToolAgentSendSignal(t *testing.T) {
	a := newAgents(echo)
	a.gate = make(chan struct{})
	f := newFixture(t, jsprogram.Limits{}, a)
	f.AddJS("signalled", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async execute(input, ctx) {
    "use workflow";
    const s = ctx.abortSignal;
    const q = ctx.ask({ prompt: "still there?" }, { signal: s });
    const tied = await (await ctx.agent("echo").send("tied", { signal: s })).result();
    const free = ctx.agent("echo").send("free");
    const late = await (await ctx.agent("echo").send("late", { signal: s })).result();
    let refused = "";
    try { await ctx.agent("echo").send("x", { signal: {} }); } catch (e) { refused = e.message; }
    try { ctx.ask({ prompt: "x" }, { signal: 1 }); } catch (e) { refused += " | " + e.message; }
    const asked = (await q).status, askedLate = (await ctx.ask({ prompt: "late?" }, { signal: s })).status;
    return { tied: tied.status, late: late.status, free: (await (await free).result()).status, asked, askedLate, refused };
  } });`)
	ctx := context.Background()
	ri, err := f.H.Start(ctx, "signalled", json.RawMessage(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	driven := make(chan error, 1)
	go func() { _, err := f.H.Drive(ctx, ri.ID); driven <- err }()
	select {
	case <-a.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the turn never started")
	}
	if _, err := f.H.Abort(ctx, ri.ID, "task_cancel"); err != nil {
		t.Fatal(err)
	}
	testhost.WaitUntil(t, "the free turn to start", func() bool { total, _ := a.turns(); return total == 2 })
	close(a.gate)
	if err := <-driven; err != nil {
		t.Fatal(err)
	}
	testhost.WaitUntil(t, "the run to end", func() bool { ri, _ = f.H.Run(ctx, ri.ID); return ri.Status.Terminal() })
	kept := keptResult(t, f.H, ri.ID)
	want := `{"tied":"cancelled","late":"cancelled","free":"completed","asked":"cancelled","askedLate":"cancelled",` +
		`"refused":"send: signal must be ctx.abortSignal or a call's abortSignal | ctx.ask: signal must be ctx.abortSignal or a call's abortSignal"}`
	if ri.Status != store.StatusCancelled || kept != want {
		t.Errorf("%s with %s\nwant %s", ri.Status, kept, want)
	}
	if total, _ := a.turns(); total != 2 {
		t.Errorf("%d turns sent, want 2 (the tied one and the free one)", total)
	}
	replaysWhole(t, f.H, ri.ID)
}

// keptResult is what an aborted run's body ended with, kept in its
// run_cancelled event.
func keptResult(t *testing.T, h *host.Host, id string) string {
	t.Helper()
	evs, err := h.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var kept string
	for _, e := range evs {
		if e.Kind == host.EvRunCancelled {
			var d struct{ Result json.RawMessage }
			_ = json.Unmarshal(e.Data, &d)
			kept = string(d.Result)
		}
	}
	return kept
}

// replaysWhole checks that a run's exported history replays to its end.
func replaysWhole(t *testing.T, h *host.Host, id string) {
	t.Helper()
	ctx := context.Background()
	var buf strings.Builder
	if err := h.ExportHistory(ctx, id, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := h.CheckReplay(ctx, hist, nil); err != nil || rep.Ops != rep.RecordedOps {
		t.Errorf("replay: %+v %v", rep, err)
	}
}

const stepSignalTool = `defineWorkflowTool({ description: "passes its abort signal to steps", inputSchema: { type: "object" },
  async execute(input, ctx) {
    "use workflow";
    const inFlight = await waitAbort(ctx.abortSignal);
    const after = await peek(1, ctx.abortSignal);
    return { inFlight, after };
  } });
async function waitAbort(signal) {
  "use step";
  const end = Date.now() + 20000;
  while (!signal.aborted && Date.now() < end) {}
  return { aborted: signal.aborted, reason: signal.aborted ? signal.reason.reason : null };
}
async function peek(n, signal) {
  "use step";
  let threw = "";
  try { signal.throwIfAborted(); } catch (e) { threw = e.name; }
  return { n, aborted: signal.aborted, threw, reason: signal.reason.reason };
}
`

// TestToolStepSeesAbort: a step given ctx.abortSignal sees the run's
// abort while it runs (a step that receives the signal sees the abort), and a step given it after the abort gets it aborted.
func TestToolStepSeesAbort(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddJS("stepsignal", stepSignalTool)
	ctx := context.Background()
	done := make(chan host.RunInfo, 1)
	go func() { done <- f.Call("stepsignal", `{}`) }()
	var id string
	testhost.WaitUntil(t, "the run to start its step", func() bool {
		runs, err := f.H.Runs(ctx, store.RunFilter{})
		if err != nil || len(runs) == 0 {
			return false
		}
		id = runs[0].ID
		evs, err := f.H.Events(ctx, id)
		for _, e := range evs {
			if e.Kind == host.EvStepStarted {
				return err == nil
			}
		}
		return false
	})
	if _, err := f.H.Abort(ctx, id, "task_cancel"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not return")
	}
	var ri host.RunInfo
	testhost.WaitUntil(t, "the run to unwind", func() bool {
		ri, _ = f.H.Run(ctx, id)
		return ri.Status.Terminal()
	})
	if ri.Status != store.StatusCancelled {
		t.Fatalf("after the abort: %s %+v", ri.Status, ri.Error)
	}
	want := `{"inFlight":{"aborted":true,"reason":"task_cancel"},"after":{"n":1,"aborted":true,"threw":"AbortError","reason":"task_cancel"}}`
	if got := keptResult(t, f.H, id); got != want {
		t.Errorf("the body's result: %s\nwant %s", got, want)
	}
}
