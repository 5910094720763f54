package jsprogram_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

// Review cases for serve tools (receive, ctx.reply) and the step
// compiler's stand-ins. Cases marked FINDING fail against the code as it
// is; the others pass and add coverage.

// reviewStart starts a run of a tool and drives it until it waits or ends.
func reviewStart(t *testing.T, f *fixture, tool, input string) host.RunInfo {
	t.Helper()
	ri, err := f.h.Start(context.Background(), tool, json.RawMessage(input), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f.settle(ri)
}

// reviewSend sends a call to a serve run (without driving it).
func reviewSend(t *testing.T, f *fixture, runID, callID, input string) {
	t.Helper()
	if _, err := f.h.SendCall(context.Background(), runID, callID, json.RawMessage(input)); err != nil {
		t.Fatalf("SendCall %s: %v", input, err)
	}
}

// reviewCheckReplay exports the run's history and checks that the tool
// replays it op for op.
func reviewCheckReplay(t *testing.T, f *fixture, runID string) {
	t.Helper()
	ctx := context.Background()
	var buf strings.Builder
	if err := f.h.ExportHistory(ctx, runID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := f.h.CheckReplay(ctx, hist, nil)
	if err != nil || rep.Ops != rep.RecordedOps {
		t.Errorf("replay check of %s: %+v %v", runID, rep, err)
	}
}

func callOutputs(ri host.RunInfo) []string {
	var out []string
	for _, c := range ri.Calls {
		out = append(out, c.Status+" "+string(c.Output))
	}
	return out
}

const reviewSyncReceive = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    const first = await receive();
    await sleep("1h");                       // call 1 arrives during the sleep
    const next = receive();                  // call 1 is already queued
    const n0 = ctx.reply({ for: first.input.n });
    const second = await next;
    const n1 = ctx.reply({ for: second.input.n });
    return { n0, n1 };
  } });`

// Fixed finding, as first reported: ctx.reply answers a call the body has not received. The body
// calls receive() for a call that is already queued and, before the
// promise resolves (it resolves in a later microtask), replies for the
// call it holds. The behaviour ("A call counts as received once its promise
// resolves ... The next ctx.reply() answers it") says the reply answers
// call 0 only and the later reply answers call 1. Got: the first reply
// answers both calls (n0 = 2), call 1's output is the answer meant for
// call 0, and the reply the body makes after reading call 1 answers
// nothing (n1 = 0). The host counts a call as received when a receive op
// exists for it (runState.received(), host/state.go; the count in
// wfInstance.perform's OpReply case, host/workflow.go), while the shim
// resolves receive()'s promise a microtask later (toolshim.js receive:
// apply(then, future(...), ...)); the shim's own count (waiting) also
// disagrees with the host's, so ctx.ask is allowed for call 1 although
// the host already answered it.
func TestReviewServeReplyBeforeQueuedReceiveResolves(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.addSource("sync-receive", reviewSyncReceive)
	ri := reviewStart(t, f, "sync-receive", `{"n":0}`)
	waitsOn(t, ri, "sleep")
	reviewSend(t, f, ri.ID, "c1", `{"n":1}`)
	ri = f.fire(ri.ID, 2*time.Hour)
	ri = f.settle(ri)
	got := strings.Join(callOutputs(ri), " | ")
	want := `completed {"for":0} | completed {"for":1}`
	if got != want || string(ri.Result) != `{"n0":1,"n1":1}` {
		t.Errorf("calls %s, result %s (%s)\nwant calls %s, result {\"n0\":1,\"n1\":1}", got, ri.Result, ri.Status, want)
	}
}

const reviewRace = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    const log = [];
    const first = await receive();
    log.push("got " + first.input.n);
    // A race the timer wins: the receive() promise is kept.
    const pending = receive();
    const w = await Promise.race([pending.then(() => "call"), sleep("1h").then(() => "timer")]);
    log.push("race " + w);
    log.push("reply " + ctx.reply({ for: first.input.n, log: log.slice() }));
    const second = await pending;
    log.push("got " + second.input.n);
    // A race the call wins.
    const w2 = await Promise.race([receive().then((c) => "call " + c.input.n), sleep("1h").then(() => "timer")]);
    log.push("race " + w2);
    log.push("reply " + ctx.reply({ for: second.input.n, log: log.slice() }));
    return log;
  } });`

// A Promise.race over receive() and a sleep, both ways round, replayed
// cold after restarts between the calls, and checked against its history:
// each call gets the reply made after it was read, and the history
// replays op for op.
func TestReviewServeRaceAcrossRestarts(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.addSource("race", reviewRace)
	ctx := context.Background()
	ri := reviewStart(t, f, "race", `{"n":0}`)
	waitsOn(t, ri, "receive", "sleep")
	ri = f.fire(ri.ID, 2*time.Hour) // the timer wins
	waitsOn(t, ri, "receive")
	if got := callOutputs(ri); len(got) != 1 || got[0] != `completed {"for":0,"log":["got 0","race timer"]}` {
		t.Fatalf("call 0: %v", got)
	}
	f.restart()
	reviewSend(t, f, ri.ID, "c1", `{"n":1}`)
	ri = f.settle(ri)
	waitsOn(t, ri, "receive", "sleep")
	f.restart()
	reviewSend(t, f, ri.ID, "c2", `{"n":2}`)
	ri = f.settle(ri)
	if ri.Status != store.StatusCompleted {
		t.Fatalf("run %s: %+v", ri.Status, ri.Error)
	}
	got := strings.Join(callOutputs(ri), " | ")
	want := `completed {"for":0,"log":["got 0","race timer"]} | ` +
		`completed {"for":1,"log":["got 0","race timer","reply 1","got 1","race call 2"]} | ` +
		`completed {"for":1,"log":["got 0","race timer","reply 1","got 1","race call 2"]}`
	if got != want {
		t.Errorf("calls\n%s\nwant\n%s", got, want)
	}
	reviewCheckReplay(t, f, ri.ID)
	if _, err := f.h.Run(ctx, ri.ID); err != nil {
		t.Fatal(err)
	}
}

const reviewQueued = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    const first = await receive();
    await sleep("1h");
    if (first.input.fail) throw new Error("failing with calls queued");
    return { end: first.input.n };
  } });`

// A body that returns, or throws, with calls queued that it never
// received: the calls are answered with the result, or failed with the
// error, and the task ends; a call after the end is refused.
func TestReviewServeEndsWithQueuedCalls(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.addSource("queued", reviewQueued)
	ctx := context.Background()
	for _, tc := range []struct{ input, want string }{
		{`{"n":0}`, `completed {"end":0} | completed {"end":0} | completed {"end":0}`},
		{`{"n":0,"fail":true}`, `failed  | failed  | failed `},
	} {
		ri := reviewStart(t, f, "queued", tc.input)
		reviewSend(t, f, ri.ID, "", `{"n":1}`)
		reviewSend(t, f, ri.ID, "", `{"n":2}`)
		ri = f.fire(ri.ID, 2*time.Hour)
		if got := strings.Join(callOutputs(ri), " | "); got != tc.want || ri.Working() {
			t.Errorf("%s: calls %s (working %v), want %s", tc.input, got, ri.Working(), tc.want)
		}
		for _, c := range ri.Calls {
			if strings.Contains(tc.input, "fail") && (c.Error == nil || c.Error.Message != "failing with calls queued") {
				t.Errorf("%s: call %d error %+v", tc.input, c.Index, c.Error)
			}
		}
		if _, err := f.h.SendCall(ctx, ri.ID, "", json.RawMessage(`{"n":3}`)); !errors.Is(err, host.ErrRunEnded) {
			t.Errorf("a call after the end: %v", err)
		}
		reviewCheckReplay(t, f, ri.ID)
	}
}

const reviewReplyValues = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    const out = {};
    const c = await receive();
    const cyclic = {}; cyclic.self = cyclic;
    const tries = {
      cyclic: () => ctx.reply(cyclic),
      bigint: () => ctx.reply(10n),
      huge: () => ctx.reply("x".repeat(2 << 20)),
      throwingToJSON: () => ctx.reply({ toJSON() { throw new Error("no JSON"); } }),
    };
    for (const k of Object.keys(tries)) {
      try { out[k] = "answered " + tries[k](); } catch (e) { out[k] = e.name; }
    }
    let askBefore = "asked";
    try { ctx.ask({ prompt: "still waiting?" }); } catch (e) { askBefore = e.message; }
    out.askWhileWaiting = askBefore;
    out.undefinedReply = ctx.reply(undefined);
    out.again = ctx.reply("again");
    try { ctx.ask({ prompt: "?" }); out.askAfter = "asked"; } catch (e) { out.askAfter = e.message; }
    return out;
  } });`

// ctx.reply with values that are not JSON throws and answers nothing, so
// the call stays waiting (ctx.ask is still allowed); reply(undefined)
// answers it with null; a second reply answers none, and ctx.ask then
// throws.
func TestReviewServeReplyValues(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.addSource("reply-values", reviewReplyValues)
	ri := reviewStart(t, f, "reply-values", `{}`)
	if ri.Status != store.StatusCompleted {
		t.Fatalf("%s %+v", ri.Status, ri.Error)
	}
	var out map[string]any
	_ = json.Unmarshal(ri.Result, &out)
	for k, want := range map[string]string{
		"cyclic": "TypeError", "bigint": "TypeError",
		"huge": "PayloadTooLargeError", "throwingToJSON": "TypeError", "askWhileWaiting": "asked",
	} {
		if got, _ := out[k].(string); got != want && !(k == "throwingToJSON" && got == "Error") {
			t.Errorf("%s: %v, want %s", k, out[k], want)
		}
	}
	if out["undefinedReply"] != 1.0 || out["again"] != 0.0 || !strings.Contains(out["askAfter"].(string), "no call is waiting") {
		t.Errorf("result %s", ri.Result)
	}
	if got := strings.Join(callOutputs(ri), " | "); got != "completed null" {
		t.Errorf("calls %s", got)
	}
	reviewCheckReplay(t, f, ri.ID)
}

// reviewScript registers a script and runs it with input to its end, as
// one line (advOutcome), or "refused: ..." when it is not registered.
func reviewScript(t *testing.T, f *fixture, name, src, input string) string {
	t.Helper()
	if _, err := jsprogram.RegisterTool(context.Background(), f.h, name, []byte(src)); err != nil {
		return "refused: " + err.Error()
	}
	ri, err := f.h.Call(context.Background(), name, json.RawMessage(input), nil)
	if err != nil {
		t.Fatal(err)
	}
	return advOutcome(f.settle(ri))
}

// stepOps counts the step ops a run recorded, by name.
func stepOps(t *testing.T, f *fixture, runID string) map[string]int {
	t.Helper()
	evs, err := f.h.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, e := range evs {
		if e.Kind == "step_started" {
			var d struct{ Name string }
			_ = json.Unmarshal(e.Data, &d)
			n[d.Name]++
		}
	}
	return n
}

func TestReviewStepStandIns(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	const head = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" }, `
	for _, tc := range []struct {
		name, src string
		want      []string // globs, any of
	}{
		// A step that calls itself runs the recursion inside its one attempt.
		{"recursion", head + `async execute() { "use workflow"; return await fact(5); } });
async function fact(n) { "use step"; return n <= 1 ? 1 : n * await fact(n - 1); }`, []string{"completed 120"}},
		// A step that calls another step runs it as a function.
		{"step calls step", head + `async execute() { "use workflow"; return await outer(3); } });
async function outer(x) { "use step"; return (await inner(x)) + 1; }
async function inner(x) { "use step"; return x * 2; }`, []string{"completed 7"}},
		// Hoisting: the tool is defined above its steps, and a step is
		// called while the script loads (it runs as a function there).
		{"hoisted", `"use strict";
const early = typeof plan === "function" && plan.name === "plan" && plan.length === 1;
` + head + `async execute() { "use workflow"; return { early, value: await plan("x") }; } });
async function plan(s) { "use step"; return "plan " + s; }`, []string{`completed {"early":true,"value":"plan x"}`}},
		// "use strict" in the script and in the step.
		{"use strict", `'use strict'
` + head + `async execute() { "use workflow"; return await strict(); } });
async function strict() { "use strict"; "use step"; return this === undefined; }`, []string{"completed true"}},
		// The last line is a comment, without a newline.
		{"last line a comment", head + `async execute() { "use workflow"; return await plan(); } });
async function plan() { "use step"; return 1; }
// the end`, []string{"completed 1"}},
		// The last line is an expression without a semicolon that a line
		// starting with [ would continue.
		{"last line without a semicolon", head + `async execute() { "use workflow"; return await plan(); } })
async function plan() { "use step"; return [1, 2] }
const t = plan`, []string{"completed [1,2]"}},
		// The last line ends inside a template's text? No: a block comment
		// closing on the last line.
		{"last line a block comment", head + `async execute() { "use workflow"; return await plan(); } });
async function plan() { "use step"; return 2; } /* a
comment */`, []string{"completed 2"}},
		// Undefined arguments: defaults apply in the attempt as in a direct
		// call, in every position.
		{"undefined arguments", head + `async execute() { "use workflow";
  return [await args(undefined, 2), await args(1, undefined), await args(undefined), await args(null, undefined, 3), await args([undefined], { u: undefined })]; } });
async function args(a = "da", b = "db", c = "dc") { "use step"; return [a, b, c]; }`,
			[]string{`completed [["da",2,"dc"],[1,"db","dc"],["da","db","dc"],[null,"db",3],[[null],{},"dc"]]`}},
		// Fixed finding (minor), as first reported: Function.prototype.toString.call(step) gives the
		// prelude's stand-in ("function (...args) { return mode === ..."),
		// while String(step) and step.toString() give the author's text:
		// declareSteps (toolshim.js) only defines an own toString on the
		// stand-in. Code that reads a function's text the standard way
		// (Function.prototype.toString.call) sees the host's internals.
		{"toString", head + `async execute() { "use workflow";
  return { str: String(plan).slice(0, 20), method: plan.toString().slice(0, 20), proto: Function.prototype.toString.call(plan).slice(0, 20) }; } });
async function plan() { "use step"; return 1; }`,
			[]string{`completed {"str":"async function plan(","method":"async function plan(","proto":"async function plan("}`}},
		// "use step" in methods, getters and class members is refused with a
		// message that says where steps go.
		{"object method", head + `async execute() { "use workflow"; return await o.m(); } });
const o = { async m() { "use step"; return 1; } };`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"getter", head + `async execute() { "use workflow"; return o.g; } });
const o = { get g() { "use step"; return 1; } };`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"class method", head + `async execute() { "use workflow"; return await new C().m(); } });
class C { async m() { "use step"; return 1; } }`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"static class method", head + `async execute() { "use workflow"; return await C.m(); } });
class C { static async m() { "use step"; return 1; } }`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"class field arrow", head + `async execute() { "use workflow"; return await new C().m(); } });
class C { m = async () => { "use step"; return 1; } }`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"function in a block", head + `async execute() { "use workflow"; return await b(); } });
{ async function b() { "use step"; return 1; } }`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"async generator", head + `async execute() { "use workflow"; return 1; } });
async function* g() { "use step"; yield 1; }`, []string{`refused: *`}},
		// Fixed finding (minor), as first reported: a later plain declaration of a step's name
		// replaces the step's function, so the "use step" function can
		// never run; the script is registered, and each call fails at run
		// time with "step plan did not return a promise". compileScript
		// (toolcompile.go) refuses a step declared twice only when both
		// declarations are steps (seen[name] counts "use step" functions
		// only); a plain redeclaration should be refused the same way.
		{"step redeclared as a plain function", head + `async execute() { "use workflow"; return await plan(); } });
async function plan() { "use step"; return "the step"; }
function plan() { return "the plain function"; }`, []string{`refused: *plan*`, `completed "the step"`}},
		// Fixed finding (minor), as first reported: "use step" as the script's own directive does
		// nothing, but is accepted; the commit refuses "use step" wherever
		// it has no effect. compileScript (toolcompile.go) looks for the
		// directive only in function bodies (functionLiterals), never in
		// the program's own directive prologue.
		{"script-level use step", `"use step";
` + head + `async execute() { "use workflow"; return 1; } });`, []string{`refused: *"use step" has no effect here*`}},
		// A step named as a prelude global.
		{"step named sleep", head + `async execute() { "use workflow"; return await sleep(); } });
async function sleep() { "use step"; return "slept"; }`, []string{`refused: *sleep*`, `completed "slept"`}},
		{"plain function", head + `async execute() { "use workflow"; return 1; } });
function p() { "use step"; return 1; }`, []string{`refused: *step p must be an async function*`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reviewScript(t, f, "steps-"+strings.ReplaceAll(tc.name, " ", "-"), tc.src, `{}`)
			ok := false
			for _, w := range tc.want {
				ok = ok || globMatch(w, got)
			}
			if !ok {
				t.Errorf("got  %s\nwant %s", clipLine(got), strings.Join(tc.want, "\n  or "))
			}
			t.Logf("%s", clipLine(got))
		})
	}
}

const reviewReplyWithdraws = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    const c = await receive();
    const q = ctx.ask({ prompt: "Anything to add for call " + c.input.n + "?" });
    ctx.reply({ n: c.input.n });  // answers the call: withdraws its question
    const a = await q;
    return { after: c.input.n, status: a.status };
  } });`

// Fixed finding, as first reported: ctx.reply does not withdraw the open questions of the calls it
// answers. The rule: "A reply withdraws the open questions of the calls it
// answers" (the ask resolves as { status: "cancelled" }, and the question
// is no longer offered). Got: the question stays open and the body stays
// blocked on it after the reply: the task is idle (every call answered)
// but cannot get back to receive() until someone answers a question about
// a call that already has its result. The reply op
// (wfInstance.perform, case OpReply, host/workflow.go) records the reply
// and touches no ask; nothing settles the asks opened while serving the
// answered calls.
func TestReviewServeReplyWithdrawsQuestions(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.addSource("withdraws", reviewReplyWithdraws)
	ctx := context.Background()
	ri := reviewStart(t, f, "withdraws", `{"n":0}`)
	qs, err := f.h.Questions(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := advOutcome(ri); len(qs) != 0 || got != `completed {"after":0,"status":"cancelled"}` {
		t.Errorf("after the reply: %d open questions, the run %s; want none, and completed {\"after\":0,\"status\":\"cancelled\"}", len(qs), got)
	}
}

// Fixed (was a finding): a generator function as the entry point was accepted and its
// body never runs. A serve body cannot be a generator (and goja has
// no async generators, so a generator execute/task is not the
// async-generator progress form either). Got: the tool registers; a call runs the
// generator function, which only makes a generator object, and the run
// completes at once with {} (the object as JSON) without running a line
// of the body; for serve, the first call is answered with {}.
// defineWorkflowTool (toolshim.js) checks that the entry is a function
// with "use workflow", not that it is not a generator, and run() awaits
// whatever the call returns.
func TestReviewGeneratorEntryPoints(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		// A serve body can't be a generator; nor can a body that goja
		// cannot run as an async generator.
		{"generator serve", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  *serve(receive, ctx) { "use workflow"; yield 1; } });`, []string{`refused: *generator*`}},
		{"generator execute", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  *execute(input, ctx) { "use workflow"; yield 1; return 2; } });`, []string{`refused: *generator*`, "completed 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reviewScript(t, f, "gen-"+strings.ReplaceAll(tc.name, " ", "-"), tc.src, `{}`)
			ok := false
			for _, w := range tc.want {
				ok = ok || globMatch(w, got)
			}
			if !ok {
				t.Errorf("got  %s\nwant %s", clipLine(got), strings.Join(tc.want, "\n  or "))
			}
		})
	}
}
