package mcp_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	loopagents "github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/mcp"
	"github.com/sandflow/sandflow/store"
)

// newLoopEnv is an MCP server over a host whose one agent, deployer, is a
// loop agent on a scripted model: it calls echo, whose policy is always
// (each call waits for a person's approval), then answers with what the
// call gave it.
func newLoopEnv(t *testing.T) *env {
	t.Helper()
	model := httptest.NewServer(&loopagents.ScriptedModel{Steps: []loopagents.ScriptedModelStep{
		{ToolCalls: []loopagents.ScriptedToolCall{{Name: "echo", Arguments: `{"msg":"ship it"}`}}},
		{Text: "echo said: {result}"}}})
	t.Cleanup(model.Close)
	loop := &loopagents.Loop{Endpoint: loopagents.Endpoint{BaseURL: model.URL + "/v1", APIKeyEnv: "SANDFLOW_TEST_NO_KEY"}, Model: "scripted",
		ApprovalSecret: []byte("test-secret"),
		List:           []loopagents.LoopAgent{{Name: "deployer", Tools: []loopagents.LoopTool{{Tool: "echo", Approval: loopagents.ApprovalAlways}}}}}
	e := &env{t: t, opts: mcp.Options{Tokens: []string{token}, ToolPoll: 50 * time.Millisecond}}
	e.Host = testhost.New(t, &testhost.Options{Host: host.Options{Agents: loop, Engines: map[string]host.Engine{loopagents.LoopEngineName: loop.Engine()}}})
	e.AddJS("echo", tools["echo"])
	if err := loop.Attach(context.Background(), e.H); err != nil {
		t.Fatal(err)
	}
	e.serve()
	t.Cleanup(e.stop)
	return e
}

// A loop agent's tool call that needs approval, run as an MCP task: the
// question reaches the SDK client as an elicitation form showing the
// call's input, once (2025-11-25: an elicitation request to a client that
// polls; 2026-07-28: the task's input request, answered with
// tasks/update); approved, the tool runs and the model gets its result;
// denied, the tool does not run and the model is told so.
func TestLoopApprovalThroughElicitation(t *testing.T) {
	cases := []struct {
		option, reply string
		runs          int
	}{
		{"approve", `echo said: {"msg":"ship it"}`, 1},
		{"deny", "echo said: refused: a person denied this call; do not call it again with the same input", 0},
	}
	for _, era := range eras {
		for _, c := range cases {
			t.Run(era+"/"+c.option, func(t *testing.T) {
				e := newLoopEnv(t)
				form := askLoopApproval(t, e, era, c.option)
				schema, _ := json.Marshal(form.RequestedSchema)
				if !strings.HasPrefix(form.Message, "Approve echo?") || !strings.Contains(form.Message, `"msg": "ship it"`) ||
					!strings.Contains(string(schema), `{"const":"approve","title":"Approve"}`) || !strings.Contains(string(schema), `{"const":"deny","title":"Deny"}`) {
					t.Fatalf("form %q %s", form.Message, schema)
				}
				runs, err := e.H.Runs(context.Background(), store.RunFilter{Tool: loopagents.LoopToolName("deployer")})
				if err != nil || len(runs) != 1 {
					t.Fatalf("turns %v %v", runs, err)
				}
				ri, err := e.H.Run(context.Background(), runs[0].ID)
				var turn struct {
					Reply     string
					Approvals []loopagents.Approval
				}
				if err != nil || ri.Status != store.StatusCompleted || json.Unmarshal(ri.Result, &turn) != nil || turn.Reply != c.reply {
					t.Fatalf("turn %v %s %s", err, ri.Status, ri.Result)
				}
				if len(turn.Approvals) != c.runs {
					t.Errorf("%d signed approvals, want %d", len(turn.Approvals), c.runs)
				}
				if runs, err := e.H.Runs(context.Background(), store.RunFilter{Tool: "echo"}); err != nil || len(runs) != c.runs {
					t.Errorf("%d runs of echo, want %d (%v)", len(runs), c.runs, err)
				}
			})
		}
	}
}

// askLoopApproval calls the deployer as a task on era, answers its one
// question with option through the era's elicitation, waits for the task
// to complete, and returns the form the client was shown.
func askLoopApproval(t *testing.T, e *env, era, option string) *sdk.ElicitParams {
	t.Helper()
	answer := map[string]any{"answer": option}
	el := &elicitations{answer: func(*sdk.ElicitParams) *sdk.ElicitResult {
		return &sdk.ElicitResult{Action: "accept", Content: answer}
	}}
	opts := &sdk.ClientOptions{ElicitationHandler: el.handler}
	cs := e.connect(era, opts, era == mcpCurrent)
	id := taskID(t, call(t, cs, loopagents.LoopToolName("deployer"), map[string]any{"message": "deploy"}))
	if era == mcpCurrent {
		w := poll(t, cs, id, "input_required")
		if len(w.InputRequests) != 1 {
			t.Fatalf("input requests %v", w.InputRequests)
		}
		for key, raw := range w.InputRequests {
			var req struct {
				Method string
				Params sdk.ElicitParams
			}
			if err := json.Unmarshal(raw, &req); err != nil || req.Method != "elicitation/create" {
				t.Fatalf("input request %s: %v", raw, err)
			}
			el.mu.Lock()
			el.seen = append(el.seen, &req.Params)
			el.mu.Unlock()
			if _, err := taskCall(t, cs, "tasks/update", id, map[string]any{key: map[string]any{"action": "accept", "content": answer}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if done := poll(t, cs, id, "completed", "failed"); done.Status != "completed" {
		t.Fatalf("task %+v", done)
	}
	el.mu.Lock()
	defer el.mu.Unlock()
	if len(el.seen) != 1 {
		t.Fatalf("%d forms, want 1", len(el.seen))
	}
	return el.seen[0]
}
