package jsprogram

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sandflow/sandflow/host"
)

// WorkflowToolName is the name the workflow tool is registered under by
// default.
const WorkflowToolName = "workflow"

// WorkflowTool describes a workflow tool to register.
type WorkflowTool struct {
	// Name is the tool's name; empty means WorkflowToolName.
	Name string
	// MaxSubagents is how many ctx.agent calls one run may make, 1-128;
	// 0 means 100.
	MaxSubagents int
	// Agents are listed in the tool's description, so the model knows
	// whom it may call (agents hidden from the model as tools included).
	Agents []host.AgentInfo
}

// Manifest returns the tool's manifest and module. Runs are tasks: the
// caller gets a receipt, and the program's return value comes as the
// task's result.
func (t WorkflowTool) Manifest() (host.Manifest, []byte, error) {
	if t.Name == "" {
		t.Name = WorkflowToolName
	}
	n := t.MaxSubagents
	if n == 0 {
		n = DefaultLimits.MaxSubagents
	}
	if n < 1 || n > MaxSubagentsCap {
		return host.Manifest{}, nil, fmt.Errorf("%w: maxSubagents must be an integer from 1 through %d, not %d", host.ErrBadManifest, MaxSubagentsCap, n)
	}
	module, _ := json.Marshal(toolConfig{Sandflow: toolKind, MaxSubagents: &n})
	var b strings.Builder
	fmt.Fprintf(&b, "Run a JavaScript program that delegates to agents. The input `js` is the body of an async function; "+
		"its only capability is `await ctx.agent(name, { message, outputSchema? })`, which sends `message` to a new session with the "+
		"named agent and resolves to its reply (a string), or to the structured value when `outputSchema` (a JSON Schema object) is given. "+
		"Pending calls in a batch run at once, so `Promise.all` fans out. Await every call: one still pending when the program returns fails it. "+
		"A failed or invalid call rejects with a WorkflowProgramAgentError (its `code` says why), which await throws and .catch catches. "+
		"The return value passes through JSON.stringify and is the result. "+
		"No imports, timers, eval or I/O; Math.random and Date are replay-safe. "+
		"Limits: %d agent calls, 1 MiB return value and agent input as JSON, 4 MiB reply, 256 KiB source, 256 MiB of agent inputs and replies per start or resume, "+
		"30 s of JavaScript and 5 min in all per start or resume (waiting for agents counts toward neither).", n)
	if len(t.Agents) > 0 {
		b.WriteString("\nAgents:")
		for _, a := range t.Agents {
			fmt.Fprintf(&b, "\n- %s", a.Name)
			if a.Description != "" {
				fmt.Fprintf(&b, ": %s", a.Description)
			}
		}
	}
	m := host.Manifest{
		Name:        t.Name,
		Description: b.String(),
		Entry:       host.EntryTask,
		Engine:      EngineName,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"js":{"type":"string","description":"The body of an async function (ctx) => { ... }: statements, await, and a return."}},"required":["js"],"additionalProperties":false}`),
	}
	return m, module, nil
}

// RegisterWorkflowTool adds the workflow tool to a host that has this
// engine under EngineName (host.Options.Engines). Registering it again
// adds a version.
func RegisterWorkflowTool(ctx context.Context, h *host.Host, t WorkflowTool) (host.Plugin, error) {
	m, module, err := t.Manifest()
	if err != nil {
		return host.Plugin{}, err
	}
	return h.AddPlugin(ctx, module, m)
}
