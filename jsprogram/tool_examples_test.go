package jsprogram_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

// fire fires every timer due within d and drives the run.
func (f *fixture) fire(id string, d time.Duration) host.RunInfo {
	f.t.Helper()
	if _, err := f.H.FireDue(context.Background(), time.Now().Add(d), nil); err != nil {
		f.t.Fatal(err)
	}
	ri, err := f.H.Drive(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return ri
}

func waitsOn(t testing.TB, ri host.RunInfo, kinds ...string) {
	t.Helper()
	var got []string
	for _, w := range ri.Waiting {
		got = append(got, w.Kind)
	}
	if ri.Status != store.StatusWaiting || strings.Join(got, ",") != strings.Join(kinds, ",") {
		t.Fatalf("run %s is %s waiting on %v (error %+v), want waiting on %v", ri.ID, ri.Status, got, ri.Error, kinds)
	}
}

// The approval with a deadline and an escalation: the question
// races a sleep; when the sleep wins, on-call is paged and a second race
// starts with the same question still open.
func TestToolApproveDeadline(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddExample("approve-deadline")
	ctx := context.Background()

	// Nobody answers: paged, then timed out.
	ri, err := f.H.Start(ctx, "approve-deadline", []byte(`{"service":"api","firstDeadline":"1h","secondDeadline":"2h"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ri, _ = f.H.Drive(ctx, ri.ID)
	waitsOn(t, ri, "ask", "sleep")
	ri = f.fire(ri.ID, 61*time.Minute)
	waitsOn(t, ri, "ask", "sleep")
	ri = f.fire(ri.ID, 3*time.Hour+2*time.Minute)
	if r := result[map[string]any](t, ri); r["deployed"] != false || r["reason"] != "timed out" || r["paged"] != true {
		t.Errorf("timed out: %s", ri.Result)
	}
	if n := strings.Count(output(t, f.H, ri.ID), "side effect: paged on-call about api"); n != 1 {
		t.Errorf("paged %d times", n)
	}

	// Answered after the page, across a restart: deployed, paged.
	ri, _ = f.H.Start(ctx, "approve-deadline", []byte(`{"service":"web","firstDeadline":"1h"}`), nil)
	ri, _ = f.H.Drive(ctx, ri.ID)
	ask := ri.Waiting[0].AskID
	ri = f.fire(ri.ID, 61*time.Minute)
	waitsOn(t, ri, "ask", "sleep")
	f.Restart()
	if ri, err = f.H.AnswerAsk(ctx, ask, host.Answer{OptionID: "approve"}); err != nil {
		t.Fatal(err)
	}
	ri, _ = f.H.Drive(ctx, ri.ID)
	if r := result[map[string]any](t, ri); r["deployed"] != true || r["paged"] != true || !strings.HasPrefix(r["url"].(string), "https://web.deploys.invalid/") {
		t.Errorf("approved after the page: %s", ri.Result)
	}
}

// The render example: a webhook's URL goes to a step, and the run
// waits for the callback; a failed render throws FatalError, which the
// run fails with.
func TestToolRenderWebhook(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddExample("render")
	ctx := context.Background()
	for _, tc := range []struct{ body, status string }{{`{"status":"ok","url":"https://cdn.invalid/v.mp4"}`, "completed"}, {`{"status":"gpu on fire"}`, "failed"}} {
		ri := f.Call("render", `{"projectId":"p1"}`)
		waitsOn(t, ri, "webhook")
		w := ri.Waiting[0]
		if !strings.Contains(output(t, f.H, ri.ID), "with callback "+w.URL) || !strings.HasSuffix(w.URL, abi.WebhookPath(w.Token)) {
			t.Fatalf("the step did not get the webhook's URL %q: %s", w.URL, output(t, f.H, ri.ID))
		}
		d, err := f.H.DeliverWebhook(ctx, w.Token, abi.WebhookRequest{Method: "POST", URL: abi.WebhookPath(w.Token), Body: tc.body})
		if err != nil {
			t.Fatal(err)
		}
		if d.Response == nil || d.Response.Status != 202 {
			t.Errorf("response %+v, want 202", d.Response)
		}
		ri, err = f.H.Drive(ctx, ri.ID)
		if err != nil {
			t.Fatal(err)
		}
		if string(ri.Status) != tc.status {
			t.Fatalf("run %s, want %s: %+v", ri.Status, tc.status, ri.Error)
		}
		if tc.status == "completed" {
			if r := result[map[string]string](t, ri); r["url"] != "https://cdn.invalid/v.mp4" {
				t.Errorf("result %s", ri.Result)
			}
			continue
		}
		if ri.Error.Type != "FatalError" || ri.Error.Message != "Render job-p1 failed: gpu on fire" || !bytes.Contains(ri.Error.Details, []byte(`"line":16`)) {
			t.Errorf("error %+v details %s", ri.Error, ri.Error.Details)
		}
	}
}

// A hook with a fixed token is resumed with the payment; a second run for
// the same order sees the conflict and fails.
func TestToolOrderHook(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddExample("order")
	ctx := context.Background()
	ri := f.Call("order", `{"orderId":"42"}`)
	waitsOn(t, ri, "hook")
	second := f.Call("order", `{"orderId":"42"}`)
	if second.Status != store.StatusFailed || second.Error.Type != "FatalError" || !strings.Contains(second.Error.Message, "already awaited by run "+ri.ID) {
		t.Errorf("second run for the order: %s %+v", second.Status, second.Error)
	}
	f.Restart()
	if _, err := f.H.ResumeHook(ctx, "order-42", []byte(`{"amount":12.5,"currency":"EUR"}`)); err != nil {
		t.Fatal(err)
	}
	ri, err := f.H.Drive(ctx, ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := result[map[string]any](t, ri); r["paid"] != 12.5 || r["currency"] != "EUR" || r["orderId"] != "42" {
		t.Errorf("result %s", ri.Result)
	}
	if _, err := f.H.ResumeHook(ctx, "order-42", []byte(`{}`)); !errors.Is(err, host.ErrUnknownHook) {
		t.Errorf("the hook outlived its run: %v", err)
	}
}

// Progress, then a durable sleep: the progress snapshot is visible while
// the run sleeps.
func TestToolRemindProgress(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddExample("remind")
	ri := f.Call("remind", `{"note":"stand up","delay":"10 min"}`)
	waitsOn(t, ri, "sleep")
	if string(ri.Progress) != `{"status":"preparing reminder"}` {
		t.Errorf("progress %s", ri.Progress)
	}
	if until := ri.Waiting[0].Until; until == nil || until.Sub(time.Now()) < 9*time.Minute || until.Sub(time.Now()) > 11*time.Minute {
		t.Errorf("sleeps until %v", until)
	}
	ri = f.fire(ri.ID, 11*time.Minute)
	if r := result[map[string]string](t, ri); r["reminder"] != "stand up" {
		t.Errorf("result %s", ri.Result)
	}
}

// The JavaScript examples make the same ops as their Go twins, so the Go
// guests' golden histories replay against the scripts (payloads are not
// compared), and the damaged ones are caught as non-deterministic.
func TestToolReplaysGoHistories(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	for _, g := range []struct {
		file, script string
		ops          int
		end          string
		bad          bool
	}{
		{"deploy-approved.json", "deploy", 4, "completed", false},
		{"deploy-rejected.json", "deploy", 3, "completed", false},
		{"deploy-waiting.json", "deploy", 2, "suspended", false},
		{"remind.json", "remind", 3, "completed", false},
		{"approve-deadline-timeout.json", "approve-deadline", 6, "completed", false},
		{"bad-step-renamed.json", "deploy", 0, "", true},
		{"bad-op-kind.json", "deploy", 0, "", true},
		{"bad-extra-op.json", "remind", 0, "", true},
		{"bad-missing-op.json", "approve-deadline", 0, "", true},
	} {
		t.Run(g.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "host", "testdata", "histories", g.file))
			if err != nil {
				t.Fatal(err)
			}
			hist, err := host.ReadHistory(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			src, err := os.ReadFile("../examples/js/" + g.script + ".js")
			if err != nil {
				t.Fatal(err)
			}
			rep, err := f.H.CheckReplayOn(context.Background(), hist, src, jsprogram.EngineName)
			var nd *host.NonDeterminismError
			if g.bad {
				if !errors.As(err, &nd) || !errors.Is(err, host.ErrNonDeterminism) {
					t.Fatalf("want a *NonDeterminismError, got %v (%+v)", err, rep)
				}
				return
			}
			if err != nil {
				t.Fatalf("replay: %v (%+v)", err, rep)
			}
			if rep.Ops != g.ops || rep.RecordedOps != g.ops || rep.End != g.end {
				t.Errorf("report %+v, want %d of %d ops, end %s", rep, g.ops, g.ops, g.end)
			}
		})
	}
}

// The rest of the workflow context: ctx.agent sessions (a reply, a
// structured one, a failed turn as a status, not a throw), a manual
// webhook answering its request, a hook awaited in a loop and disposed
// (goja has no for await), and the run's metadata.
func TestToolContext(t *testing.T) {
	a := newAgents(func(turn host.AgentTurn) abi.AgentResult {
		if turn.Agent == "echo" && turn.Message == "fail" {
			return abi.AgentResult{Status: abi.AgentFailed, Error: &abi.AgentError{Code: abi.AgentErrFailed, Message: "the child gave up"}}
		}
		return echo(turn)
	})
	f := newFixture(t, jsprogram.Limits{}, a)
	f.AddJS("context", `defineWorkflowTool({ description: "context", inputSchema: { type: "object" },
  async execute(input, ctx) {
    "use workflow";
    const meta = getWorkflowMetadata();
    const triage = ctx.agent("ticket-triage");
    const plain = await (await triage.send("#7")).result();
    const structured = await (await ctx.agent("ticket-review").send("#7", { outputSchema: { type: "object" } })).result();
    const failed = await (await ctx.agent("echo").send("fail")).result();
    const second = (await (await triage.send("again")).result()).reply;

    const hook = createHook({ token: "feed-" + meta.workflowRunId });
    const seen = [];
    for (;;) {
      const item = await hook;
      if (item.done) break;
      seen.push(item.n);
    }
    hook.dispose();
    const web = createWebhook({ respondWith: "manual" });
    ctx.progress({ webhook: web.url });
    const req = await web;
    const body = await req.json();
    req.respondWith(new Response(JSON.stringify({ got: body.n }), { status: 201, headers: { "content-type": "application/json" } }));
    return { tool: ctx.toolName, run: ctx.callId === meta.workflowRunId, plain, structured, failed, second, seen, method: req.method };
  } });`)
	ctx := context.Background()
	ri := f.Call("context", `{}`)
	waitsOn(t, ri, "hook")
	for _, p := range []string{`{"n":1}`, `{"n":2}`, `{"done":true}`} {
		if _, err := f.H.ResumeHook(ctx, "feed-"+ri.ID, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	ri, _ = f.H.Drive(ctx, ri.ID)
	waitsOn(t, ri, "webhook")
	if _, err := f.H.ResumeHook(ctx, "feed-"+ri.ID, []byte(`{}`)); !errors.Is(err, host.ErrUnknownHook) {
		t.Errorf("the hook was not disposed: %v", err)
	}
	w := ri.Waiting[0]
	d, err := f.H.DeliverWebhook(ctx, w.Token, abi.WebhookRequest{Method: "POST", URL: abi.WebhookPath(w.Token), Body: `{"n":5}`})
	if err != nil || d.Response != nil {
		t.Fatalf("delivery %+v %v: a manual webhook answers from the run", d, err)
	}
	ri, _ = f.H.Drive(ctx, ri.ID)
	resp, err := f.H.WebhookResponse(ctx, ri.ID, d.Hook, d.Index)
	if err != nil || resp == nil || resp.Status != 201 || resp.Body != `{"got":5}` || resp.Headers["content-type"] != "application/json" {
		t.Errorf("the webhook's response: %+v %v", resp, err)
	}
	got := result[struct {
		Tool, Second, Method string
		Run                  bool
		Plain, Failed        struct {
			Status, Reply string
			Error         *abi.AgentError
		}
		Structured struct {
			Status string
			Data   map[string]any
		}
		Seen []int
	}](t, ri)
	if got.Tool != "context" || !got.Run || got.Method != "POST" {
		t.Errorf("context: %s", ri.Result)
	}
	if got.Plain.Status != "completed" || got.Plain.Reply != "ticket-triage: #7" || got.Structured.Data["agent"] != "ticket-review" {
		t.Errorf("agent turns: %s", ri.Result)
	}
	if got.Failed.Status != "failed" || got.Failed.Error == nil || got.Failed.Error.Message != "the child gave up" {
		t.Errorf("failed turn: %s", ri.Result)
	}
	if got.Second != "ticket-triage: again" {
		t.Errorf("second send: %q", got.Second)
	}
	if len(got.Seen) != 2 || got.Seen[0] != 1 || got.Seen[1] != 2 {
		t.Errorf("hook payloads: %v", got.Seen)
	}
	if total, distinct := a.turns(); total != 4 || distinct != 4 {
		t.Errorf("%d turns over %d ids, want 4 sent once each across the replays", total, distinct)
	}
}
