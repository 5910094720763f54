package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/mcp"
	"github.com/sandflow/sandflow/store"
)

func TestMain(m *testing.M) { testhost.Main(m) }

const token = "sfa_test_token_0123456"

// eras are the protocol revisions every test runs on.
var eras = []string{mcp.Version20260728, mcp.Version20251125}

// Tools of the fixture, besides the examples' deploy and the workflow
// tool.
var tools = map[string]string{
	// asker says what its question's answer was.
	"asker": `defineWorkflowTool({
  description: "Asks a question and returns the answer.",
  inputSchema: {type: "object", properties: {}},
  async execute(_, ctx) {
    "use workflow";
    const a = await ctx.ask({prompt: "Which colour?", options: [{id: "red", label: "Red"}, {id: "blue", label: "Blue"}], allowFreeform: true});
    return {status: a.status, optionId: a.optionId || null, text: a.text || null};
  },
});`,
	// sum is a task that adds in a step.
	"sum": `defineWorkflowTool({
  description: "Adds two numbers, as a task.",
  inputSchema: {type: "object", properties: {a: {type: "number"}, b: {type: "number"}}, required: ["a", "b"], additionalProperties: false},
  async task({a, b}) {
    "use workflow";
    return {sum: await add(a, b)};
  },
});
async function add(a, b) { "use step"; return a + b; }`,
	// approval is a task that waits on a person.
	"approval": `defineWorkflowTool({
  description: "Waits for a person's approval, as a task.",
  inputSchema: {type: "object", properties: {what: {type: "string"}}, required: ["what"]},
  async task({what}, ctx) {
    "use workflow";
    const a = await ctx.ask({prompt: "Approve " + what + "?", options: [{id: "yes", label: "Approve"}, {id: "no", label: "Reject"}]});
    return {status: a.status, optionId: a.optionId || null};
  },
});`,
	// busy runs two steps of 300 ms, with progress before and after.
	"busy": `defineWorkflowTool({
  description: "Works for 600 ms.",
  inputSchema: {type: "object", properties: {}},
  async execute(_, ctx) {
    "use workflow";
    ctx.progress({stage: "starting"});
    const n = await spin();
    const m = await spin();
    ctx.progress({stage: "spun"});
    return {spun: n && m};
  },
});
async function spin() { "use step"; const end = Date.now() + 300; let n = 0; while (Date.now() < end) n++; return n > 0; }`,
	// doubler is a serve tool: each call is answered with its n doubled.
	"doubler": `defineWorkflowTool({
  description: "Doubles each call's n.",
  inputSchema: {type: "object", properties: {n: {type: "number"}}, required: ["n"]},
  async serve(receive, ctx) {
    "use workflow";
    for (;;) {
      const { input } = await receive();
      ctx.reply({ doubled: input.n * 2 });
    }
  },
});`,
	// echo answers its input at once.
	"echo": `defineWorkflowTool({
  description: "Echoes its input.",
  inputSchema: {type: "object", properties: {msg: {type: "string"}}},
  async execute(input) { "use workflow"; return input; },
});`,
}

// env is an MCP server over a host with the deploy example, the tools
// above and the workflow tool, served over HTTP (testhost.Host: e.H is the
// host).
type env struct {
	*testhost.Host
	t    testing.TB
	opts mcp.Options
	srv  *mcp.Server
	hs   *testhost.Server
}

var agents = host.AgentFunc{List: []host.AgentInfo{{Name: "triage", Description: "sorts tickets"}},
	Fn: func(_ context.Context, turn host.AgentTurn) (abi.AgentResult, error) {
		return abi.AgentResult{Status: abi.AgentCompleted, Reply: "triaged " + turn.Message}, nil
	}}

func newEnv(t testing.TB, opts *mcp.Options) *env {
	t.Helper()
	e := &env{t: t}
	if opts != nil {
		e.opts = *opts
	}
	e.opts.Tokens = []string{token}
	if e.opts.ToolPoll == 0 {
		e.opts.ToolPoll = 50 * time.Millisecond
	}
	e.Host = testhost.New(t, &testhost.Options{Host: host.Options{Agents: agents}})
	e.serve()
	t.Cleanup(e.stop) // before the host closes
	e.AddExample("deploy")
	for name, src := range tools {
		e.AddJS(name, src)
	}
	if _, err := jsprogram.RegisterWorkflowTool(context.Background(), e.H, jsprogram.WorkflowTool{Agents: agents.List}); err != nil {
		t.Fatal(err)
	}
	return e
}

// serve starts the MCP server on the host, over HTTP.
func (e *env) serve() {
	e.t.Helper()
	srv, err := mcp.New(e.H, &e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.srv, e.hs = srv, testhost.Serve(e.t, srv.Handler())
}

// stop stops the HTTP server and the MCP server.
func (e *env) stop() {
	if e.srv != nil {
		e.hs.Close()
		e.srv.Close()
		e.srv = nil
	}
}

// restart stops the server and the host and opens them again on the same
// data, recovering the runs.
func (e *env) restart() {
	e.t.Helper()
	e.stop()
	e.Restart()
	e.serve()
	e.Recover()
}

func (e *env) runs() int {
	e.t.Helper()
	rs, err := e.H.Runs(context.Background(), store.RunFilter{})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(rs)
}

// bearer adds a token to every request.
type bearer struct {
	token  string
	header http.Header
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	for k, v := range b.header {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens an SDK client on an era; tasks declares the tasks
// extension (2026-07-28).
func (e *env) connect(era string, opts *sdk.ClientOptions, tasks bool) *sdk.ClientSession {
	e.t.Helper()
	cs, err := e.connectWith(era, opts, tasks, token)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cs.Close() })
	return cs
}

func (e *env) connectWith(era string, opts *sdk.ClientOptions, tasks bool, tok string) (*sdk.ClientSession, error) {
	var o sdk.ClientOptions
	if opts != nil {
		o = *opts
	}
	if tasks {
		o.Capabilities = &sdk.ClientCapabilities{}
		o.Capabilities.AddExtension(mcp.TasksExtension, nil)
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &o)
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel", "tasks/result", "tasks/list"} {
		if err := sdk.AddSendingCustomMethod[*taskReq, *taskRes](c, m); err != nil {
			e.t.Fatal(err)
		}
	}
	tr := &sdk.StreamableClientTransport{Endpoint: e.hs.URL, HTTPClient: &http.Client{Transport: bearer{token: tok}}, MaxRetries: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Connect(ctx, tr, &sdk.ClientSessionOptions{ProtocolVersion: era})
}

type taskReq struct {
	sdk.ParamsBase
	TaskID         string         `json:"taskId,omitempty"`
	InputResponses map[string]any `json:"inputResponses,omitempty"`
}

// taskRes is any of the task methods' results, in either era.
type taskRes struct {
	sdk.ResultBase
	ResultType        string                     `json:"resultType"`
	TaskID            string                     `json:"taskId"`
	Status            string                     `json:"status"`
	StatusMessage     string                     `json:"statusMessage"`
	InputRequests     map[string]json.RawMessage `json:"inputRequests"`
	Result            *toolRes                   `json:"result"`
	Tasks             []taskRes                  `json:"tasks"`
	Content           []json.RawMessage          `json:"content"`
	StructuredContent json.RawMessage            `json:"structuredContent"`
	IsError           bool                       `json:"isError"`
}

type toolRes struct {
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

func taskCall(t *testing.T, cs *sdk.ClientSession, method, id string, responses map[string]any) (*taskRes, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return sdk.CallCustomMethod[*taskReq, *taskRes](ctx, cs, method, &taskReq{TaskID: id, InputResponses: responses})
}

// poll polls tasks/get until the task's status is one of want.
func poll(t *testing.T, cs *sdk.ClientSession, id string, want ...string) *taskRes {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := taskCall(t, cs, "tasks/get", id, nil)
		if err != nil {
			t.Fatalf("tasks/get %s: %v", id, err)
		}
		for _, w := range want {
			if r.Status == w {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s, not %v", id, r.Status, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func call(t *testing.T, cs *sdk.ClientSession, tool string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return r
}

// taskID is the task a call's result names.
func taskID(t *testing.T, r *sdk.CallToolResult) string {
	t.Helper()
	if rt, ok := r.Meta["io.modelcontextprotocol/related-task"].(map[string]any); ok {
		if id, _ := rt["taskId"].(string); id != "" {
			return id
		}
	}
	if m, ok := r.StructuredContent.(map[string]any); ok {
		if id, _ := m["taskId"].(string); id != "" {
			return id
		}
	}
	t.Fatalf("no task in %+v", r)
	return ""
}

func structured(t *testing.T, v any, into any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if raw, ok := v.(json.RawMessage); ok {
		b = raw
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}
