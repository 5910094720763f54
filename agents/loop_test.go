package agents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

// fakeModel is an OpenAI-compatible chat-completions server that scripts a
// model: reply decides each answer from the conversation it is sent.
type fakeModel struct {
	mu       sync.Mutex
	requests []chatReq
	reply    func(n int, req chatReq) (int, string)
	// piece, when set, is called after each piece of a streamed reply is
	// flushed (see stream_test.go).
	piece func(n, i int)
}

type chatReq struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string `json:"role"`
		Content    any    `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			Parameters  map[string]any `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ResponseFormat map[string]any `json:"response_format"`
	Stream         bool           `json:"stream"`
}

// toolResults are the contents of the request's tool messages, by call id.
func (r chatReq) toolResults() map[string]string {
	out := map[string]string{}
	for _, m := range r.Messages {
		if m.Role == "tool" {
			s, _ := m.Content.(string)
			out[m.ToolCallID] = s
		}
	}
	return out
}

func (f *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "not found", 404)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var req chatReq
	if err := json.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	n := len(f.requests)
	f.mu.Unlock()
	status, body := f.reply(n, req)
	if req.Stream && status == 200 {
		f.stream(w, n, body)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After-Ms", "1")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func (f *fakeModel) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fakeModel) request(i int) chatReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[i]
}

// call is a tool call a scripted reply makes.
type call struct{ id, name, args string }

// reply is a chat completion in the wire format: text, tool calls (in
// parallel when more than one), and usage.
func reply(text string, calls ...call) string {
	msg := map[string]any{"role": "assistant", "content": text, "refusal": nil}
	finish := "stop"
	if len(calls) > 0 {
		var tcs []any
		for _, c := range calls {
			tcs = append(tcs, map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}})
		}
		msg["tool_calls"], finish = tcs, "tool_calls"
		if text == "" {
			msg["content"] = nil
		}
	}
	b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
	return string(b)
}

// upperTool is a JavaScript tool.
const upperTool = `defineWorkflowTool({ description: "upper-cases text",
  inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  async execute({ text }) { "use workflow"; return text.toUpperCase(); } });`

// loopHost is a host with the workflow tool, a loop backend on the fake
// model, a WebAssembly tool (kitchen) and a JavaScript one (upper).
type loopHost struct {
	*testhost.Host
	loop   *agents.Loop
	model  *fakeModel
	counts *sync.Map // the kitchen guest's count capability, by key
	stop   func()    // stops the scheduler
}

func newLoopHost(t *testing.T, m *fakeModel, list ...agents.LoopAgent) *loopHost {
	t.Helper()
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	loop := &agents.Loop{Endpoint: agents.Endpoint{BaseURL: srv.URL + "/v1", APIKeyEnv: "SANDFLOW_TEST_NO_KEY"}, Model: "m", List: list}
	loop.Delegates = loop
	counts := &sync.Map{}
	count := func(_ context.Context, c host.CapabilityCall) (json.RawMessage, error) {
		v, _ := counts.LoadOrStore(string(c.Input), new(atomic.Int64))
		return json.Marshal(v.(*atomic.Int64).Add(1))
	}
	th := testhost.New(t, &testhost.Options{Host: host.Options{Agents: loop, Engines: map[string]host.Engine{agents.LoopEngineName: loop.Engine()},
		Capabilities: map[string]host.Capability{"count": count}}})
	lh := &loopHost{Host: th, loop: loop, model: m, counts: counts}
	lh.setUp()
	if _, err := th.H.AddPlugin(context.Background(), testhost.Guest(t, "host/testdata/guests/kitchen"), testhost.Manifest(t, "host/testdata/guests/kitchen")); err != nil {
		t.Fatal(err)
	}
	th.AddJS("upper", upperTool)
	return lh
}

// abiRetryFast retries a failed model call at once.
var abiRetryFast = abi.RetryPolicy{MaxAttempts: 3, InitialBackoffMs: 1, MaxBackoffMs: 5, BackoffFactor: 1}

// setUp attaches the loop backend, registers the workflow tool and runs
// the scheduler (which fires step retries), as a process does each time
// it opens the host.
func (lh *loopHost) setUp() {
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h := lh.H
	go func() {
		defer close(done)
		h.RunScheduler(sctx, nil)
	}()
	lh.stop = func() { cancel(); <-done }
	lh.T.Cleanup(lh.stop)
	ctx := context.Background()
	if err := lh.loop.Attach(ctx, lh.H); err != nil {
		lh.T.Fatal(err)
	}
	if _, err := jsprogram.RegisterWorkflowTool(ctx, lh.H, jsprogram.WorkflowTool{}); err != nil {
		lh.T.Fatal(err)
	}
}

// turnRun is the run of the loop agent's one turn.
func (lh *loopHost) turnRun(agent string) host.RunInfo {
	lh.T.Helper()
	runs, err := lh.H.Runs(context.Background(), store.RunFilter{Tool: agents.LoopToolName(agent)})
	if err != nil || len(runs) != 1 {
		lh.T.Fatalf("runs of %s: %v %v", agent, runs, err)
	}
	ri, err := lh.H.Run(context.Background(), runs[0].ID)
	if err != nil {
		lh.T.Fatal(err)
	}
	return ri
}

var helper = agents.LoopAgent{Name: "helper", Description: "does things with tools", Instructions: "Use the tools.",
	Tools: []agents.LoopTool{{Tool: "kitchen", Name: "sum", Description: "sums 0..n-1 in steps"}, {Tool: "upper"}}}

// threeSteps scripts the model: the WebAssembly tool, then the JavaScript
// tool twice in parallel, then an answer made of their results.
func threeSteps(n int, req chatReq) (int, string) {
	res := req.toolResults()
	switch {
	case res["c1"] == "":
		return 200, reply("", call{"c1", "sum", `{"mode":"steps","n":4}`})
	case res["c2"] == "":
		return 200, reply("summed", call{"c2", "upper", `{"text":"abc"}`}, call{"c3", "upper", `{"text":"def"}`})
	}
	return 200, reply(fmt.Sprintf("sum %s, upper %s %s", res["c1"], res["c2"], res["c3"]))
}

// A three-step loop: a WebAssembly tool, a JavaScript tool called twice
// in parallel, then the answer; the model sees the tools' schemas and
// results, and the turn's usage is summed in its run's result.
func TestLoopThreeSteps(t *testing.T) {
	m := &fakeModel{reply: threeSteps}
	lh := newLoopHost(t, m, helper)
	ri := lh.Program(`return await ctx.agent("helper", { message: "go" });`)
	if ri.Status != store.StatusCompleted || string(ri.Result) != `"sum 6, upper \"ABC\" \"DEF\""` {
		t.Fatalf("run %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
	if m.count() != 3 {
		t.Fatalf("%d model calls, want 3", m.count())
	}
	first := m.request(0)
	if len(first.Messages) != 2 || first.Messages[0].Role != "system" || first.Messages[0].Content != "Use the tools." || len(first.Tools) != 2 ||
		first.Tools[0].Function.Name != "sum" || first.Tools[0].Function.Description != "sums 0..n-1 in steps" || first.Tools[1].Function.Parameters["required"] == nil {
		t.Errorf("first request %+v", first)
	}
	last := m.request(2)
	if n := len(last.Messages); n != 7 || len(last.Messages[4].ToolCalls) != 2 {
		t.Errorf("last request has %d messages: %+v", n, last.Messages)
	}
	tr := lh.turnRun("helper")
	var res struct {
		Usage struct{ PromptTokens, CompletionTokens, TotalTokens int }
		Steps int
		Stop  string
	}
	if err := json.Unmarshal(tr.Result, &res); err != nil || res.Usage.TotalTokens != 45 || res.Usage.PromptTokens != 30 || res.Steps != 3 || res.Stop != "answered" {
		t.Errorf("turn result %s", tr.Result)
	}
}

// A model that calls tools forever is stopped by the step limit, with a
// warning recorded as the run's progress.
func TestLoopStepLimit(t *testing.T) {
	m := &fakeModel{reply: func(n int, _ chatReq) (int, string) {
		return 200, reply(fmt.Sprintf("again %d", n), call{fmt.Sprintf("c%d", n), "upper", `{"text":"x"}`})
	}}
	a := helper
	a.MaxSteps = 3
	lh := newLoopHost(t, m, a)
	ri := lh.Program(`return await ctx.agent("helper", { message: "go" });`)
	if ri.Status != store.StatusCompleted || string(ri.Result) != `"again 3"` {
		t.Fatalf("run %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
	if m.count() != 3 {
		t.Errorf("%d model calls, want 3", m.count())
	}
	tr := lh.turnRun("helper")
	if !strings.Contains(string(tr.Progress), "step limit of 3") || !strings.Contains(string(tr.Result), `"stop":"step_limit"`) {
		t.Errorf("progress %s, result %s", tr.Progress, tr.Result)
	}
}

// A tool call whose arguments fail the tool's schema reaches the model as
// an error it can correct; a call of a tool the agent does not have too.
func TestLoopBadArguments(t *testing.T) {
	m := &fakeModel{reply: func(n int, req chatReq) (int, string) {
		res := req.toolResults()
		switch n {
		case 1:
			return 200, reply("", call{"c1", "upper", `{"txt":"x"}`}, call{"c2", "nope", `{}`})
		case 2:
			return 200, reply("", call{"c3", "upper", `{"text":"x"}`})
		}
		return 200, reply(res["c1"] + " | " + res["c2"] + " | " + res["c3"])
	}}
	lh := newLoopHost(t, m, helper)
	ri := lh.Program(`return await ctx.agent("helper", { message: "go" });`)
	got := ""
	_ = json.Unmarshal(ri.Result, &got)
	if ri.Status != store.StatusCompleted || !strings.Contains(got, "error: the arguments do not fit the tool's input schema") ||
		!strings.Contains(got, `error: there is no tool called "nope"`) || !strings.HasSuffix(got, `| "X"`) {
		t.Fatalf("run %s %q %+v", ri.Status, got, ri.Error)
	}
}

// A provider error the model call cannot get past fails the turn; a 5xx
// is retried as a step and then answers.
func TestLoopProviderErrors(t *testing.T) {
	m := &fakeModel{reply: func(n int, req chatReq) (int, string) {
		if req.Messages[len(req.Messages)-1].Content == "bad" {
			return 400, `{"error": {"message": "no such model", "type": "invalid_request_error", "code": "model_not_found"}}`
		}
		if n == 2 {
			return 503, `{"error": {"message": "busy", "type": "server_error"}}`
		}
		return 200, reply("fine")
	}}
	a := helper
	a.ModelRetry = &abiRetryFast
	lh := newLoopHost(t, m, a)
	ri := lh.Program(`try { await ctx.agent("helper", { message: "bad" }); return "no"; } catch (e) { return e.code + ": " + e.message; }`)
	if got := string(ri.Result); ri.Status != store.StatusCompleted || !strings.Contains(got, "agent_failed") || !strings.Contains(got, "400 Bad Request: no such model") {
		t.Fatalf("run %s %s", ri.Status, got)
	}
	before := m.count()
	ri = lh.Program(`return await ctx.agent("helper", { message: "hi" });`)
	if ri.Status != store.StatusCompleted || string(ri.Result) != `"fine"` || m.count()-before != 2 {
		t.Fatalf("run %s %s %+v after %d calls", ri.Status, ri.Result, ri.Error, m.count()-before)
	}
}

// A host closed while a turn's third model call is out, and opened again:
// the turn goes on from there. The first two model calls and both tool
// calls are not made again (counted at the fake server and by the tools);
// only the call that was out is sent again.
func TestLoopResumesAfterRestart(t *testing.T) {
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	m := &fakeModel{reply: func(n int, req chatReq) (int, string) {
		res := req.toolResults()
		switch {
		case res["c1"] == "":
			return 200, reply("", call{"c1", "sum", `{"mode":"count","token":"t1"}`})
		case res["c2"] == "":
			return 200, reply("", call{"c2", "upper", `{"text":"abc"}`})
		}
		first := false
		once.Do(func() { first = true })
		if first {
			close(reached)
			<-release
			return 500, `{"error": {"message": "gone"}}`
		}
		return 200, reply("count " + res["c1"] + ", upper " + res["c2"])
	}}
	lh := newLoopHost(t, m, helper)
	ctx := context.Background()
	in, _ := json.Marshal(map[string]string{"js": `return await ctx.agent("helper", { message: "go" });`})
	ri, err := lh.H.Start(ctx, jsprogram.WorkflowToolName, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	go lh.H.Drive(ctx, ri.ID)
	<-reached
	lh.stop()
	lh.Close()
	close(release)
	if m.count() != 3 {
		t.Fatalf("%d model calls before the restart, want 3", m.count())
	}
	lh.Open()
	lh.setUp()
	lh.Recover()
	testhost.WaitUntil(t, "the program's run to end", func() bool {
		ri, err = lh.H.Run(ctx, ri.ID)
		return err == nil && ri.Status.Terminal()
	})
	if ri.Status != store.StatusCompleted || string(ri.Result) != `"count 1, upper \"ABC\""` {
		t.Fatalf("run %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
	if m.count() != 4 {
		t.Errorf("%d model calls, want 4 (the one that was out sent again)", m.count())
	}
	if v, _ := lh.counts.Load(`"t1"`); v == nil || v.(*atomic.Int64).Load() != 1 {
		t.Errorf("the WebAssembly tool's side effect ran %v times, want once", v)
	}
	if runs, _ := lh.H.Runs(ctx, store.RunFilter{Tool: "upper"}); len(runs) != 1 {
		t.Errorf("%d runs of the JavaScript tool, want 1", len(runs))
	}
}

// A workflow program fans out to three loop agents at once; each calls
// the JavaScript tool with its own message and answers with the result.
func TestLoopFanOutFromAWorkflowProgram(t *testing.T) {
	m := &fakeModel{reply: func(n int, req chatReq) (int, string) {
		user, _ := req.Messages[1].Content.(string)
		if r, ok := req.toolResults()["u"]; ok {
			return 200, reply(req.Messages[0].Content.(string) + " " + r)
		}
		return 200, reply("", call{"u", "upper", fmt.Sprintf(`{"text":%q}`, user)})
	}}
	var list []agents.LoopAgent
	for _, name := range []string{"a1", "a2", "a3"} {
		list = append(list, agents.LoopAgent{Name: name, Instructions: name, Tools: []agents.LoopTool{{Tool: "upper"}}})
	}
	lh := newLoopHost(t, m, list...)
	ri := lh.Program(`return await Promise.all(["a1", "a2", "a3"].map((a) => ctx.agent(a, { message: "to " + a })));`)
	if ri.Status != store.StatusCompleted || string(ri.Result) != `["a1 \"TO A1\"","a2 \"TO A2\"","a3 \"TO A3\""]` {
		t.Fatalf("run %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
	if m.count() != 6 {
		t.Errorf("%d model calls, want 6", m.count())
	}
}

// A turn with an output schema sends it as the response format on every
// model call; a JSON answer that fits is the turn's data, one that is not
// JSON or does not fit fails the turn with bad_structured_output.
func TestLoopStructuredOutput(t *testing.T) {
	m := &fakeModel{reply: func(n int, req chatReq) (int, string) {
		switch user, _ := req.Messages[len(req.Messages)-1].Content.(string); user {
		case "fits":
			return 200, reply(`{"approved": true}`)
		case "prose":
			return 200, reply(`Sure! {"approved": true}`)
		}
		return 200, reply(`{"verdict": "yes"}`)
	}}
	lh := newLoopHost(t, m, agents.LoopAgent{Name: "helper"})
	const js = `try { return { ok: await ctx.agent("helper", { message: %q, outputSchema: { type: "object", required: ["approved"] } }) }; } catch (e) { return { code: e.code }; }`
	for _, tc := range []struct{ msg, want string }{
		{"fits", `{"ok":{"approved":true}}`},
		{"prose", `{"code":"bad_structured_output"}`},
		{"misfit", `{"code":"bad_structured_output"}`},
	} {
		ri := lh.Program(fmt.Sprintf(js, tc.msg))
		var v any
		_ = json.Unmarshal(ri.Result, &v)
		got, _ := json.Marshal(v)
		if ri.Status != store.StatusCompleted || string(got) != tc.want {
			t.Errorf("%s: run %s %s %+v", tc.msg, ri.Status, got, ri.Error)
		}
	}
	if rf := m.request(0).ResponseFormat; rf["type"] != "json_schema" {
		t.Errorf("response_format %v", rf)
	}
}

// The model-facing options of a loop tool: a deferred tool is out of the
// list until search_tools finds it; modelOutput gives the model a part of
// the result; a tool hidden from delegates is left out of a turn another
// loop agent sent; a label is what a call is shown as; and endsTurn ends
// the turn after the step that called it.
func TestLoopModelFacingOptions(t *testing.T) {
	names := func(req chatReq) string {
		var out []string
		for _, tl := range req.Tools {
			out = append(out, tl.Function.Name)
		}
		return strings.Join(out, ",")
	}
	m := &fakeModel{reply: func(n int, req chatReq) (int, string) {
		if req.Messages[0].Content == "worker" {
			return 200, reply("worker saw tools [" + names(req) + "]")
		}
		res := req.toolResults()
		switch {
		case res["s"] == "":
			return 200, reply("", call{"s", "search_tools", `{"query":"address"}`})
		case res["i"] == "":
			return 200, reply("", call{"i", "info", `{}`})
		case res["w"] == "":
			return 200, reply("", call{"w", "worker", `{"message":"help"}`})
		}
		return 200, reply("ending: "+res["i"]+" "+res["w"], call{"u", "upper", `{"text":"last"}`})
	}}
	boss := agents.LoopAgent{Name: "boss", Instructions: "boss", Tools: []agents.LoopTool{
		{Tool: "info", Deferred: true, Description: "gives an address", ModelOutput: "/url"},
		{Agent: "worker"},
		{Tool: "upper", EndsTurn: true, Label: "upper-case {text}"}}}
	worker := agents.LoopAgent{Name: "worker", Instructions: "worker", Tools: []agents.LoopTool{{Tool: "upper", HiddenFromDelegates: true}}}
	lh := newLoopHost(t, m, boss, worker)
	lh.AddJS("info", `defineWorkflowTool({ description: "info", inputSchema: { type: "object" },
  async execute() { "use workflow"; return { url: "https://example.test/x", size: 3 }; } });`)
	ri := lh.Call(agents.LoopToolName("boss"), `{"message":"go"}`)
	if ri.Status != store.StatusCompleted || !strings.Contains(string(ri.Result), `"reply":"ending: \"https://example.test/x\" \"worker saw tools []\""`) ||
		!strings.Contains(string(ri.Result), `"stop":"tool_called"`) {
		t.Fatalf("run %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
	var boss1, boss2 chatReq
	for i := range m.count() {
		if r := m.request(i); r.Messages[0].Content == "boss" && boss1.Messages == nil {
			boss1 = r
		} else if r.Messages[0].Content == "boss" && boss2.Messages == nil {
			boss2 = r
		}
	}
	if got := names(boss1); got != "worker,upper,search_tools" {
		t.Errorf("first tools %s", got)
	}
	if got := names(boss2); got != "info,worker,upper" {
		t.Errorf("tools after the search %s", got)
	}
	evs, err := lh.H.Events(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	labelled := false
	for _, e := range evs {
		labelled = labelled || strings.Contains(string(e.Data), `upper-case last`)
	}
	if !labelled {
		t.Error("no progress shows the call's label")
	}
	if runs, _ := lh.H.Runs(context.Background(), store.RunFilter{Tool: "upper"}); len(runs) != 1 {
		t.Errorf("%d runs of upper, want 1 (the call that ended the turn)", len(runs))
	}
}

// A model call that does not answer within modelTimeoutSeconds is a
// failed step, retried: the second attempt's answer is used.
func TestLoopModelTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	m := &fakeModel{reply: func(n int, req chatReq) (int, string) {
		if n == 1 {
			<-release // never answers within the timeout
		}
		return 200, reply("second attempt")
	}}
	a := agents.LoopAgent{Name: "helper", ModelTimeoutSeconds: 1, ModelRetry: &abiRetryFast}
	lh := newLoopHost(t, m, a)
	ri := lh.Call(agents.LoopToolName("helper"), `{"message":"go"}`)
	if ri.Status == store.StatusWaiting {
		ri = lh.waitEnd(ri.ID)
	}
	if ri.Status != store.StatusCompleted || !strings.Contains(string(ri.Result), `"reply":"second attempt"`) || m.count() != 2 {
		t.Fatalf("run %s %s %+v after %d calls", ri.Status, ri.Result, ri.Error, m.count())
	}
	evs, _ := lh.H.Events(context.Background(), ri.ID)
	timedOut := false
	for _, e := range evs {
		timedOut = timedOut || e.Kind == host.EvStepFailed && strings.Contains(string(e.Data), "did not answer within 1s")
	}
	if !timedOut {
		t.Error("no failed attempt says the model timed out")
	}
}
