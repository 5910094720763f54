package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

func TestMain(m *testing.M) { testhost.Main(m) }

// fixture is a host with JavaScript tools and scripted agents, and a
// session manager over it, on a store in a temp dir (testhost.Host: f.H is
// the host).
type fixture struct {
	*testhost.Host
	t *testing.T
	m *session.Manager
}

const agentsFile = `{"agents": [
  {"name": "reviewer", "description": "reviews release notes", "reply": "reviewed",
   "data": {"approved": true, "reason": "clear and complete"},
   "rules": [{"contains": "TODO", "reply": "not ready", "data": {"approved": false, "reason": "the notes still say TODO"}}]},
  {"name": "billing", "description": "answers billing questions", "reply": "billing: {message}"},
  {"name": "support", "description": "answers everything else", "reply": "support: {message}"}]}`

func newFixture(t *testing.T) *fixture {
	t.Helper()
	b, err := agents.Parse(context.Background(), []byte(agentsFile))
	if err != nil {
		t.Fatal(err)
	}
	return newFixtureWith(t, b)
}

func newFixtureWith(t *testing.T, b host.AgentBackend) *fixture {
	t.Helper()
	f := &fixture{Host: testhost.New(t, &testhost.Options{Host: host.Options{Agents: b}}), t: t}
	f.m = session.NewManager(f.H)
	t.Cleanup(func() { f.m.Close() }) // before the host closes
	return f
}

// restart closes everything and opens it again on the same data, and
// recovers the runs.
func (f *fixture) restart() {
	f.t.Helper()
	f.m.Close()
	f.Restart()
	f.m = session.NewManager(f.H)
	f.Recover()
}

func (f *fixture) session(id string) *session.Session {
	f.t.Helper()
	s, err := f.m.Open(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func call(t *testing.T, s *session.Session, tool, input string, opts *session.CallOptions) session.CallResult {
	t.Helper()
	r, err := s.Call(context.Background(), tool, json.RawMessage(input), opts)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return r
}

var receipt = regexp.MustCompile(`^Started task (approve-deadline-[a-z0-9]{6})\. Its result will arrive in a <task_result> message\.$`)

// The deploy task: the receipt comes at once and the conversation
// goes on; the [Tasks] note lists the task; once the person approves, the
// result arrives once, as a <task_result> block, and survives a restart
// on the way.
func TestDeployTaskReceiptThenResult(t *testing.T) {
	f := newFixture(t)
	f.AddExample("approve-deadline")
	ctx := context.Background()
	s := f.session("conv-1")
	tools, err := s.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "approve-deadline,task_wait,task_cancel" {
		t.Errorf("tools %v", names)
	}
	start := time.Now()
	r := call(t, s, "approve-deadline", `{"service":"api"}`, nil)
	m := receipt.FindStringSubmatch(r.Text)
	if r.Status != "started" || m == nil || m[1] != r.TaskID {
		t.Fatalf("receipt %+v", r)
	}
	id := r.TaskID
	t.Logf("receipt after %s: %s", time.Since(start).Round(time.Millisecond), r.Text)
	if note, ok, err := s.Note(ctx); err != nil || !ok || note != "[Tasks]\n<tasks>\n<task id=\""+id+"\" tool=\"approve-deadline\" status=\"working\"/>\n</tasks>" {
		t.Errorf("note %q %v %v", note, ok, err)
	}
	if _, ok, _ := s.Note(ctx); ok {
		t.Error("a second note without a change")
	}
	if res, _ := s.Results(ctx); res != "" {
		t.Errorf("a result before the approval: %s", res)
	}
	wt := call(t, s, session.TaskWaitTool, `{"timeoutSeconds": 1}`, nil)
	if wt.Text != "No task settled within 1 seconds. 1 task is still working: "+id+"." {
		t.Errorf("task_wait: %q", wt.Text)
	}
	// The question is open; the host restarts; the person approves.
	var ask string
	testhost.WaitUntil(t, "the question", func() bool {
		ri, _ := f.H.Run(ctx, id)
		for _, w := range ri.Waiting {
			if w.Kind == "ask" {
				ask = w.AskID
			}
		}
		return ask != ""
	})
	f.restart()
	s = f.session("conv-1")
	if _, err := f.H.AnswerAsk(ctx, ask, host.Answer{OptionID: "approve"}); err != nil {
		t.Fatal(err)
	}
	wt = call(t, s, session.TaskWaitTool, `{}`, nil)
	if wt.Text != id+" completed; its result follows." {
		t.Errorf("task_wait: %q", wt.Text)
	}
	res, err := s.Results(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`<task_result id="%s" tool="approve-deadline" status="completed">{"deployed":true,"paged":false,"url":"https://api.deploys.invalid/releases/%s-4"}</task_result>`, id, id)
	if res != want {
		t.Errorf("results\n%s\nwant\n%s", res, want)
	}
	if res, _ := s.Results(ctx); res != "" {
		t.Errorf("a result given twice: %s", res)
	}
	if ended, res, err := s.HoldTurn(ctx); !ended || res != "" || err != nil {
		t.Errorf("the turn could not end: %v %q %v", ended, res, err)
	}
}

// task_cancel stops a task, which never reports back; the texts are the
// documented ones; bad task ids and arguments are refused with their codes.
func TestTaskCancelAndRefusals(t *testing.T) {
	f := newFixture(t)
	f.AddExample("approve-deadline")
	ctx := context.Background()
	s := f.session("conv-2")
	id := call(t, s, "approve-deadline", `{"service":"api"}`, nil).TaskID
	if got := call(t, s, session.TaskCancelTool, `{"taskId":"`+id+`"}`, nil).Text; got != "Stopped "+id+"; it won't report back." {
		t.Errorf("cancel: %q", got)
	}
	if got := call(t, s, session.TaskCancelTool, `{"taskId":"`+id+`"}`, nil).Text; got != id+" had no work to stop." {
		t.Errorf("second cancel: %q", got)
	}
	testhost.WaitUntil(t, "the run to end", func() bool { ri, _ := f.H.Run(ctx, id); return ri.Status == store.StatusCancelled })
	if res, _ := s.Results(ctx); res != "" {
		t.Errorf("cancelled work reported back: %s", res)
	}
	for _, tc := range []struct {
		tool, input string
		opts        *session.CallOptions
		want        error
		text        string
	}{
		{session.TaskCancelTool, `{"taskId":"approve-deadline-zzzzzz"}`, nil, session.ErrUnknownTask, "this session has no task approve-deadline-zzzzzz"},
		{session.TaskCancelTool, `{}`, nil, session.ErrBadRequest, "task_cancel takes"},
		{session.TaskWaitTool, `{"timeoutSeconds": 0}`, nil, session.ErrBadRequest, "at least 1"},
		{session.TaskWaitTool, `{"timeoutSeconds": 1.5}`, nil, session.ErrBadRequest, "whole number"},
		{session.TaskWaitTool, `{"seconds": 1}`, nil, session.ErrBadRequest, "unknown field"},
		{"approve-deadline", `{"service":"x"}`, &session.CallOptions{TaskID: "approve-deadline-nope00"}, session.ErrUnknownTask, "no unfinished task approve-deadline-nope00"},
		{"approve-deadline", `{"service":"x"}`, &session.CallOptions{TaskID: id}, session.ErrBadRequest, "is not resumable"},
		{"nope", `{}`, nil, host.ErrUnknownTool, "nope"},
	} {
		_, err := s.Call(ctx, tc.tool, json.RawMessage(tc.input), tc.opts)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s %s: %v, want %v containing %q", tc.tool, tc.input, err, tc.want, tc.text)
		}
	}
	if _, err := f.m.Open(ctx, "bad id!"); !errors.Is(err, session.ErrBadRequest) {
		t.Errorf("bad session id: %v", err)
	}
}

const waiter = `defineWorkflowTool({ description: "waits for its hook", inputSchema: { type: "object" },
  async task({ n }) {
    "use workflow";
    const payload = await createHook({ token: "wait-" + n });
    return payload;
  } });`

// Calls made together (a model's parallel tool calls) create their runs
// and share the writes of the session's record, and still start at most
// 32 working tasks; each receipt's task is in the record after a restart.
func TestParallelTaskCallsKeepTheLimitAndTheirRecord(t *testing.T) {
	f := newFixture(t)
	f.AddJS("waiter", waiter)
	ctx := context.Background()
	s := f.session("conv-parallel")
	const calls = session.MaxWorkingTasks + 8
	type out struct {
		r   session.CallResult
		err error
	}
	outs := make(chan out, calls)
	for i := range calls {
		go func() {
			r, err := s.Call(ctx, "waiter", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), nil)
			outs <- out{r, err}
		}()
	}
	started := map[string]bool{}
	refused := 0
	for range calls {
		o := <-outs
		switch {
		case o.err == nil && o.r.Status == "started":
			started[o.r.TaskID] = true
		case errors.Is(o.err, session.ErrTooManyTasks):
			refused++
		default:
			t.Fatalf("a call: %+v %v", o.r, o.err)
		}
	}
	if len(started) != session.MaxWorkingTasks || refused != calls-session.MaxWorkingTasks {
		t.Fatalf("%d started, %d refused; want %d and %d", len(started), refused, session.MaxWorkingTasks, calls-session.MaxWorkingTasks)
	}
	f.restart()
	s = f.session("conv-parallel")
	kept := 0
	for _, tk := range s.Tasks(ctx) {
		if started[tk.ID] && tk.Status == session.Working {
			kept++
		}
	}
	if kept != session.MaxWorkingTasks {
		t.Fatalf("after a restart the session has %d of its %d working tasks", kept, session.MaxWorkingTasks)
	}
}

// A session runs at most 32 working tasks: the 33rd call is refused and
// names them; once one settles, a call starts again. Results share one
// budget, and what is over it is cut and marked.
func TestWorkingTaskLimitAndResultBudget(t *testing.T) {
	f := newFixture(t)
	f.AddJS("waiter", waiter)
	ctx := context.Background()
	s := f.session("conv-3")
	for i := range session.MaxWorkingTasks {
		call(t, s, "waiter", fmt.Sprintf(`{"n":%d}`, i), nil)
	}
	_, err := s.Call(ctx, "waiter", json.RawMessage(`{"n":99}`), nil)
	if !errors.Is(err, session.ErrTooManyTasks) || !strings.Contains(err.Error(), "already runs 32 tasks") {
		t.Fatalf("33rd task: %v", err)
	}
	deliver := func(i int, payload string) {
		testhost.WaitUntil(t, "the hook", func() bool {
			_, err := f.H.ResumeHook(ctx, fmt.Sprintf("wait-%d", i), json.RawMessage(payload))
			return err == nil
		})
	}
	// Two results: 40 KB and 20 KB of text, over the 50 KB budget; 3,000
	// lines, over the line budget, in a third.
	deliver(0, `{"text":"`+strings.Repeat("a", 40_000)+`"}`)
	deliver(1, `{"text":"`+strings.Repeat("b", 20_000)+`"}`)
	testhost.WaitUntil(t, "two results", func() bool {
		n := 0
		for _, tk := range s.Tasks(ctx) {
			if tk.Status == session.Completed {
				n++
			}
		}
		return n == 2
	})
	if r := call(t, s, "waiter", `{"n":100}`, nil); r.Status != "started" {
		t.Errorf("a call after a task settled: %+v", r)
	}
	res, err := s.Results(ctx)
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(res, "\n")
	if len(blocks) != 2 || !strings.HasSuffix(blocks[0], `"}</task_result>`) || !strings.HasSuffix(blocks[1], "b[truncated]</task_result>") {
		t.Fatalf("results: %d blocks, ends %q / %q", len(blocks), tail(blocks[0]), tail(blocks[len(blocks)-1]))
	}
	if body := len(res) - 2*len(`<task_result id="waiter-xxxxxx" tool="waiter" status="completed"></task_result>`) - len("[truncated]") - 1; body != session.ResultBytes {
		t.Errorf("result bodies are %d bytes, want the budget of %d", body, session.ResultBytes)
	}
	// A failed task's error message keeps its newlines: 3,000 lines are cut
	// at the line budget.
	f.AddJS("liner", `defineWorkflowTool({ description: "fails loudly", inputSchema: { type: "object" },
  async task() { "use workflow"; throw new Error(Array(3000).fill("x").join("\n")); } });`)
	call(t, s, "liner", `{}`, nil)
	var got string
	testhost.WaitUntil(t, "the failure", func() bool {
		got, _ = s.Results(ctx)
		return got != ""
	})
	if n := strings.Count(got, "\n"); n != session.ResultLines-1 || !strings.Contains(got, "status=\"failed\">x\nx") || !strings.HasSuffix(got, "\nx[truncated]</task_result>") {
		t.Errorf("%d newlines; starts %.120q, ends %q", n, got, tail(got))
	}
}

func tail(s string) string {
	if len(s) > 40 {
		return s[len(s)-40:]
	}
	return s
}
