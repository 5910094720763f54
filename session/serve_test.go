package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/session"
)

// Cases for serve tools' tasks in a session: a serve run is a resumable
// task that stays available between calls, with the session's texts
// (receipts, <task_result> blocks, task_cancel's answers).

// echoServe answers each call with its input; a call with "hook" waits
// for that hook first, and "fail" throws.
const echoServe = `defineWorkflowTool({ description: "echoes each call", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    for (;;) {
      const { input } = await receive();
      if (input.hook) await createHook({ token: input.hook });
      if (input.fail) throw new Error("failed on call " + input.n);
      ctx.reply({ n: input.n });
    }
  } });`

// takeResults takes the session's undelivered results, as the model does.
func takeResults(t *testing.T, s *session.Session) string {
	t.Helper()
	res, err := s.Results(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// taskStatus is the status of the session's task id, or "" when the
// session has none.
func taskStatus(s *session.Session, id string) string {
	for _, tk := range s.Tasks(context.Background()) {
		if tk.ID == id {
			return tk.Status
		}
	}
	return ""
}

// A serve task whose body fails (or returns) before its first receive()
// reports back: returning answers the calls still waiting and ends the
// task, and a throw fails them, so the call that started the task gets the
// error (or the return value) as its result, through task_wait and
// Results, once.
func TestServeTaskEndingBeforeReceiveReportsBack(t *testing.T) {
	f := newFixture(t)
	f.AddJS("fails-early", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) { "use workflow"; throw new Error("no configuration"); } });`)
	f.AddJS("returns-early", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) { "use workflow"; return { early: true }; } });`)
	ctx := context.Background()
	for _, tc := range []struct{ tool, status, body string }{
		{"fails-early", "failed", "no configuration"},
		{"returns-early", "completed", `{"early":true}`},
	} {
		s := f.session("conv-" + tc.tool)
		id := call(t, s, tc.tool, `{}`, nil).TaskID
		testhost.WaitUntil(t, "the task to end", func() bool { st := taskStatus(s, id); return st != session.Working && st != session.Idle })
		wt, err := s.TaskWait(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		res := takeResults(t, s)
		want := fmt.Sprintf(`<task_result id="%s" tool="%s" status="%s">%s</task_result>`, id, tc.tool, tc.status, tc.body)
		if wt != id+" "+tc.status+"; its result follows." || res != want {
			t.Errorf("%s: task_wait %q, results %q\nwant task_wait %q, results %q", tc.tool, wt, res, id+" "+tc.status+"; its result follows.", want)
		}
	}
}

// A finished serve task's undelivered replies survive a restart: a task
// replies to its call and ends; the session saves the task as completed
// (here, by the [Tasks] note at the step boundary) before the model takes
// the results; the process restarts. Each result arrives once, so Results
// after the restart gives the reply.
func TestServeRepliesOfAFinishedTaskSurviveRestart(t *testing.T) {
	f := newFixture(t)
	f.AddJS("reply-then-end", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) { "use workflow"; const c = await receive(); ctx.reply({ got: c.input.n }); return "ended"; } });`)
	ctx := context.Background()
	s := f.session("conv-restart")
	id := call(t, s, "reply-then-end", `{"n":1}`, nil).TaskID
	testhost.WaitUntil(t, "the task to end", func() bool { return taskStatus(s, id) == session.Completed })
	if _, _, err := s.Note(ctx); err != nil {
		t.Fatal(err)
	}
	f.restart()
	s = f.session("conv-restart")
	want := `<task_result id="` + id + `" tool="reply-then-end" status="completed">{"got":1}</task_result>`
	if res := takeResults(t, s); res != want {
		t.Errorf("results after the restart %q\nwant %q", res, want)
	}
}

// Without the restart the reply arrives once.
func TestServeReplyArrivesOnce(t *testing.T) {
	f := newFixture(t)
	f.AddJS("reply-then-end", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) { "use workflow"; const c = await receive(); ctx.reply({ got: c.input.n }); return "ended"; } });`)
	ctx := context.Background()
	s := f.session("conv-norestart")
	id := call(t, s, "reply-then-end", `{"n":1}`, nil).TaskID
	testhost.WaitUntil(t, "the task to end", func() bool { return taskStatus(s, id) == session.Completed })
	if _, _, err := s.Note(ctx); err != nil {
		t.Fatal(err)
	}
	want := `<task_result id="` + id + `" tool="reply-then-end" status="completed">{"got":1}</task_result>`
	if res := takeResults(t, s); res != want {
		t.Errorf("results %q\nwant %q", res, want)
	}
	if res := takeResults(t, s); res != "" {
		t.Errorf("a result twice: %q", res)
	}
}

// task_cancel on a serve task keeps a reply the task already made for an
// earlier call: call 0 is answered; before the model takes that result,
// it sends call 1 (which works) and cancels the task. Cancelled work never
// reports back, but call 0's reply is a result of its own (each call
// reports its own call.settled, and the model receives the reply once).
func TestServeCancelKeepsEarlierReplies(t *testing.T) {
	f := newFixture(t)
	f.AddJS("echo", echoServe)
	ctx := context.Background()
	s := f.session("conv-cancel")
	id := call(t, s, "echo", `{"n":0}`, nil).TaskID
	testhost.WaitUntil(t, "call 0's reply", func() bool { return taskStatus(s, id) == session.Idle })
	r := call(t, s, "echo", `{"n":1,"hook":"cancel-1","taskId":"`+id+`"}`, nil)
	if r.Status != "sent" {
		t.Fatalf("%+v", r)
	}
	testhost.WaitUntil(t, "call 1 to work", func() bool {
		ri, _ := f.H.Run(ctx, id)
		for _, w := range ri.Waiting {
			if w.Kind == "hook" {
				return true
			}
		}
		return false
	})
	if c := call(t, s, session.TaskCancelTool, `{"taskId":"`+id+`"}`, nil); !strings.HasPrefix(c.Text, "Stopped "+id) {
		t.Fatalf("task_cancel: %q", c.Text)
	}
	want := `<task_result id="` + id + `" tool="echo" status="completed">{"n":0}</task_result>`
	if res := takeResults(t, s); res != want {
		t.Errorf("results %q\nwant %q (call 0's reply; call 1's cancelled work does not report back)", res, want)
	}
}

// task_cancel on a working serve task stops its current work and the task
// stays available, with the session's text for it; a later call by taskId
// is taken.
func TestServeCancelKeepsTheTaskAvailable(t *testing.T) {
	f := newFixture(t)
	f.AddJS("echo", echoServe)
	ctx := context.Background()
	s := f.session("conv-cancel-available")
	id := call(t, s, "echo", `{"n":0,"hook":"cancel-avail"}`, nil).TaskID
	testhost.WaitUntil(t, "call 0 to work", func() bool {
		ri, _ := f.H.Run(ctx, id)
		return len(ri.Waiting) == 1 && ri.Waiting[0].Kind == "hook"
	})
	c := call(t, s, session.TaskCancelTool, `{"taskId":"`+id+`"}`, nil)
	want := "Stopped " + id + "'s current work; it won't report back. To give it new work, call echo again with taskId " + id + "."
	if c.Text != want {
		t.Errorf("task_cancel %q\nwant %q", c.Text, want)
	}
	if _, err := s.Call(ctx, "echo", json.RawMessage(`{"n":1,"taskId":"`+id+`"}`), nil); err != nil {
		t.Errorf("a call after the cancel: %v", err)
	}
}

// gatedAgents is an agent backend with one agent, reviewer, whose turns
// wait for a gate.
type gatedAgents struct {
	gate    chan struct{}
	started chan string
	once    sync.Once
}

func (g *gatedAgents) open() { g.once.Do(func() { close(g.gate) }) }

func (g *gatedAgents) backend() host.AgentBackend {
	return host.AgentFunc{List: []host.AgentInfo{{Name: "reviewer"}}, Fn: func(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
		select {
		case g.started <- t.TurnID:
		default:
		}
		select {
		case <-g.gate:
		case <-ctx.Done():
			return abi.AgentResult{}, ctx.Err()
		}
		return abi.AgentResult{Status: abi.AgentCompleted, Reply: "reviewed"}, nil
	}}
}

// A call by taskId to a task whose body is busy (here in an agent turn)
// gets its receipt "Sent to task X. ..." at once, and the session answers
// its other operations (here Tasks) meanwhile: receipts come at once, and
// the host keeps calls that arrive while the body is not waiting. Once the
// turn ends, both calls are answered. The host side of this is
// TestSendCallDuringAnAgentTurnReturnsAtOnce.
func TestServeCallByTaskIDWhileBusyGetsItsReceiptAtOnce(t *testing.T) {
	g := &gatedAgents{gate: make(chan struct{}), started: make(chan string, 16)}
	f := newFixtureWith(t, g.backend())
	defer g.open()
	f.AddJS("reviewing", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    for (;;) {
      const { input } = await receive();
      const r = await (await ctx.agent("reviewer").send("review " + input.n)).result();
      ctx.reply({ n: input.n, status: r.status });
    }
  } });`)
	ctx := context.Background()
	s := f.session("conv-busy")
	id := call(t, s, "reviewing", `{"n":0}`, nil).TaskID
	select {
	case <-g.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent turn never started")
	}
	sent := make(chan session.CallResult, 1)
	go func() {
		r, err := s.Call(ctx, "reviewing", json.RawMessage(`{"n":1,"taskId":"`+id+`"}`), nil)
		if err != nil {
			t.Error(err)
		}
		sent <- r
	}()
	got := false
	select {
	case r := <-sent:
		got = true
		if !strings.HasPrefix(r.Text, "Sent to task "+id+".") {
			t.Errorf("receipt %q", r.Text)
		}
	case <-time.After(3 * time.Second):
		// Meanwhile, does the session answer anything else?
		listed := make(chan struct{})
		go func() { s.Tasks(ctx); close(listed) }()
		select {
		case <-listed:
			t.Errorf("the call by taskId got no receipt within 3s while the task's agent turn runs")
		case <-time.After(time.Second):
			t.Errorf("the call by taskId got no receipt within 3s while the task's agent turn runs, and Tasks() blocks too")
		}
	}
	g.open()
	if !got {
		select {
		case <-sent:
		case <-time.After(30 * time.Second):
			t.Fatal("the call never returned")
		}
	}
	testhost.WaitUntil(t, "both replies", func() bool { return taskStatus(s, id) == session.Idle })
	res := takeResults(t, s)
	if strings.Count(res, "<task_result") != 2 {
		t.Errorf("results %q", res)
	}
}

// An idle task that gets a call starts working again and counts toward
// the 32: with 32 working tasks it is refused with too_many_tasks (and
// stays idle); with 31 it is taken, and then a new task is refused. A
// call to a working serve task adds no working task.
func TestIdleTaskCountsAsWorkingWhenCalled(t *testing.T) {
	f := newFixture(t)
	f.AddJS("waiter", waiter)
	f.AddJS("echo", echoServe)
	ctx := context.Background()
	s := f.session("conv-limit")
	id := call(t, s, "echo", `{"n":0}`, nil).TaskID
	testhost.WaitUntil(t, "the task to go idle", func() bool { return taskStatus(s, id) == session.Idle })
	for i := range session.MaxWorkingTasks {
		call(t, s, "waiter", fmt.Sprintf(`{"n":%d}`, i), nil)
	}
	_, err := s.Call(ctx, "echo", json.RawMessage(`{"n":1,"taskId":"`+id+`"}`), nil)
	if !errors.Is(err, session.ErrTooManyTasks) {
		t.Errorf("a call to an idle task with 32 working: %v", err)
	}
	if st := taskStatus(s, id); st != session.Idle {
		t.Errorf("the refused call left the task %s", st)
	}
	if _, err := f.H.ResumeHook(ctx, "wait-0", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	testhost.WaitUntil(t, "a waiter to finish", func() bool {
		n := 0
		for _, tk := range s.Tasks(ctx) {
			if tk.Status == session.Working {
				n++
			}
		}
		return n == 31
	})
	if r := call(t, s, "echo", `{"n":2,"hook":"limit","taskId":"`+id+`"}`, nil); r.Status != "sent" {
		t.Fatalf("%+v", r)
	}
	if _, err := s.Call(ctx, "waiter", json.RawMessage(`{"n":99}`), nil); !errors.Is(err, session.ErrTooManyTasks) {
		t.Errorf("a 33rd working task: %v", err)
	}
	if r := call(t, s, "echo", `{"n":3,"taskId":"`+id+`"}`, nil); r.Status != "sent" {
		t.Errorf("a second call to the working task: %+v", r)
	}
}

// taskId rules: a finished serve task, a task of another tool, a task of
// another session are unknown_task; a bad taskId type is bad_request.
func TestTaskIDMustNameAWorkingTaskOfTheTool(t *testing.T) {
	f := newFixture(t)
	f.AddJS("echo", echoServe)
	f.AddJS("echo2", echoServe)
	ctx := context.Background()
	s := f.session("conv-ids")
	other := f.session("conv-ids-other")
	id := call(t, s, "echo", `{"n":0}`, nil).TaskID
	id2 := call(t, s, "echo2", `{"n":0}`, nil).TaskID
	otherID := call(t, other, "echo", `{"n":0}`, nil).TaskID
	ended := call(t, s, "echo", `{"n":0,"fail":true}`, nil).TaskID
	testhost.WaitUntil(t, "the failing task to end", func() bool { return taskStatus(s, ended) == session.Failed })
	for _, tc := range []struct {
		input string
		want  error
	}{
		{`{"n":1,"taskId":"` + ended + `"}`, session.ErrUnknownTask},
		{`{"n":1,"taskId":"` + id2 + `"}`, session.ErrUnknownTask},
		{`{"n":1,"taskId":"` + otherID + `"}`, session.ErrUnknownTask},
		{`{"n":1,"taskId":7}`, session.ErrBadRequest},
	} {
		if _, err := s.Call(ctx, "echo", json.RawMessage(tc.input), nil); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.input, err, tc.want)
		}
	}
	if r := call(t, s, "echo", `{"n":1,"taskId":"`+id+`"}`, nil); r.Status != "sent" {
		t.Errorf("%+v", r)
	}
}

// The [Tasks] note lists working tasks, then the idle ones most recently
// used first, at most 10.
func TestNoteListsIdleTasksMostRecentFirst(t *testing.T) {
	f := newFixture(t)
	f.AddJS("echo", echoServe)
	ctx := context.Background()
	s := f.session("conv-note")
	var ids []string
	for i := range 12 {
		ids = append(ids, call(t, s, "echo", fmt.Sprintf(`{"n":%d}`, i), nil).TaskID)
		time.Sleep(2 * time.Millisecond)
	}
	testhost.WaitUntil(t, "all idle", func() bool {
		for _, id := range ids {
			if taskStatus(s, id) != session.Idle {
				return false
			}
		}
		return true
	})
	// The oldest is used again and goes idle; another one works.
	call(t, s, "echo", `{"n":100,"taskId":"`+ids[0]+`"}`, nil)
	testhost.WaitUntil(t, "the call's reply", func() bool { return taskStatus(s, ids[0]) == session.Idle })
	call(t, s, "echo", `{"n":101,"hook":"note","taskId":"`+ids[5]+`"}`, nil)
	testhost.WaitUntil(t, "the hook", func() bool { return taskStatus(s, ids[5]) == session.Working })
	note, ok, err := s.Note(ctx)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	var b strings.Builder
	b.WriteString("[Tasks]\n<tasks>\n<task id=\"" + ids[5] + "\" tool=\"echo\" status=\"working\"/>\n</tasks>\n<idle>\n")
	order := []string{ids[0], ids[11], ids[10], ids[9], ids[8], ids[7], ids[6], ids[4], ids[3], ids[2]}
	for _, id := range order {
		b.WriteString("<task id=\"" + id + "\" tool=\"echo\"/>\n")
	}
	b.WriteString("</idle>")
	if note != b.String() {
		t.Errorf("note\n%s\nwant\n%s", note, b.String())
	}
}

// TaskWait and Results called concurrently on one session neither panic
// nor race (go test -race checks the second) while a resumable task's
// answers are delivered and rebuilt: a Session is documented as safe for
// concurrent use, and the HTTP API serves task_wait and results requests
// concurrently.
func TestTaskWaitAndResultsAreSafeTogether(t *testing.T) {
	f := newFixture(t)
	f.AddJS("echo", echoServe)
	ctx := context.Background()
	s := f.session("conv-race")
	id := call(t, s, "echo", `{"n":0}`, nil).TaskID
	var panics []string
	var mu sync.Mutex
	guard := func(fn func()) {
		defer func() {
			if p := recover(); p != nil {
				mu.Lock()
				panics = append(panics, fmt.Sprint(p))
				mu.Unlock()
			}
		}()
		fn()
	}
	for i := 1; i <= 60; i++ {
		testhost.WaitUntil(t, "the reply", func() bool {
			ri, _ := f.H.Run(ctx, id)
			return !ri.Working() && len(ri.Calls) == i
		})
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(2)
			go func() { defer wg.Done(); guard(func() { _, _ = s.TaskWait(ctx, 50*time.Millisecond) }) }()
			go func() { defer wg.Done(); guard(func() { _, _ = s.Results(ctx) }) }()
		}
		wg.Wait()
		if r := call(t, s, "echo", fmt.Sprintf(`{"n":%d,"taskId":"%s"}`, i, id), nil); r.Status != "sent" {
			t.Fatalf("%+v", r)
		}
	}
	if len(panics) > 0 {
		t.Errorf("%d panics, the first: %s", len(panics), panics[0])
	}
}

// One reply that answers two calls reaches the model once:
// ctx.reply(output) answers every call received so far, each call reports
// its own call.settled, and the model receives the reply once. Here call 1
// is received (its promise resolves) while the body sleeps, and the body's
// one reply answers calls 0 and 1: one <task_result> block.
func TestServeOneReplyForTwoCallsArrivesOnce(t *testing.T) {
	f := newFixture(t)
	f.AddJS("batcher", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) {
    "use workflow";
    const first = await receive();
    const next = receive();
    await sleep("1h");
    const second = await next;
    ctx.reply({ ns: [first.input.n, second.input.n] });
    for (;;) { const c = await receive(); ctx.reply({ ns: [c.input.n] }); }
  } });`)
	ctx := context.Background()
	s := f.session("conv-batch")
	id := call(t, s, "batcher", `{"n":0}`, nil).TaskID
	testhost.WaitUntil(t, "the sleep", func() bool {
		ri, _ := f.H.Run(ctx, id)
		return len(ri.Waiting) == 2
	})
	if r := call(t, s, "batcher", `{"n":1,"taskId":"`+id+`"}`, nil); r.Status != "sent" {
		t.Fatalf("%+v", r)
	}
	testhost.WaitUntil(t, "call 1 to be recorded", func() bool { ri, _ := f.H.Run(ctx, id); return len(ri.Calls) == 2 })
	if _, err := f.H.FireDue(ctx, time.Now().Add(2*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	testhost.WaitUntil(t, "the reply", func() bool { return taskStatus(s, id) == session.Idle })
	wt, _ := s.TaskWait(ctx, time.Second)
	res := takeResults(t, s)
	want := `<task_result id="` + id + `" tool="batcher" status="completed">{"ns":[0,1]}</task_result>`
	if res != want {
		t.Errorf("task_wait %q; results\n%s\nwant\n%s", wt, res, want)
	}
}

// The same for a body that returns with two calls waiting (see
// TestServeOneReplyForTwoCallsArrivesOnce): its result reaches the model
// once.
func TestServeReturnForTwoCallsArrivesOnce(t *testing.T) {
	f := newFixture(t)
	f.AddJS("ender", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async serve(receive, ctx) { "use workflow"; await receive(); await sleep("1h"); return { end: true }; } });`)
	ctx := context.Background()
	s := f.session("conv-ender")
	id := call(t, s, "ender", `{"n":0}`, nil).TaskID
	testhost.WaitUntil(t, "the sleep", func() bool { ri, _ := f.H.Run(ctx, id); return len(ri.Waiting) == 1 })
	if r := call(t, s, "ender", `{"n":1,"taskId":"`+id+`"}`, nil); r.Status != "sent" {
		t.Fatalf("%+v", r)
	}
	if _, err := f.H.FireDue(ctx, time.Now().Add(2*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	testhost.WaitUntil(t, "the end", func() bool { return taskStatus(s, id) == session.Completed })
	res := takeResults(t, s)
	want := `<task_result id="` + id + `" tool="ender" status="completed">{"end":true}</task_result>`
	if res != want {
		t.Errorf("results\n%s\nwant\n%s", res, want)
	}
}
