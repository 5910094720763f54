package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

func TestMain(m *testing.M) { testhost.Main(m) }

// runProgram opens a host with the workflow tool and the backend, and runs
// a program to its end.
func runProgram(t *testing.T, b host.AgentBackend, opts *host.Options, js string) host.RunInfo {
	t.Helper()
	var o host.Options
	if opts != nil {
		o = *opts
	}
	o.Agents = b
	th := testhost.New(t, &testhost.Options{Host: o})
	if _, err := jsprogram.RegisterWorkflowTool(context.Background(), th.H, jsprogram.WorkflowTool{}); err != nil {
		t.Fatal(err)
	}
	return th.Program(js)
}

// provider is a fake chat-completions server: answer decides each
// response from the request.
type provider struct {
	mu       sync.Mutex
	requests []map[string]any
	headers  []http.Header
	answer   func(n int, req map[string]any) (int, string)
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, "not found", 404)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(raw, &req)
	p.mu.Lock()
	p.requests = append(p.requests, req)
	p.headers = append(p.headers, r.Header.Clone())
	n := len(p.requests)
	p.mu.Unlock()
	status, body := p.answer(n, req)
	if status == 429 {
		w.Header().Set("Retry-After", "0")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func completion(content string) string {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": content}, "finish_reason": "stop"}}})
	return string(b)
}

func openAI(t *testing.T, p *provider) *agents.OpenAI {
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	t.Setenv("SANDFLOW_TEST_KEY", "sk-test-123")
	return &agents.OpenAI{Endpoint: agents.Endpoint{BaseURL: srv.URL + "/v1", APIKeyEnv: "SANDFLOW_TEST_KEY"}, Model: "small-model", Timeout: 2 * time.Second,
		List: []agents.OpenAIAgent{{Name: "reviewer", Description: "reviews", Instructions: "You review plans."}, {Name: "big", Model: "big-model"}}}
}

// The OpenAI-compatible backend against a local server: a plain reply, a
// structured one that passes the schema and one that does not, a reply
// that is not JSON, a provider error, a refusal, a retried 429, and a
// timeout. Each failure reaches the program as a catchable error with its
// code.
func TestOpenAIBackend(t *testing.T) {
	const catch = `try { return { ok: await ctx.agent(%q, %s) }; } catch (e) { return { code: e.code, message: e.message }; }`
	for _, tc := range []struct {
		name, agent, options string
		answer               func(n int, req map[string]any) (int, string)
		want                 string // the program's result, compacted
		requests             int
	}{
		{"plain reply", "reviewer", `{ message: "check the plan" }`,
			func(int, map[string]any) (int, string) { return 200, completion("looks safe") },
			`{"ok":"looks safe"}`, 1},
		{"structured, valid", "reviewer", `{ message: "check", outputSchema: { type: "object", properties: { approved: { type: "boolean" } }, required: ["approved"] } }`,
			func(int, map[string]any) (int, string) { return 200, completion(`{"approved": true}`) },
			`{"ok":{"approved":true}}`, 1},
		{"structured, fails the schema", "reviewer", `{ message: "check", outputSchema: { type: "object", required: ["approved"] } }`,
			func(int, map[string]any) (int, string) { return 200, completion(`{"verdict": "yes"}`) },
			`{"code":"bad_structured_output"`, 1},
		{"structured, not JSON", "reviewer", `{ message: "check", outputSchema: { type: "object" } }`,
			func(int, map[string]any) (int, string) { return 200, completion(`Sure! {"approved": true}`) },
			`{"code":"bad_structured_output","message":"ctx.agent(\"reviewer\") failed: agent reviewer: the structured reply is not JSON`, 1},
		{"provider error", "reviewer", `{ message: "x" }`,
			func(int, map[string]any) (int, string) {
				return 400, `{"error": {"message": "model small-model does not exist", "type": "invalid_request_error"}}`
			},
			`{"code":"agent_failed","message":"ctx.agent(\"reviewer\") failed: agent reviewer: the provider answered 400 Bad Request: model small-model does not exist"}`, 1},
		{"refusal", "reviewer", `{ message: "x" }`,
			func(int, map[string]any) (int, string) {
				return 200, `{"choices": [{"message": {"content": null, "refusal": "I can't help with that."}, "finish_reason": "stop"}]}`
			},
			`{"code":"agent_failed","message":"ctx.agent(\"reviewer\") failed: agent reviewer refused: I can't help with that."}`, 1},
		{"429 then an answer", "big", `{ message: "x" }`,
			func(n int, _ map[string]any) (int, string) {
				if n == 1 {
					return 429, `{"error": {"message": "slow down"}}`
				}
				return 200, completion("second time lucky")
			},
			`{"ok":"second time lucky"}`, 2},
		{"timeout", "reviewer", `{ message: "x" }`,
			func(int, map[string]any) (int, string) {
				time.Sleep(3 * time.Second)
				return 200, completion("too late")
			},
			`{"code":"agent_timeout"`, 1},
		{"unknown agent", "nobody", `{ message: "x" }`, nil, `{"code":"agent_unavailable"`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &provider{answer: tc.answer}
			ri := runProgram(t, openAI(t, p), nil, strings.Replace(strings.Replace(catch, "%q", `"`+tc.agent+`"`, 1), "%s", tc.options, 1))
			if ri.Status != store.StatusCompleted {
				t.Fatalf("run %s: %+v", ri.Status, ri.Error)
			}
			var got any
			_ = json.Unmarshal(ri.Result, &got)
			compact, _ := json.Marshal(got)
			if !strings.HasPrefix(string(compact), tc.want) {
				t.Errorf("result %s\nwant   %s...", compact, tc.want)
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.requests) != tc.requests {
				t.Fatalf("%d requests, want %d", len(p.requests), tc.requests)
			}
			if tc.requests == 0 {
				return
			}
			req, hdr := p.requests[0], p.headers[0]
			if hdr.Get("Authorization") != "Bearer sk-test-123" || !strings.HasPrefix(hdr.Get("Idempotency-Key"), ri.ID+":") {
				t.Errorf("headers %v", hdr)
			}
			msgs, _ := req["messages"].([]any)
			if tc.agent == "reviewer" {
				if req["model"] != "small-model" || len(msgs) != 2 || msgs[0].(map[string]any)["content"] != "You review plans." || msgs[0].(map[string]any)["role"] != "system" {
					t.Errorf("request %v", req)
				}
			} else if req["model"] != "big-model" || len(msgs) != 1 {
				t.Errorf("request %v", req)
			}
			rf, hasFormat := req["response_format"].(map[string]any)
			if strings.Contains(tc.options, "outputSchema") != hasFormat || hasFormat && rf["type"] != "json_schema" {
				t.Errorf("response_format %v", req["response_format"])
			}
		})
	}
}

// External fulfilment: a turn waits as a work item until the platform
// claims and completes it; a second claimer is refused while the lease
// holds; a turn that stops waiting takes its item away, and comes back
// under the same id when the host sends it again.
func TestExternalBackend(t *testing.T) {
	ext := agents.NewExternal([]host.AgentInfo{{Name: "researcher", Description: "run by the platform"}})
	ctx := context.Background()
	// A turn cut off by a restart takes its item away; the host sends it
	// again under the same id, and it is posted again.
	cut, cancelCut := context.WithCancel(ctx)
	cutDone := make(chan error, 1)
	go func() {
		_, err := ext.Turn(cut, host.AgentTurn{RunID: "run_a", TurnID: "run_a:1", Agent: "researcher", Message: "find X"})
		cutDone <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); len(ext.Items("", false)) == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cancelCut()
	if err := <-cutDone; !errors.Is(err, context.Canceled) {
		t.Errorf("turn after cancel: %v", err)
	}
	if got := ext.Items("", false); len(got) != 0 {
		t.Errorf("items after the run stopped waiting: %+v", got)
	}
	res := make(chan abi.AgentResult, 1)
	go func() {
		r, _ := ext.Turn(ctx, host.AgentTurn{RunID: "run_a", TurnID: "run_a:1", Agent: "researcher", Message: "find X", OutputSchema: json.RawMessage(`{"type":"object"}`)})
		res <- r
	}()
	var items []agents.WorkItem
	for deadline := time.Now().Add(5 * time.Second); len(items) == 0 && time.Now().Before(deadline); {
		select {
		case <-ext.Wait():
		case <-time.After(100 * time.Millisecond):
		}
		items = ext.Items("researcher", true)
	}
	if len(items) != 1 || items[0].ID != "run_a:1" || items[0].Message != "find X" {
		t.Fatalf("items %+v", items)
	}
	if _, err := ext.Claim("run_a:1", "w1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := ext.Claim("run_a:1", "w2", time.Minute); !errors.Is(err, agents.ErrClaimed) {
		t.Errorf("a second claim: %v", err)
	}
	if got := ext.Items("", true); len(got) != 0 {
		t.Errorf("a claimed item is listed as unclaimed: %+v", got)
	}
	if err := ext.Complete("run_a:1", "w2", "stolen", nil); !errors.Is(err, agents.ErrClaimed) {
		t.Errorf("completion by a worker without the lease: %v", err)
	}
	if err := ext.Complete("run_a:1", "w1", "", json.RawMessage(`{"x": `)); !errors.Is(err, agents.ErrBadResult) {
		t.Errorf("completion with bad JSON: %v", err)
	}
	if err := ext.Complete("run_a:1", "w1", "found it", json.RawMessage(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.Status != abi.AgentCompleted || r.Reply != "found it" || string(r.Data) != `{"x":1}` {
		t.Errorf("turn result %+v", r)
	}
	if err := ext.Fail("run_a:1", "w1", "again"); !errors.Is(err, agents.ErrUnknownItem) {
		t.Errorf("settling a settled item: %v", err)
	}
	if r, _ := ext.Turn(ctx, host.AgentTurn{TurnID: "x:1", Agent: "nobody"}); r.Error == nil || r.Error.Code != abi.AgentErrUnavailable {
		t.Errorf("unknown agent: %+v", r)
	}
}

// An agents file: scripted agents with rules, an external one, and an
// OpenAI one; and the mistakes a file can make.
func TestAgentsFile(t *testing.T) {
	ctx := context.Background()
	b, err := agents.Parse(ctx, []byte(`{
	  "openai": {"baseURL": "http://127.0.0.1:1/v1", "model": "m"},
	  "agents": [
	    {"name": "triage", "description": "sorts", "reply": "triaged {message}", "data": {"queue": "default"},
	     "rules": [{"contains": "outage", "reply": "paged", "data": {"queue": "urgent"}}, {"match": "^refund", "fail": "refunds go elsewhere"}]},
	    {"name": "researcher", "kind": "external"},
	    {"name": "reviewer", "kind": "openai", "instructions": "review"},
	    {"name": "helper", "kind": "loop", "instructions": "use tools", "tools": [{"tool": "render"}, {"agent": "triage", "name": "ask_triage"}], "maxSteps": 5}]}`))
	if err != nil {
		t.Fatal(err)
	}
	list, _ := b.Agents(ctx)
	if len(list) != 4 || list[0].Name != "triage" || list[1].Name != "reviewer" || list[2].Name != "helper" || list[3].Name != "researcher" || b.External == nil ||
		b.Loop == nil || len(b.Loop.List) != 1 || b.Loop.List[0].MaxSteps != 5 || len(b.Loop.List[0].Tools) != 2 || b.Loop.Model != "m" || b.Loop.Delegates == nil {
		t.Fatalf("agents %+v, external %v", list, b.External)
	}
	for _, tc := range []struct{ msg, schema, reply, data, fail string }{
		{"ticket 7", "", "triaged ticket 7", "", ""},
		{"big outage", `{"type":"object"}`, "paged", `{"queue": "urgent"}`, ""},
		{"refund please", "", "", "", "refunds go elsewhere"},
		{"ticket 8", `{"type":"object"}`, "triaged ticket 8", `{"queue": "default"}`, ""},
	} {
		r, err := b.Turn(ctx, host.AgentTurn{TurnID: "r:1", Agent: "triage", Message: tc.msg, OutputSchema: json.RawMessage(tc.schema)})
		if err != nil {
			t.Fatal(err)
		}
		if tc.fail != "" {
			if r.Status != abi.AgentFailed || r.Error.Message != tc.fail {
				t.Errorf("%q: %+v", tc.msg, r)
			}
			continue
		}
		if r.Status != abi.AgentCompleted || r.Reply != tc.reply || string(r.Data) != tc.data {
			t.Errorf("%q: %+v (data %s)", tc.msg, r, r.Data)
		}
	}
	for _, tc := range []struct{ file, want string }{
		{`{"agents": [{"name": "a", "kind": "robot"}]}`, `kind "robot" is not scripted, openai, loop or external`},
		{`{"agents": [{"name": "a", "kind": "openai"}]}`, `the file has no "openai" settings`},
		{`{"agents": [{"name": "a", "kind": "external", "reply": "x"}]}`, "are for scripted agents, not external ones"},
		{`{"agents": [{"name": "a", "instructions": "x"}]}`, "are for openai and loop agents, not scripted ones"},
		{`{"agents": [{"name": "a", "rules": [{"match": "("}]}]}`, "rule 1: error parsing regexp"},
		{`{"agents": [{"name": "a", "rules": [{"reply": "x"}]}]}`, "rule 1 has neither contains nor match"},
		{`{"agents": [{"name": "a"}, {"name": "a", "kind": "external"}]}`, `agent "a" is listed twice`},
		{`{"agents": [{"reply": "x"}]}`, "a scripted agent has no name"},
		{`{"agents": [], "apiKey": "sk-..."}`, `unknown field "apiKey"`},
		{`{"agents": [{"name": "a", "kind": "loop"}]}`, `a loop agent, but the file has no "openai" settings`},
		{`{"agents": [{"name": "a", "tools": [{"tool": "t"}]}]}`, "are for loop agents, not scripted ones"},
		{`{"openai": {}, "agents": [{"name": "a", "kind": "loop", "tools": [{"tool": "t", "agent": "b"}]}]}`, "tool 1 names neither or both of tool and agent"},
		{`{"openai": {}, "agents": [{"name": "a", "kind": "loop", "tools": [{"tool": "t"}, {"agent": "t"}]}]}`, `two tools are called "t"`},
		{`{"openai": {}, "agents": [{"name": "a", "kind": "loop", "tools": [{"tool": "t", "approval": "sometimes"}]}]}`, `approval "sometimes" is not never, always or once`},
		{`{"openai": {}, "agents": [{"name": "a", "kind": "loop", "tools": [{"tool": "t", "modelOutput": "url"}]}]}`, `modelOutput "url" is not a JSON pointer`},
		{`{"openai": {}, "agents": [{"name": "a", "kind": "loop", "tools": [{"tool": "search_tools"}]}]}`, "the built-in tool that finds deferred tools"},
		{`{"openai": {}, "agents": [{"name": "a", "kind": "loop", "tools": [{"tool": "t", "approvalRules": [{"field": "x", "match": "(", "approval": "always"}]}]}]}`, "approval rule 1: error parsing regexp"},
	} {
		if _, err := agents.Parse(ctx, []byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.file, err, tc.want)
		}
	}
	path := filepath.Join(t.TempDir(), "agents.json")
	os.WriteFile(path, []byte(`{"agents": [{"name": "a", "kind": "robot"}]}`), 0o600)
	if _, err := agents.Load(ctx, path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Load names the file in its error: %v", err)
	}
}

// A workflow program's turn with an external agent waits until the
// platform completes the work item.
func TestExternalTurnInARun(t *testing.T) {
	ext := agents.NewExternal([]host.AgentInfo{{Name: "researcher"}})
	var claimed atomic.Bool
	go func() {
		for {
			<-ext.Wait()
			for _, it := range ext.Items("researcher", true) {
				if _, err := ext.Claim(it.ID, "platform", 0); err == nil && claimed.CompareAndSwap(false, true) {
					ext.Complete(it.ID, "platform", "the answer to "+it.Message, nil)
				}
			}
		}
	}()
	ri := runProgram(t, ext, nil, `return await ctx.agent("researcher", { message: "life" });`)
	if ri.Status != store.StatusCompleted || string(ri.Result) != `"the answer to life"` {
		t.Fatalf("run %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
}
