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

type plan struct {
	Revision int      `json:"revision"`
	Requests []string `json:"requests"`
	Steps    []string `json:"steps"`
}

func callOutput(t *testing.T, ri host.RunInfo, i int) plan {
	t.Helper()
	if len(ri.Calls) <= i || ri.Calls[i].Status != "completed" {
		t.Fatalf("call %d of %s: %+v", i, ri.ID, ri.Calls)
	}
	var p plan
	if err := json.Unmarshal(ri.Calls[i].Output, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// The release-plan serve tool: the first call drafts the plan and
// the task goes idle (waiting on receive); a second call to the same run
// revises it, across a host restart; a call to a run of another tool, or
// to one that ended, is refused. Each revision's side effect ran once.
func TestToolServeReleasePlan(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddExample("release-plan")
	f.AddExample("deploy")
	ctx := context.Background()

	ri, err := f.H.Start(ctx, "release-plan", []byte(`{"request":"draft 2.0"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ri, _ = f.H.Drive(ctx, ri.ID)
	waitsOn(t, ri, "receive")
	if p := callOutput(t, ri, 0); p.Revision != 1 || len(p.Steps) != 3 {
		t.Errorf("first reply: %+v", p)
	}
	if ri.Working() {
		t.Error("the task works with every call answered")
	}

	f.Restart()
	idx, err := f.H.SendCall(ctx, ri.ID, "call-2", []byte(`{"request":"add a canary"}`))
	if err != nil || idx != 1 {
		t.Fatalf("SendCall: %d %v", idx, err)
	}
	if ri, _ = f.H.Run(ctx, ri.ID); !ri.Working() || ri.Calls[1].CallID != "call-2" {
		t.Errorf("after the second call: %+v", ri.Calls)
	}
	ri, _ = f.H.Drive(ctx, ri.ID)
	waitsOn(t, ri, "receive")
	p := callOutput(t, ri, 1)
	if p.Revision != 2 || strings.Join(p.Steps, "|") != "freeze the release branch|run the release checklist|a canary|tag and publish" ||
		strings.Join(p.Requests, "|") != "draft 2.0|add a canary" {
		t.Errorf("second reply: %+v", p)
	}
	if callOutput(t, ri, 0).Revision != 1 {
		t.Error("the first call's answer changed")
	}
	out := output(t, f.H, ri.ID)
	for _, want := range []string{`revision 1 for "draft 2.0"`, `revision 2 for "add a canary"`} {
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("%q ran %d times:\n%s", want, n, out)
		}
	}

	// Bad calls change nothing.
	var ie *host.InputError
	if _, err := f.H.SendCall(ctx, ri.ID, "", []byte(`{"request":""}`)); !errors.As(err, &ie) {
		t.Errorf("an input the schema refuses: %v", err)
	}
	dep, _ := f.H.Start(ctx, "deploy", []byte(`{"service":"api"}`), nil)
	if _, err := f.H.SendCall(ctx, dep.ID, "", []byte(`{"service":"web"}`)); !errors.Is(err, host.ErrBadInput) {
		t.Errorf("a call to a run of an execute tool: %v", err)
	}
	if _, err := f.H.SendCall(ctx, "run_nosuchrun", "", []byte(`{}`)); !errors.Is(err, host.ErrRunNotFound) {
		t.Errorf("a call to no run: %v", err)
	}
	if _, err := f.H.Cancel(ctx, ri.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.H.SendCall(ctx, ri.ID, "", []byte(`{"request":"more"}`)); !errors.Is(err, host.ErrRunEnded) {
		t.Errorf("a call to an ended run: %v", err)
	}

	// The history replays.
	var buf strings.Builder
	if err := f.H.ExportHistory(ctx, ri.ID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := f.H.CheckReplay(ctx, hist, nil); err != nil || rep.Ops != rep.RecordedOps {
		t.Errorf("replay check: %+v %v", rep, err)
	}
}

// A serve body that returns answers its waiting calls with its result and
// ends the task; replies with no call waiting are dropped; ctx.ask with no
// call waiting throws; a throw fails the waiting calls.
func TestToolServeEnds(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddJS("serve-ends", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    const first = await receive();
    const same = receive();
    if (same !== receive()) throw new Error("a second receive() is not the same promise");
    const answered = ctx.reply({ got: first.input });
    const dropped = ctx.reply("nobody waits");
    let askErr;
    try { await ctx.ask({ prompt: "?" }); } catch (e) { askErr = e.message; }
    const second = await same;
    if (second.input.fail) throw new Error("asked to fail");
    return { answered, dropped, askErr, second: second.input, callId: second.callId };
  } });`)
	ctx := context.Background()
	for _, tc := range []struct {
		input, status string
	}{{`{"n":2}`, "completed"}, {`{"fail":true}`, "failed"}} {
		ri, err := f.H.Start(ctx, "serve-ends", []byte(`{"n":1}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		ri, _ = f.H.Drive(ctx, ri.ID)
		waitsOn(t, ri, "receive")
		if _, err := f.H.SendCall(ctx, ri.ID, "c2", []byte(tc.input)); err != nil {
			t.Fatal(err)
		}
		ri, _ = f.H.Drive(ctx, ri.ID)
		if string(ri.Status) != tc.status || len(ri.Calls) != 2 || ri.Calls[0].Status != "completed" || ri.Calls[1].Status != tc.status {
			t.Fatalf("%s: %s %+v %+v", tc.input, ri.Status, ri.Calls, ri.Error)
		}
		if string(ri.Calls[0].Output) != `{"got":{"n":1}}` {
			t.Errorf("call 0: %s", ri.Calls[0].Output)
		}
		if tc.status == "completed" {
			var r map[string]any
			_ = json.Unmarshal(ri.Result, &r)
			if r["answered"] != 1.0 || r["dropped"] != 0.0 || !strings.Contains(r["askErr"].(string), "no call is waiting") || r["callId"] != "c2" {
				t.Errorf("result: %s", ri.Result)
			}
			if string(ri.Calls[1].Output) != string(ri.Result) {
				t.Errorf("the waiting call got %s, not the result", ri.Calls[1].Output)
			}
		} else if ri.Calls[1].Error == nil || ri.Calls[1].Error.Message != "asked to fail" {
			t.Errorf("the failed call: %+v", ri.Calls[1])
		}
		if ri.Status == store.StatusWaiting {
			t.Error("still waiting")
		}
	}
}

// startSettled starts a run of a tool and drives it until it waits or ends.
func startSettled(t *testing.T, f *fixture, tool, input string) host.RunInfo {
	t.Helper()
	ri, err := f.H.Start(context.Background(), tool, json.RawMessage(input), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f.settle(ri)
}

// sendCall sends a call to a serve run (without driving it).
func sendCall(t *testing.T, f *fixture, runID, callID, input string) {
	t.Helper()
	if _, err := f.H.SendCall(context.Background(), runID, callID, json.RawMessage(input)); err != nil {
		t.Fatalf("SendCall %s: %v", input, err)
	}
}

// checkReplaysOpForOp exports the run's history and checks that the tool
// replays it op for op.
func checkReplaysOpForOp(t *testing.T, f *fixture, runID string) {
	t.Helper()
	ctx := context.Background()
	var buf strings.Builder
	if err := f.H.ExportHistory(ctx, runID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := f.H.CheckReplay(ctx, hist, nil)
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

const syncReceiveTool = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
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

// ctx.reply answers only the calls the body has received: a call counts
// as received once its receive() promise resolves. The body calls
// receive() for a call that is already queued and, before that promise
// resolves (in a later microtask), replies for the call it holds: the
// reply answers call 0 only, and the reply made after reading call 1
// answers call 1.
func TestToolServeReplyAnswersOnlyTheCallsReceived(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddJS("sync-receive", syncReceiveTool)
	ri := startSettled(t, f, "sync-receive", `{"n":0}`)
	waitsOn(t, ri, "sleep")
	sendCall(t, f, ri.ID, "c1", `{"n":1}`)
	ri = f.fire(ri.ID, 2*time.Hour)
	ri = f.settle(ri)
	got := strings.Join(callOutputs(ri), " | ")
	want := `completed {"for":0} | completed {"for":1}`
	if got != want || string(ri.Result) != `{"n0":1,"n1":1}` {
		t.Errorf("calls %s, result %s (%s)\nwant calls %s, result {\"n0\":1,\"n1\":1}", got, ri.Result, ri.Status, want)
	}
}

const raceTool = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
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
func TestToolServeRaceOverReceiveReplaysAcrossRestarts(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddJS("race", raceTool)
	ctx := context.Background()
	ri := startSettled(t, f, "race", `{"n":0}`)
	waitsOn(t, ri, "receive", "sleep")
	ri = f.fire(ri.ID, 2*time.Hour) // the timer wins
	waitsOn(t, ri, "receive")
	if got := callOutputs(ri); len(got) != 1 || got[0] != `completed {"for":0,"log":["got 0","race timer"]}` {
		t.Fatalf("call 0: %v", got)
	}
	f.Restart()
	sendCall(t, f, ri.ID, "c1", `{"n":1}`)
	ri = f.settle(ri)
	waitsOn(t, ri, "receive", "sleep")
	f.Restart()
	sendCall(t, f, ri.ID, "c2", `{"n":2}`)
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
	checkReplaysOpForOp(t, f, ri.ID)
	if _, err := f.H.Run(ctx, ri.ID); err != nil {
		t.Fatal(err)
	}
}

const queuedTool = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
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
func TestToolServeEndAnswersTheQueuedCalls(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddJS("queued", queuedTool)
	ctx := context.Background()
	for _, tc := range []struct{ input, want string }{
		{`{"n":0}`, `completed {"end":0} | completed {"end":0} | completed {"end":0}`},
		{`{"n":0,"fail":true}`, `failed  | failed  | failed `},
	} {
		ri := startSettled(t, f, "queued", tc.input)
		sendCall(t, f, ri.ID, "", `{"n":1}`)
		sendCall(t, f, ri.ID, "", `{"n":2}`)
		ri = f.fire(ri.ID, 2*time.Hour)
		if got := strings.Join(callOutputs(ri), " | "); got != tc.want || ri.Working() {
			t.Errorf("%s: calls %s (working %v), want %s", tc.input, got, ri.Working(), tc.want)
		}
		for _, c := range ri.Calls {
			if strings.Contains(tc.input, "fail") && (c.Error == nil || c.Error.Message != "failing with calls queued") {
				t.Errorf("%s: call %d error %+v", tc.input, c.Index, c.Error)
			}
		}
		if _, err := f.H.SendCall(ctx, ri.ID, "", json.RawMessage(`{"n":3}`)); !errors.Is(err, host.ErrRunEnded) {
			t.Errorf("a call after the end: %v", err)
		}
		checkReplaysOpForOp(t, f, ri.ID)
	}
}

const replyValuesTool = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
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
func TestToolServeReplyWithValuesThatAreNotJSON(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddJS("reply-values", replyValuesTool)
	ri := startSettled(t, f, "reply-values", `{}`)
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
	checkReplaysOpForOp(t, f, ri.ID)
}

const replyWithdrawsTool = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    const c = await receive();
    const q = ctx.ask({ prompt: "Anything to add for call " + c.input.n + "?" });
    ctx.reply({ n: c.input.n });  // answers the call: withdraws its question
    const a = await q;
    return { after: c.input.n, status: a.status };
  } });`

// A reply withdraws the open questions of the calls it answers: the ask
// resolves as { status: "cancelled" }, the question is no longer offered,
// and the body goes on instead of waiting on a question about a call that
// already has its result.
func TestToolServeReplyWithdrawsTheCallsQuestions(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddJS("withdraws", replyWithdrawsTool)
	ctx := context.Background()
	ri := startSettled(t, f, "withdraws", `{"n":0}`)
	qs, err := f.H.Questions(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := advOutcome(ri); len(qs) != 0 || got != `completed {"after":0,"status":"cancelled"}` {
		t.Errorf("after the reply: %d open questions, the run %s; want none, and completed {\"after\":0,\"status\":\"cancelled\"}", len(qs), got)
	}
}
