package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/mcp"
	"github.com/sandflow/sandflow/store"
)

// The tool list names every tool with its schemas, and changes when a
// plugin is uploaded: connected clients are told.
func TestToolsListAndListChanged(t *testing.T) {
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			e := newEnv(t, nil)
			changed := make(chan struct{}, 8)
			cs := e.connect(era, &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
				changed <- struct{}{}
			}}, false)
			ctx := context.Background()
			res, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range res.Tools {
				names = append(names, tl.Name)
				if tl.Name == "deploy" {
					b, _ := json.Marshal(tl.InputSchema)
					if !strings.Contains(string(b), `"service"`) || tl.Description == "" {
						t.Errorf("deploy: %s %q", b, tl.Description)
					}
				}
			}
			slices.Sort(names)
			if want := "approval,asker,busy,deploy,doubler,echo,sum,task_cancel,task_wait,workflow"; strings.Join(names, ",") != want {
				t.Fatalf("tools %v, want %s", names, want)
			}
			e.AddJS("late", tools["echo"])
			select {
			case <-changed:
			case <-time.After(10 * time.Second):
				t.Fatal("no list-changed notification after an upload")
			}
			res, err = cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(res.Tools, func(tl *sdk.Tool) bool { return tl.Name == "late" }) {
				t.Fatal("the uploaded tool is not listed")
			}
		})
	}
}

// elicitations records the forms a client was shown and answers each
// with answer.
type elicitations struct {
	mu     sync.Mutex
	seen   []*sdk.ElicitParams
	answer func(*sdk.ElicitParams) *sdk.ElicitResult
}

func (el *elicitations) handler(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	el.mu.Lock()
	defer el.mu.Unlock()
	el.seen = append(el.seen, req.Params)
	return el.answer(req.Params), nil
}

// The deploy: the question becomes a form whose options are an
// enum with their labels; approving it deploys.
func TestDeployAnsweredThroughElicitation(t *testing.T) {
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			e := newEnv(t, nil)
			el := &elicitations{answer: func(*sdk.ElicitParams) *sdk.ElicitResult {
				return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"answer": "approve"}}
			}}
			cs := e.connect(era, &sdk.ClientOptions{ElicitationHandler: el.handler}, false)
			r := call(t, cs, "deploy", map[string]any{"service": "api"})
			var out struct {
				Deployed bool   `json:"deployed"`
				URL      string `json:"url"`
			}
			structured(t, r.StructuredContent, &out)
			if r.IsError || !out.Deployed || !strings.HasPrefix(out.URL, "https://api.") {
				t.Fatalf("result %+v", r)
			}
			if len(el.seen) != 1 {
				t.Fatalf("%d forms, want 1", len(el.seen))
			}
			f := el.seen[0]
			schema, _ := json.Marshal(f.RequestedSchema)
			if !strings.HasPrefix(f.Message, "Deploy api?") || !strings.Contains(string(schema), `{"const":"approve","title":"Deploy"}`) ||
				!strings.Contains(string(schema), `"required":["answer"]`) {
				t.Fatalf("form %q %s", f.Message, schema)
			}
		})
	}
}

// Accept, decline and cancel reach the run as answered, cancelled and
// unavailable.
func TestElicitationOutcomes(t *testing.T) {
	cases := []struct {
		result       *sdk.ElicitResult
		status, text string
	}{
		{&sdk.ElicitResult{Action: "accept", Content: map[string]any{"text": "green"}}, "answered", "green"},
		{&sdk.ElicitResult{Action: "accept", Content: map[string]any{"answer": "blue"}}, "answered", ""},
		{&sdk.ElicitResult{Action: "decline"}, "cancelled", ""},
		{&sdk.ElicitResult{Action: "cancel"}, "unavailable", ""},
	}
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			e := newEnv(t, nil)
			for _, c := range cases {
				el := &elicitations{answer: func(*sdk.ElicitParams) *sdk.ElicitResult { return c.result }}
				cs := e.connect(era, &sdk.ClientOptions{ElicitationHandler: el.handler}, false)
				r := call(t, cs, "asker", map[string]any{})
				var out struct{ Status, Text string }
				structured(t, r.StructuredContent, &out)
				if out.Status != c.status || out.Text != c.text {
					t.Errorf("%s: got %+v, want %s %q", c.result.Action, out, c.status, c.text)
				}
			}
		})
	}
}

// A client without elicitation is told what the run waits on and how to
// answer; answered elsewhere, the run ends.
func TestCallWithoutElicitationSaysWhatItWaitsOn(t *testing.T) {
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			e := newEnv(t, nil)
			cs := e.connect(era, nil, false)
			r := call(t, cs, "deploy", map[string]any{"service": "web"})
			var out struct {
				Status    string `json:"status"`
				RunID     string `json:"runId"`
				Questions []struct {
					ID string `json:"id"`
				} `json:"questions"`
			}
			structured(t, r.StructuredContent, &out)
			text := r.Content[0].(*sdk.TextContent).Text
			if r.IsError || out.Status != "waiting" || len(out.Questions) != 1 || !strings.Contains(text, "/v1/asks/") || !strings.Contains(text, "approve (Deploy)") {
				t.Fatalf("result %s %+v", text, out)
			}
			ri, err := e.H.AnswerAsk(context.Background(), out.Questions[0].ID, host.Answer{OptionID: "approve"})
			if err != nil || ri.Status != store.StatusCompleted {
				t.Fatalf("answer: %v %+v", err, ri)
			}
		})
	}
}

// The workflow tool runs a model's fan-out program as a task.
func TestWorkflowFanOut(t *testing.T) {
	js := `const rs = await Promise.all(Array.from({length: 10}, (_, i) => ctx.agent("triage", {message: "#" + i}))); return rs;`
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			e := newEnv(t, nil)
			cs := e.connect(era, nil, era == mcpCurrent)
			r := call(t, cs, "workflow", map[string]any{"js": js})
			id := taskID(t, r)
			var got []string
			if era == mcpCurrent {
				done := poll(t, cs, id, "completed", "failed")
				structured(t, done.Result.StructuredContent, &got)
			} else {
				res, err := taskCall(t, cs, "tasks/result", id, nil)
				if err != nil {
					t.Fatal(err)
				}
				structured(t, res.StructuredContent, &got)
			}
			if len(got) != 10 || got[0] != "triaged #0" || got[9] != "triaged #9" {
				t.Fatalf("got %v", got)
			}
		})
	}
}

const mcpCurrent = "2026-07-28"

// A task tool's call is a task, polled to completion; 2025-11-25 lists it
// and gives its result with tasks/result.
func TestTaskPolledToCompletion(t *testing.T) {
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			e := newEnv(t, nil)
			cs := e.connect(era, nil, era == mcpCurrent)
			r := call(t, cs, "sum", map[string]any{"a": 2, "b": 40})
			id := taskID(t, r)
			done := poll(t, cs, id, "completed", "failed")
			if done.Status != "completed" {
				t.Fatalf("task %+v", done)
			}
			var out struct{ Sum int }
			if era == mcpCurrent {
				structured(t, done.Result.StructuredContent, &out)
			} else {
				res, err := taskCall(t, cs, "tasks/result", id, nil)
				if err != nil {
					t.Fatal(err)
				}
				structured(t, res.StructuredContent, &out)
				list, err := taskCall(t, cs, "tasks/list", "", nil)
				if err != nil || len(list.Tasks) != 1 || list.Tasks[0].TaskID != id {
					t.Fatalf("tasks/list: %v %+v", err, list)
				}
			}
			if out.Sum != 42 {
				t.Fatalf("sum %d", out.Sum)
			}
		})
	}
}

// Cancelling a task aborts its run as task_cancel does.
func TestCancelTask(t *testing.T) {
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			e := newEnv(t, nil)
			cs := e.connect(era, nil, era == mcpCurrent)
			id := taskID(t, call(t, cs, "approval", map[string]any{"what": "the release"}))
			w := poll(t, cs, id, "input_required")
			if era == mcpCurrent && len(w.InputRequests) != 1 {
				t.Fatalf("input_required without its question: %+v", w)
			}
			if _, err := taskCall(t, cs, "tasks/cancel", id, nil); err != nil {
				t.Fatal(err)
			}
			poll(t, cs, id, "cancelled")
			ri, err := e.H.Run(context.Background(), id)
			if err != nil || ri.Status != store.StatusCancelled || ri.Aborted != "task_cancel" {
				t.Fatalf("run %v %+v", err, ri)
			}
		})
	}
}

// A task's id is its run's: after a restart, tasks/get finds it, and its
// question can still be answered.
func TestTaskSurvivesRestart(t *testing.T) {
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			e := newEnv(t, nil)
			cs := e.connect(era, nil, era == mcpCurrent)
			id := taskID(t, call(t, cs, "approval", map[string]any{"what": "v2"}))
			poll(t, cs, id, "input_required")
			cs.Close()
			e.restart()
			el := &elicitations{answer: func(*sdk.ElicitParams) *sdk.ElicitResult {
				return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}
			}}
			cs = e.connect(era, &sdk.ClientOptions{ElicitationHandler: el.handler}, era == mcpCurrent)
			w := poll(t, cs, id, "input_required")
			var out struct{ Status, OptionID string }
			if era == mcpCurrent {
				var key string
				for k := range w.InputRequests {
					key = k
				}
				if _, err := taskCall(t, cs, "tasks/update", id, map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"answer": "yes"}}}); err != nil {
					t.Fatal(err)
				}
				done := poll(t, cs, id, "completed")
				structured(t, done.Result.StructuredContent, &out)
			} else {
				res, err := taskCall(t, cs, "tasks/result", id, nil)
				if err != nil {
					t.Fatal(err)
				}
				structured(t, res.StructuredContent, &out)
			}
			if out.Status != "answered" || out.OptionID != "yes" {
				t.Fatalf("after restart: %+v", out)
			}
		})
	}
}

// Progress snapshots reach a client that asked for them.
func TestProgressNotifications(t *testing.T) {
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			e := newEnv(t, nil)
			var mu sync.Mutex
			var msgs []string
			cs := e.connect(era, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
				mu.Lock()
				msgs = append(msgs, r.Params.Message)
				mu.Unlock()
			}}, false)
			p := &sdk.CallToolParams{Name: "busy", Arguments: map[string]any{}}
			p.SetProgressToken("p1")
			r, err := cs.CallTool(context.Background(), p)
			if err != nil || r.IsError {
				t.Fatalf("%v %+v", err, r)
			}
			// The notifications may be handled after the result.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				mu.Lock()
				got := slices.Clone(msgs)
				mu.Unlock()
				if len(got) == 2 && strings.Contains(got[0], `"stage":"starting"`) && strings.Contains(got[1], `"stage":"spun"`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("progress %q", got)
				}
			}
		})
	}
}

// Bad input is a protocol error that says what is wrong, and creates
// nothing.
func TestBadInputIsAProtocolError(t *testing.T) {
	for _, era := range eras {
		t.Run(era, func(t *testing.T) {
			e := newEnv(t, &mcp.Options{MaxArgumentBytes: 1024})
			cs := e.connect(era, nil, era == mcpCurrent)
			before := e.runs()
			ctx := context.Background()
			cases := []struct {
				name string
				p    *sdk.CallToolParams
				want string
			}{
				{"unknown tool", &sdk.CallToolParams{Name: "nope", Arguments: map[string]any{}}, `unknown tool "nope"`},
				{"schema", &sdk.CallToolParams{Name: "deploy", Arguments: map[string]any{"service": 7}}, "deploy"},
				{"task schema", &sdk.CallToolParams{Name: "sum", Arguments: map[string]any{"a": 1}}, "sum"},
				{"oversized", &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"msg": strings.Repeat("x", 2000)}}, "more than the 1024"},
			}
			for _, c := range cases {
				_, err := cs.CallTool(ctx, c.p)
				if code := wireCode(err); code != -32602 || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: %v (code %d), want invalid params about %q", c.name, err, code, c.want)
				}
			}
			if _, err := taskCall(t, cs, "tasks/get", "no-such-task", nil); wireCode(err) != -32602 || !strings.Contains(err.Error(), `unknown task "no-such-task"`) {
				t.Errorf("unknown task: %v", err)
			}
			if _, err := e.connectWith(era, nil, false, "wrong"); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(err.Error(), "nauthorized") {
				t.Errorf("wrong token: %v", err)
			}
			if n := e.runs(); n != before {
				t.Errorf("bad input created %d runs", n-before)
			}
		})
	}
}

func wireCode(err error) int64 {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}

// stdio connects an SDK client to the server over in-memory pipes, as
// sandflow mcp serves a desktop client on stdin and stdout.
func (e *env) stdio(opts *sdk.ClientOptions) *sdk.ClientSession {
	e.t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.ServeStdio(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts).Connect(context.Background(), ct, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		cs.Close()
		cancel()
		<-done
	})
	return cs
}

// Regression: a session's execute call was driven on the request's
// context, so a client that cancelled its call stopped the run mid-way
// (it stayed running until a recovery). An MCP call starts the run and
// drives it on the server's context.
func TestCancelledCallKeepsItsRun(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.stdio(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "busy", Arguments: map[string]any{}}); err == nil {
		t.Fatal("the call ended before the client gave up")
	}
	rs, err := e.H.Runs(context.Background(), store.RunFilter{})
	if err != nil || len(rs) != 1 {
		t.Fatalf("runs %v %+v", err, rs)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ri, err := e.H.Run(context.Background(), rs[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if ri.Status == store.StatusCompleted {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run stopped when its call was cancelled: %+v", ri)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Regression: a 2025-11-25 client that only polls tasks/get (the MCP
// Inspector's) never saw its task's question; it is sent as an
// elicitation request of its own, once, and the answer reaches the run.
func TestPollingClientIsAskedItsTasksQuestion(t *testing.T) {
	e := newEnv(t, nil)
	el := &elicitations{answer: func(*sdk.ElicitParams) *sdk.ElicitResult {
		return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}
	}}
	cs := e.connect(mcp.Version20251125, &sdk.ClientOptions{ElicitationHandler: el.handler}, false)
	id := taskID(t, call(t, cs, "approval", map[string]any{"what": "the plan"}))
	poll(t, cs, id, "completed")
	el.mu.Lock()
	defer el.mu.Unlock()
	if len(el.seen) != 1 || el.seen[0].Message != "Approve the plan?" {
		t.Fatalf("forms %+v", el.seen)
	}
	ri, err := e.H.Run(context.Background(), id)
	if err != nil || !strings.Contains(string(ri.Result), `"optionId":"yes"`) {
		t.Fatalf("run %v %s", err, ri.Result)
	}
}

// A session runs at most 32 tasks: the 33rd call is refused, with why,
// and starts nothing.
func TestSessionTaskLimit(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.connect(mcp.Version20260728, nil, true)
	for i := range 32 {
		taskID(t, call(t, cs, "approval", map[string]any{"what": fmt.Sprint(i)}))
	}
	before := e.runs()
	_, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "approval", Arguments: map[string]any{"what": "one more"}})
	if wireCode(err) != -32602 || !strings.Contains(err.Error(), "already runs 32 tasks") {
		t.Fatalf("33rd task: %v", err)
	}
	if e.runs() != before {
		t.Fatal("the refused call started a run")
	}
	// Another session has room of its own.
	p := &sdk.CallToolParams{Name: "approval", Arguments: map[string]any{"what": "elsewhere"}, Meta: sdk.Meta{mcp.SessionMeta: "other"}}
	if _, err := cs.CallTool(context.Background(), p); err != nil {
		t.Fatalf("another session: %v", err)
	}
}

// A serve tool's call is a task, and so is each later call sent to it by
// taskId: each ends when its reply answers it, while the run goes on.
func TestServeCallsAreTasks(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.connect(mcp.Version20260728, nil, true)
	first := taskID(t, call(t, cs, "doubler", map[string]any{"n": 1}))
	var out struct{ Doubled int }
	structured(t, poll(t, cs, first, "completed").Result.StructuredContent, &out)
	if out.Doubled != 2 {
		t.Fatalf("first call: %+v", out)
	}
	second := taskID(t, call(t, cs, "doubler", map[string]any{"n": 5, "taskId": first}))
	if second != first+":1" {
		t.Fatalf("the second call's task is %q", second)
	}
	structured(t, poll(t, cs, second, "completed").Result.StructuredContent, &out)
	if out.Doubled != 10 {
		t.Fatalf("second call: %+v", out)
	}
	if _, err := taskCall(t, cs, "tasks/get", first+":7", nil); wireCode(err) != -32602 {
		t.Fatalf("a call never sent: %v", err)
	}
	ri, err := e.H.Run(context.Background(), first)
	if err != nil || ri.Status.Terminal() {
		t.Fatalf("the serve run ended: %v %+v", err, ri)
	}
}
