package agents_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/store"
)

// gatedTask is a JavaScript task tool that waits for a person's go.
const gatedTask = `defineWorkflowTool({ description: "checks the build, as a task",
  inputSchema: { type: "object", properties: { build: { type: "string" } }, required: ["build"] },
  async task({ build }, ctx) { "use workflow";
    const a = await ctx.ask({ prompt: "Is " + build + " green?", options: [{ id: "yes", label: "Yes" }] });
    return { build, green: a.optionId === "yes" }; } });`

// userResults are the user messages of a request that carry task results.
func userResults(req chatReq) []string {
	var out []string
	for _, m := range req.Messages {
		if s, _ := m.Content.(string); m.Role == "user" && strings.Contains(s, "<task_result") {
			out = append(out, s)
		}
	}
	return out
}

// A loop agent's call of a task tool: the model gets the task's receipt
// at once and answers while the task works; the turn does not end, but
// waits for the task, whose result reaches the model as a <task_result>
// user message, once; then the model answers and the turn ends. The task
// runs once, under an id made from its step.
func TestLoopTaskToolResultArrivesLater(t *testing.T) {
	m := &fakeModel{reply: func(n int, req chatReq) (int, string) {
		if rs := userResults(req); len(rs) > 0 {
			return 200, reply("the check says " + strings.Join(rs, "|"))
		}
		if req.toolResults()["c1"] != "" {
			return 200, reply("I started the check; its result will follow")
		}
		return 200, reply("", call{"c1", "check", `{"build":"b7"}`})
	}}
	lh := newLoopHost(t, m, agents.LoopAgent{Name: "checker", Tools: []agents.LoopTool{{Tool: "check"}}})
	lh.AddJS("check", gatedTask)
	ctx := context.Background()
	ri, err := lh.H.Start(ctx, agents.LoopToolName("checker"), json.RawMessage(`{"message":"check b7"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	go lh.H.Drive(ctx, ri.ID)
	var q host.Question
	testhost.WaitUntil(t, "the model to answer while the task waits", func() bool {
		qs, _ := lh.H.Questions(ctx, true)
		if len(qs) == 1 {
			q = qs[0]
		}
		return m.count() == 2 && len(qs) == 1
	})
	if receipt := m.request(1).toolResults()["c1"]; !strings.HasPrefix(receipt, "Started task ") || !strings.Contains(receipt, "<task_result>") {
		t.Fatalf("the model was told %q", receipt)
	}
	if cur, _ := lh.H.Run(ctx, ri.ID); cur.Status.Terminal() {
		t.Fatalf("the turn ended while its task worked: %s %s", cur.Status, cur.Result)
	}
	if _, err := lh.H.AnswerAsk(ctx, q.ID, host.Answer{OptionID: "yes"}); err != nil {
		t.Fatal(err)
	}
	testhost.WaitUntil(t, "the turn to end", func() bool {
		ri, err = lh.H.Run(ctx, ri.ID)
		return err == nil && ri.Status.Terminal()
	})
	var turn struct {
		Reply string
		Steps int
	}
	if ri.Status != store.StatusCompleted || json.Unmarshal(ri.Result, &turn) != nil {
		t.Fatalf("turn %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
	if m.count() != 3 || turn.Steps != 3 {
		t.Fatalf("%d model calls, %d steps, want 3", m.count(), turn.Steps)
	}
	rs := userResults(m.request(2))
	if len(rs) != 1 || !strings.HasPrefix(rs[0], `<task_result id="`) || !strings.Contains(rs[0], `tool="check" status="completed">{"build":"b7","green":true}</task_result>`) ||
		turn.Reply != "the check says "+rs[0] {
		t.Fatalf("results %q, reply %q", rs, turn.Reply)
	}
	if runs, err := lh.H.Runs(ctx, store.RunFilter{Tool: "check"}); err != nil || len(runs) != 1 || runs[0].ID != agents.StepRunIDs(ri.ID, stepOp(t, lh.H, ri.ID, "tool:check"))[0] {
		t.Fatalf("runs of the task tool: %+v %v", runs, err)
	}
}

// stepOp is the position of the run's step called name.
func stepOp(t *testing.T, h *host.Host, runID, name string) uint32 {
	t.Helper()
	evs, err := h.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		var d struct {
			Op   uint32
			Name string
		}
		if e.Kind == host.EvStepStarted && json.Unmarshal(e.Data, &d) == nil && d.Name == name {
			return d.Op
		}
	}
	t.Fatalf("no step %s", name)
	return 0
}
