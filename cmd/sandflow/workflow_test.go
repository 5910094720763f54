package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/store"
)

// The workflow tool from the command line: enable it with a budget, call
// it with a fan-out program against scripted agents, and see a program
// error come back typed (exit 3, the error object in --json).
func TestCLIWorkflowTool(t *testing.T) {
	c := newCLI(t)
	agents := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(agents, []byte(`{"agents": [
		{"name": "ticket-triage", "description": "sorts tickets", "reply": "triaged {message}"},
		{"name": "ticket-review", "reply": "unused", "data": {"ok": true}, "delayMs": 50}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := c.ok("--agents", agents, "workflow", "enable", "--max-subagents", "2"); !strings.Contains(out, "2 agent calls") {
		t.Fatalf("enable: %s", out)
	}
	tools := c.ok("tools", "--json")
	if !strings.Contains(tools, "ticket-triage: sorts tickets") {
		t.Fatalf("the tool's description does not list the agents: %s", tools)
	}
	in, _ := json.Marshal(map[string]string{"js": `const [triage, review] = await Promise.all([
  ctx.agent("ticket-triage", { message: "[7]" }),
  ctx.agent("ticket-review", { message: "[7]", outputSchema: { type: "object" } }),
]);
return { triage, review };`})
	out := c.ok("--agents", agents, "--json", "call", "workflow", "--input", string(in), "--wait", "30s")
	var ri struct {
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &ri); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if ri.Status != "completed" || compact(t, ri.Result) != `{"triage":"triaged [7]","review":{"ok":true}}` {
		t.Fatalf("run: %s", out)
	}
	// A third call is over the budget of 2.
	in, _ = json.Marshal(map[string]string{"js": `for (let i = 0; i < 3; i++) await ctx.agent("ticket-triage", { message: "" + i });`})
	out, errs, code := c.run("--agents", agents, "--json", "call", "workflow", "--input", string(in), "--wait", "30s")
	if code != 3 || !strings.Contains(errs, "call 3 is over") {
		t.Fatalf("over budget: exit %d, want 3: %s", code, errs)
	}
	var failed struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Details struct {
				Code string `json:"code"`
			} `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &failed); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if failed.Error.Type != "WorkflowProgramError" || failed.Error.Details.Code != "max_subagents" || !strings.Contains(failed.Error.Message, "call 3") {
		t.Fatalf("over budget: %s", out)
	}
}

// An authored JavaScript tool from the command line: added from its
// script alone (a second add is version 2), called, answered from another
// process, and its history replayed against the script and against the
// Go twin, which makes the same ops.
func TestCLIJavaScriptTool(t *testing.T) {
	c := newCLI(t)
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "examples", "js", "deploy.js")
	if out := c.ok("plugin", "add", script); !strings.Contains(out, "added deploy version 1") || !strings.Contains(out, "entry execute") {
		t.Fatalf("add: %s", out)
	}
	if out := c.ok("plugin", "add", script, "--name", "deploy"); !strings.Contains(out, "added deploy version 2") {
		t.Fatalf("second add: %s", out)
	}
	bad := filepath.Join(t.TempDir(), "bad.js")
	if err := os.WriteFile(bad, []byte("defineWorkflowTool({ description: 'x', inputSchema: { type: 'object' },\n  async execute() { return 1; } });"), 0o600); err != nil {
		t.Fatal(err)
	}
	if errs := c.expect(exitInvalid, "plugin", "add", bad); !strings.Contains(errs, `"use workflow"`) {
		t.Errorf("a script without the directive: %s", errs)
	}
	ri := decode[host.RunInfo](t, c.ok("call", "deploy", "--input", `{"service":"api"}`, "--json"))
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].AskID == "" || ri.Version != 2 {
		t.Fatalf("call: %+v", ri)
	}
	done := decode[host.RunInfo](t, c.ok("asks", "answer", ri.Waiting[0].AskID, "approve", "--json"))
	if done.Status != store.StatusCompleted || !strings.Contains(compact(t, done.Result), `"deployed":true`) {
		t.Fatalf("answer: %+v", done)
	}
	if out := c.ok("replay", ri.ID); !strings.Contains(out, "consistent") {
		t.Errorf("replay:\n%s", out)
	}
	hist := filepath.Join(t.TempDir(), "run.history.zst")
	c.ok("runs", "export", ri.ID, "-o", hist)
	// The Go twin makes the same ops, so the script's history replays
	// against it.
	goWasm, err := guestbuild.Build(filepath.Join(root, "examples", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	if out := c.ok("replay", "--history", hist, "--plugin", goWasm); !strings.Contains(out, "consistent") {
		t.Errorf("the script's history against the Go twin:\n%s", out)
	}
	if out := c.ok("replay", "--history", hist, "--plugin", script); !strings.Contains(out, "consistent") {
		t.Errorf("the history against the script:\n%s", out)
	}
}

// The JavaScript examples that delegate to agents run against the agents
// file shipped beside them.
func TestCLIExamplesAgentsFile(t *testing.T) {
	c := newCLI(t)
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	agents := filepath.Join(root, "examples", "agents.json")
	for _, s := range []string{"router", "release-notes"} {
		c.ok("--agents", agents, "plugin", "add", filepath.Join(root, "examples", "js", s+".js"))
	}
	ri := decode[host.RunInfo](t, c.ok("--agents", agents, "--json", "call", "router", "--input", `{"question":"where is my refund?"}`, "--wait", "30s"))
	if ri.Status != store.StatusCompleted || !strings.Contains(compact(t, ri.Result), `"agent":"billing"`) {
		t.Fatalf("router: %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
	ri = decode[host.RunInfo](t, c.ok("--agents", agents, "--json", "call", "release-notes", "--input", `{"notes":"v1.2: faster replays"}`, "--wait", "30s"))
	if ri.Status != store.StatusCompleted || !strings.Contains(compact(t, ri.Result), `"published":true`) {
		t.Fatalf("release-notes, approved: %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
	ri = decode[host.RunInfo](t, c.ok("--agents", agents, "--json", "call", "release-notes", "--input", `{"notes":"v1.3: TODO"}`, "--wait", "30s"))
	if ri.Status != store.StatusCompleted || !strings.Contains(compact(t, ri.Result), `"published":false`) {
		t.Fatalf("release-notes, refused: %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
}
