package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/store"
)

// A run's agent turn that a loop agent ran links the turn's run, and the
// turn's run links the tool run its step started; the tool run, which
// started none, links nothing.
func TestRunPageLinksAnAgentTurnsRun(t *testing.T) {
	model := httptest.NewServer(&agents.ScriptedModel{Steps: []agents.ScriptedModelStep{
		{ToolCalls: []agents.ScriptedToolCall{{Name: "upper", Arguments: `{"text":"abc"}`}}},
		{Text: "looks fine: {result}"}}})
	t.Cleanup(model.Close)
	loop := &agents.Loop{Endpoint: agents.Endpoint{BaseURL: model.URL + "/v1", APIKeyEnv: "SANDFLOW_TEST_NO_KEY"}, Model: "m",
		List: []agents.LoopAgent{{Name: "reviewer", Description: "reviews notes", Instructions: "Review the notes.",
			Tools: []agents.LoopTool{{Tool: "upper"}}}}}
	f := newFixtureWith(t, nil, &testhost.Options{Host: host.Options{Agents: loop,
		Engines: map[string]host.Engine{agents.LoopEngineName: loop.Engine()}}})
	ctx := context.Background()
	f.AddJS("upper", `defineWorkflowTool({ description: "upper-cases text",
  inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  async execute({ text }) { "use workflow"; return text.toUpperCase(); } });`)
	if err := loop.Attach(ctx, f.H); err != nil {
		t.Fatal(err)
	}
	f.AddJS("review", `defineWorkflowTool({
  description: "Asks the reviewer.",
  inputSchema: { type: "object" },
  async execute(input, ctx) {
    "use workflow";
    const turn = await ctx.agent("reviewer").send("Review: ship it");
    const r = await turn.result();
    return { status: r.status, reply: r.reply };
  },
});`)
	ri := f.Call("review", `{}`)
	ri = f.waitRun(ri.ID, func(ri host.RunInfo) bool { return ri.Status.Terminal() })
	if ri.Status != store.StatusCompleted || string(ri.Result) != `{"status":"completed","reply":"looks fine: \"ABC\""}` {
		t.Fatalf("review: %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
	turns, err := f.H.Runs(ctx, store.RunFilter{Tool: agents.LoopToolName("reviewer")})
	if err != nil || len(turns) != 1 {
		t.Fatalf("the reviewer's turn runs: %v %v", turns, err)
	}
	cl := f.client()
	f.signIn(cl, apiToken)
	body, code := f.get(cl, "/console/runs/"+ri.ID)
	if code != http.StatusOK {
		t.Fatalf("run page: %d", code)
	}
	link := `<a href="/console/runs/` + turns[0].ID + `" data-child-run>`
	// The turn's two entries (sent, settled) link its run.
	if n := strings.Count(body, link); n != 2 {
		t.Errorf("the run page links the turn's run %s %d times, want 2 (agent_sent, agent_settled)\n%s", turns[0].ID, n, body)
	}
	uppers, err := f.H.Runs(ctx, store.RunFilter{Tool: "upper"})
	if err != nil || len(uppers) != 1 {
		t.Fatalf("the upper runs: %v %v", uppers, err)
	}
	body, code = f.get(cl, "/console/runs/"+turns[0].ID)
	if code != http.StatusOK {
		t.Fatalf("the turn's run page: %d", code)
	}
	toUpper := `<a href="/console/runs/` + uppers[0].ID + `" data-child-run>`
	if n, all := strings.Count(body, toUpper), strings.Count(body, "data-child-run"); n == 0 || n != all {
		t.Errorf("the turn's run page links the upper run %s %d times and %d links in all, want all to it\n%s", uppers[0].ID, n, all, body)
	}
	if body, _ := f.get(cl, "/console/runs/"+uppers[0].ID); strings.Contains(body, "data-child-run") {
		t.Error("the upper run's page links a child run it did not make")
	}
}
