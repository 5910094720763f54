package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/session"
)

func output(t *testing.T, f *fixture, runID string) string {
	t.Helper()
	evs, err := f.H.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range evs {
		if e.Kind == "output" {
			var d struct{ Data string }
			_ = json.Unmarshal(e.Data, &d)
			b.WriteString(d.Data)
		}
	}
	return b.String()
}

// The "review the release notes, then publish if approved", as an
// execute call in a session with a scripted reviewer: approved notes are
// published (once); notes the reviewer rejects never reach the publish
// step.
func TestReleaseNotesReviewThenPublish(t *testing.T) {
	f := newFixture(t)
	f.AddExample("release-notes")
	s := f.session("conv-notes")
	r := call(t, s, "release-notes", `{"notes":"v2.1: faster replay"}`, nil)
	if r.Status != "completed" || !strings.HasPrefix(r.Text, `{"published":true,"url":"https://notes.deploys.invalid/`) {
		t.Fatalf("approved notes: %+v", r)
	}
	if n := strings.Count(output(t, f, r.Run.ID), "side effect: published"); n != 1 {
		t.Errorf("published %d times", n)
	}
	r = call(t, s, "release-notes", `{"notes":"v2.2: TODO"}`, nil)
	if r.Status != "completed" || r.Text != `{"published":false,"reason":"the notes still say TODO"}` {
		t.Fatalf("rejected notes: %+v", r)
	}
	if strings.Contains(output(t, f, r.Run.ID), "published") {
		t.Error("rejected notes were published")
	}
}

// The agent router: a step picks the target and ctx.agent sends the
// question there.
func TestAgentRouter(t *testing.T) {
	f := newFixture(t)
	f.AddExample("router")
	s := f.session("conv-router")
	for q, want := range map[string]string{
		"Why was I charged twice?":    `{"agent":"billing","reply":"billing: Why was I charged twice?"}`,
		"How do I reset my password?": `{"agent":"support","reply":"support: How do I reset my password?"}`,
	} {
		in, _ := json.Marshal(map[string]string{"question": q})
		if r := call(t, s, "router", string(in), nil); r.Status != "completed" || r.Text != want {
			t.Errorf("%q: %+v", q, r)
		}
	}
}

// The serve release-plan tool in a session: the first call's
// receipt says how to reach the task again; its plan arrives as a result
// and the task goes idle (listed under <idle> in the [Tasks] note, not
// holding the turn); a second call with its taskId (in the input, as the
// model sends it) revises the plan, across a restart; a call naming no
// task of the tool is unknown_task.
func TestServeReleasePlanRevisedByTaskID(t *testing.T) {
	f := newFixture(t)
	f.AddExample("release-plan")
	ctx := context.Background()
	s := f.session("conv-plan")
	tools, err := s.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 3 || !strings.Contains(string(tools[0].InputSchema), `"taskId"`) || !strings.Contains(tools[0].Description, "taskId") {
		t.Errorf("the serve tool as the model sees it: %+v", tools[0])
	}
	r := call(t, s, "release-plan", `{"request":"draft 2.0"}`, nil)
	id := r.TaskID
	if want := "Started task " + id + ". Its result will arrive in a <task_result> message. To send it another message, call release-plan again with taskId " + id + "."; r.Text != want || !strings.HasPrefix(id, "release-plan-") || len(id) != len("release-plan-")+6 {
		t.Fatalf("receipt %q\nwant    %q", r.Text, want)
	}
	if wt := call(t, s, session.TaskWaitTool, `{}`, nil); wt.Text != id+" completed; its result follows." {
		t.Errorf("task_wait: %q", wt.Text)
	}
	res, err := s.Results(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := `<task_result id="` + id + `" tool="release-plan" status="completed">{"requests":["draft 2.0"],"revision":1,"steps":["freeze the release branch","run the release checklist","tag and publish"]}</task_result>`; res != want {
		t.Errorf("first result\n%s\nwant\n%s", res, want)
	}
	testhost.WaitUntil(t, "the task to go idle", func() bool { return s.Tasks(ctx)[0].Status == session.Idle })
	if note, ok, _ := s.Note(ctx); !ok || note != "[Tasks]\n<tasks>\n</tasks>\n<idle>\n<task id=\""+id+"\" tool=\"release-plan\"/>\n</idle>" {
		t.Errorf("note %q", note)
	}
	if ended, _, err := s.HoldTurn(ctx); err != nil || !ended {
		t.Errorf("an idle task holds the turn: %v %v", ended, err)
	}

	f.restart()
	s = f.session("conv-plan")
	r = call(t, s, "release-plan", `{"request":"add a canary","taskId":"`+id+`"}`, nil)
	if r.Text != "Sent to task "+id+". Its reply will arrive in a <task_result> message." || r.TaskID != id {
		t.Fatalf("second receipt %+v", r)
	}
	if ended, res, err := s.HoldTurn(ctx); err != nil || ended ||
		res != `<task_result id="`+id+`" tool="release-plan" status="completed">{"requests":["draft 2.0","add a canary"],"revision":2,"steps":["freeze the release branch","run the release checklist","a canary","tag and publish"]}</task_result>` {
		t.Errorf("the revision: %v %q %v", ended, res, err)
	}
	if res, _ := s.Results(ctx); res != "" {
		t.Errorf("a result delivered twice: %s", res)
	}
	if n := strings.Count(output(t, f, s.Tasks(ctx)[0].RunID), "side effect: revision"); n != 2 {
		t.Errorf("%d revisions ran, want 2", n)
	}

	for _, bad := range []string{
		`{"request":"x","taskId":"release-plan-nosuch"}`,
		`{"request":"x","taskId":"deploy-abcdef"}`,
	} {
		if _, err := s.Call(ctx, "release-plan", json.RawMessage(bad), nil); !errors.Is(err, session.ErrUnknownTask) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := s.Call(ctx, "release-plan", json.RawMessage(`{"request":"","taskId":"`+id+`"}`), nil); !errors.As(err, new(*host.InputError)) {
		t.Errorf("an input the schema refuses: %v", err)
	}
	// task_cancel on an idle task has no work to stop.
	if c := call(t, s, session.TaskCancelTool, `{"taskId":"`+id+`"}`, nil); c.Text != id+" had no work to stop." {
		t.Errorf("task_cancel: %q", c.Text)
	}
}

const patientTool = `defineWorkflowTool({ description: "a serve tool whose slow calls can be cancelled", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    for (;;) {
      const { input, abortSignal } = await receive();
      try {
        if (input.slow) {
          await Promise.race([sleep("1h"), new Promise((_, reject) => abortSignal.addEventListener("abort", () => reject(abortSignal.reason)))]);
        }
        ctx.reply({ done: input });
      } catch (error) {
        if (!abortSignal.aborted) throw error; // cancelled: wait for the next call
      }
    }
  } });`

const steerableTool = `defineWorkflowTool({ description: "asks, and stops when steered", inputSchema: { type: "object" },
  async execute(input, ctx) {
    "use workflow";
    const stop = new Promise((_, reject) => ctx.abortSignal.addEventListener("abort", () => reject(ctx.abortSignal.reason)));
    const answer = await Promise.race([ctx.ask({ prompt: "which region?" }), stop]);
    return { region: answer.text };
  } });`

// task_cancel on a working serve task stops its current work: the call
// never reports back, the body goes back to receive(), and the task is
// idle and takes its next call. task_cancel on an idle one has no work to
// stop.
func TestServeTaskCancel(t *testing.T) {
	f := newFixture(t)
	f.AddJS("patient", patientTool)
	ctx := context.Background()
	s := f.session("conv-cancel")
	id := call(t, s, "patient", `{"slow":true}`, nil).TaskID
	testhost.WaitUntil(t, "the slow call to wait", func() bool {
		ri, _ := f.H.Run(ctx, id)
		return len(ri.Waiting) > 0 && ri.Waiting[0].Kind == "sleep"
	})
	want := "Stopped " + id + "'s current work; it won't report back. To give it new work, call patient again with taskId " + id + "."
	if got := call(t, s, session.TaskCancelTool, `{"taskId":"`+id+`"}`, nil).Text; got != want {
		t.Errorf("cancel: %q\nwant    %q", got, want)
	}
	if ended, res, err := s.HoldTurn(ctx); !ended || res != "" || err != nil {
		t.Errorf("after the cancel: %v %q %v", ended, res, err)
	}
	if got := call(t, s, session.TaskCancelTool, `{"taskId":"`+id+`"}`, nil).Text; got != id+" had no work to stop." {
		t.Errorf("cancel of the idle task: %q", got)
	}
	if r := call(t, s, "patient", `{"n":2,"taskId":"`+id+`"}`, nil); r.Status != "sent" {
		t.Fatalf("the next call: %+v", r)
	}
	if _, res, err := s.HoldTurn(ctx); err != nil || res != `<task_result id="`+id+`" tool="patient" status="completed">{"done":{"n":2}}</task_result>` {
		t.Errorf("the next call's result: %q %v", res, err)
	}
}

// A steer aborts the execute call the turn waits on: its question is
// withdrawn, and the body that rejects because of it ends as
// {"interrupted": true}. Tasks are not touched.
func TestSteerInterruptsExecuteCall(t *testing.T) {
	f := newFixture(t)
	f.AddJS("steerable", steerableTool)
	f.AddJS("patient", patientTool)
	ctx := context.Background()
	s := f.session("conv-steer")
	task := call(t, s, "patient", `{"slow":true}`, nil).TaskID
	r := call(t, s, "steerable", `{}`, nil)
	if r.Status != "waiting" {
		t.Fatalf("the execute call: %+v", r)
	}
	ask := r.Run.Waiting[0].AskID
	if n, err := s.Steer(ctx); n != 1 || err != nil {
		t.Fatalf("steer: %d %v", n, err)
	}
	got, err := s.Await(ctx, r.Run.ID)
	if err != nil || got.Status != session.Completed || got.Text != `{"interrupted":true}` {
		t.Errorf("after the steer: %+v %v", got, err)
	}
	if _, err := f.H.AnswerAsk(ctx, ask, host.Answer{Text: "eu"}); !errors.Is(err, host.ErrAskClosed) {
		t.Errorf("the question after the steer: %v", err)
	}
	if ts := s.Tasks(ctx); ts[0].ID != task || ts[0].Status != session.Working {
		t.Errorf("the task after the steer: %+v", ts[0])
	}
	if n, _ := s.Steer(ctx); n != 0 {
		t.Errorf("a second steer aborted %d calls", n)
	}
}
