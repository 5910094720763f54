package jsprogram_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

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
	f.addTool("release-plan")
	f.addTool("deploy")
	ctx := context.Background()

	ri, err := f.h.Start(ctx, "release-plan", []byte(`{"request":"draft 2.0"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ri, _ = f.h.Drive(ctx, ri.ID)
	waitsOn(t, ri, "receive")
	if p := callOutput(t, ri, 0); p.Revision != 1 || len(p.Steps) != 3 {
		t.Errorf("first reply: %+v", p)
	}
	if ri.Working() {
		t.Error("the task works with every call answered")
	}

	f.restart()
	idx, err := f.h.SendCall(ctx, ri.ID, "call-2", []byte(`{"request":"add a canary"}`))
	if err != nil || idx != 1 {
		t.Fatalf("SendCall: %d %v", idx, err)
	}
	if ri, _ = f.h.Run(ctx, ri.ID); !ri.Working() || ri.Calls[1].CallID != "call-2" {
		t.Errorf("after the second call: %+v", ri.Calls)
	}
	ri, _ = f.h.Drive(ctx, ri.ID)
	waitsOn(t, ri, "receive")
	p := callOutput(t, ri, 1)
	if p.Revision != 2 || strings.Join(p.Steps, "|") != "freeze the release branch|run the release checklist|a canary|tag and publish" ||
		strings.Join(p.Requests, "|") != "draft 2.0|add a canary" {
		t.Errorf("second reply: %+v", p)
	}
	if callOutput(t, ri, 0).Revision != 1 {
		t.Error("the first call's answer changed")
	}
	out := output(t, f.h, ri.ID)
	for _, want := range []string{`revision 1 for "draft 2.0"`, `revision 2 for "add a canary"`} {
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("%q ran %d times:\n%s", want, n, out)
		}
	}

	// Bad calls change nothing.
	var ie *host.InputError
	if _, err := f.h.SendCall(ctx, ri.ID, "", []byte(`{"request":""}`)); !errors.As(err, &ie) {
		t.Errorf("an input the schema refuses: %v", err)
	}
	dep, _ := f.h.Start(ctx, "deploy", []byte(`{"service":"api"}`), nil)
	if _, err := f.h.SendCall(ctx, dep.ID, "", []byte(`{"service":"web"}`)); !errors.Is(err, host.ErrBadInput) {
		t.Errorf("a call to a run of an execute tool: %v", err)
	}
	if _, err := f.h.SendCall(ctx, "run_nosuchrun", "", []byte(`{}`)); !errors.Is(err, host.ErrRunNotFound) {
		t.Errorf("a call to no run: %v", err)
	}
	if _, err := f.h.Cancel(ctx, ri.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.h.SendCall(ctx, ri.ID, "", []byte(`{"request":"more"}`)); !errors.Is(err, host.ErrRunEnded) {
		t.Errorf("a call to an ended run: %v", err)
	}

	// The history replays.
	var buf strings.Builder
	if err := f.h.ExportHistory(ctx, ri.ID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := f.h.CheckReplay(ctx, hist, nil); err != nil || rep.Ops != rep.RecordedOps {
		t.Errorf("replay check: %+v %v", rep, err)
	}
}

// A serve body that returns answers its waiting calls with its result and
// ends the task; replies with no call waiting are dropped; ctx.ask with no
// call waiting throws; a throw fails the waiting calls.
func TestToolServeEnds(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.addSource("serve-ends", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
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
		ri, err := f.h.Start(ctx, "serve-ends", []byte(`{"n":1}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		ri, _ = f.h.Drive(ctx, ri.ID)
		waitsOn(t, ri, "receive")
		if _, err := f.h.SendCall(ctx, ri.ID, "c2", []byte(tc.input)); err != nil {
			t.Fatal(err)
		}
		ri, _ = f.h.Drive(ctx, ri.ID)
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
