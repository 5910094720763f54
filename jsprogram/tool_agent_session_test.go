package jsprogram_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
)

// An agent session takes several messages: each turn carries the earlier
// turns as history (from the run's log) and the session's model override;
// two messages sent while a turn runs go together as the next turn; file
// parts must be http(s) URLs; ctx.agents lists the agents.
func TestToolAgentSessions(t *testing.T) {
	a := newAgents(func(turn host.AgentTurn) abi.AgentResult {
		var more []string
		for _, m := range turn.More {
			more = append(more, m.Message)
		}
		model := ""
		if turn.Model != nil {
			model = turn.Model.Model
		}
		return abi.AgentResult{Status: abi.AgentCompleted, Reply: fmt.Sprintf("%s|%s|history=%d|more=%s|model=%s|parts=%d|session=%v",
			turn.Agent, turn.Message, len(turn.History), strings.Join(more, "+"), model, len(turn.Parts), turn.SessionID != "")}
	})
	f := newFixture(t, jsprogram.Limits{}, a)
	f.AddJS("sessions", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async execute(input, ctx) {
    "use workflow";
    const s = ctx.agent("echo", { model: "provider/model-x" });
    const one = await (await s.send("one")).result();
    const [r2, r3, r4] = await Promise.all([s.send("two"), s.send("three"), s.send("four")]);
    const two = await r2.result(), three = await r3.result(), four = await r4.result();
    const parts = await (await ctx.agent("echo").send([{ type: "text", text: "see" }, { type: "file", data: "https://files.example/r.pdf", mediaType: "application/pdf" }])).result();
    let inline;
    try { await ctx.agent("echo").send([{ type: "file", data: "data:application/pdf;base64,AAAA" }]); } catch (e) { inline = e.name + ": " + e.message; }
    return { replies: [one.reply, two.reply, three.reply, four.reply, parts.reply], inline, agents: Object.keys(ctx.agents).join(",") };
  } });`)
	ri := f.Call("sessions", `{}`)
	got := result[struct {
		Replies []string
		Inline  string
		Agents  string
	}](t, ri)
	want := []string{
		"echo|one|history=0|more=|model=provider/model-x|parts=0|session=true",
		"echo|two|history=1|more=|model=provider/model-x|parts=0|session=true",
		"echo|three|history=2|more=four|model=provider/model-x|parts=0|session=true",
		"echo|three|history=2|more=four|model=provider/model-x|parts=0|session=true",
		"echo||history=0|more=|model=|parts=2|session=true",
	}
	if strings.Join(got.Replies, "\n") != strings.Join(want, "\n") {
		t.Errorf("replies\n%s\nwant\n%s", strings.Join(got.Replies, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(got.Inline, "BadRequestError") || !strings.Contains(got.Inline, "not a data: URL") {
		t.Errorf("an inline file: %q", got.Inline)
	}
	if got.Agents != "ticket-triage,ticket-review,echo" {
		t.Errorf("ctx.agents: %q", got.Agents)
	}
	if total, distinct := a.turns(); total != 4 || distinct != 4 {
		t.Errorf("%d turns over %d ids, want 4", total, distinct)
	}
}
