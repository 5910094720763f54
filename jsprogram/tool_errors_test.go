package jsprogram_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

const okTool = `defineWorkflowTool({ description: "ok", inputSchema: { type: "object" },
  async execute(input) { "use workflow"; return input; } });`

// Scripts that cannot be a tool are refused at registration with what is
// wrong and where, and nothing is stored; the host goes on serving.
func TestToolDefinitionErrors(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{JSTime: 500 * time.Millisecond, MemoryBytes: 256 << 20}, nil)
	ctx := context.Background()
	for _, tc := range []struct{ name, src, want string }{
		{"empty", "  \n", "the script is empty"},
		{"no definition", `const x = 1;`, "never called defineWorkflowTool"},
		{"two entries", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
			async execute() { "use workflow"; }, async task() { "use workflow"; } });`, "found execute and task"},
		{"no entry", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" } });`, "found none"},
		{"defined twice", okTool + okTool, "it was called twice"},
		{"no directive", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
			async execute(input) { return input; } });`, `must start with the "use workflow" directive`},
		{"unknown member", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" }, execute() {}, approval: true });`, `unknown option "approval"`},
		{"no description", `defineWorkflowTool({ inputSchema: { type: "object" }, async execute() { "use workflow"; } });`, "description must be a non-empty string"},
		{"syntax error", "const a = 1;\nconst b = ;\n", "Unexpected token ; (line 2, column 11)"},
		{"async generator", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
			async *execute() { "use workflow"; yield 1; } });`, "Unexpected token * (line 2, column 11); async generators are not supported here: report progress with ctx.progress(value)"},
		{"step not async", okTool + "\nfunction plan() {\n  'use step';\n}", "step plan must be an async function, not a generator or a plain function (line 3, column 10)"},
		{"step twice", okTool + "\nasync function plan() { 'use step'; }\nasync function plan() { 'use step'; }", "step plan is declared twice (line 4, column 16)"},
		{"throws", okTool + "\n\nnull.x;", "TypeError"},
		{"reserved name", okTool + "\nlet __sandflow = 1;", "__sandflow"},
		{"infinite loop", okTool + "\nfor (;;) {}", "[js_time_limit]"},
		{"catastrophic allocation", okTool + "\n'x'.repeat(2**40);", "[memory_limit]"},
		{"imports", `import { sleep } from "eve/workflow";` + okTool, "SyntaxError"},
		{"schema not an object", `defineWorkflowTool({ description: "d", inputSchema: { type: "string" }, async execute() { "use workflow"; } });`, `inputSchema must have "type": "object"`},
		{"generator entry", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" }, *serve() { "use workflow"; } });`, "not a generator"},
		{"serve with its own taskId", `defineWorkflowTool({ description: "d", inputSchema: { type: "object", properties: { taskId: { type: "string" } } }, async serve() { "use workflow"; } });`, "declares taskId"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jsprogram.RegisterTool(ctx, f.H, "bad", []byte(tc.src))
			var pe *host.PluginError
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if !errors.As(err, &pe) && !errors.Is(err, host.ErrBadManifest) {
				t.Errorf("%v is neither a *PluginError nor ErrBadManifest", err)
			}
			// The host still works.
			ri := f.run(`return 1 + 1;`)
			if got := result[int](t, ri); got != 2 {
				t.Errorf("a program after the refusal returned %d", got)
			}
		})
	}
	ps, err := f.H.Plugins(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == "bad" {
			t.Errorf("a refused script was stored: %+v", p)
		}
	}
}

// A manifest that describes another tool than its script defines is
// refused: the host would check inputs against a schema the script does
// not expect.
func TestToolManifestMustMatchScript(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	ctx := context.Background()
	def, err := f.JS.DefineTool(ctx, []byte(okTool))
	if err != nil {
		t.Fatal(err)
	}
	for _, change := range []func(m *host.Manifest){
		func(m *host.Manifest) { m.Description = "something else" },
		func(m *host.Manifest) { m.Entry = host.EntryTask },
		func(m *host.Manifest) { m.InputSchema = json.RawMessage(`{"type":"object","required":["x"]}`) },
	} {
		m := def.Manifest("ok")
		change(&m)
		_, err := f.H.AddPlugin(ctx, []byte(okTool), m)
		var pe *host.PluginError
		if !errors.As(err, &pe) || pe.Reason != "manifest_mismatch" {
			t.Errorf("got %v, want a manifest_mismatch *PluginError", err)
		}
	}
	// Key order and spacing of the schema do not matter.
	m := def.Manifest("ok")
	m.InputSchema = json.RawMessage(`{ "type" : "object" }`)
	if _, err := f.H.AddPlugin(ctx, []byte(okTool), m); err != nil {
		t.Fatal(err)
	}
}

// Steps fail and retry per their policy: RetryableError waits retryAfter,
// FatalError and maxRetries = 0 do not retry, and the body catches the
// step's error with its class and message.
func TestToolStepRetries(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{JSTime: 2 * time.Second}, nil)
	f.AddJS("flaky", `defineWorkflowTool({ description: "flaky", inputSchema: { type: "object" },
  async execute({ mode }) {
    "use workflow";
    try {
      return { value: await (mode === "retry" ? busy(3) : mode === "fatal" ? fatal() : mode === "spin" ? spin() : oops()) };
    } catch (e) {
      return { caught: e.name, message: e.message, isFatal: e instanceof FatalError };
    }
  } });

async function busy(n) {
  "use step";
  const { attempt } = getStepMetadata();
  console.log("attempt " + attempt);
  if (attempt < n) throw new RetryableError("busy on attempt " + attempt, { retryAfter: "30s" });
  return "done on attempt " + attempt;
}
async function fatal() { "use step"; console.log("fatal ran"); throw new FatalError("no such service"); }
async function oops() { "use step"; console.log("oops ran"); null.x; }
oops.maxRetries = 0;
async function spin() { "use step"; for (;;) {} }
spin.retry = { maxAttempts: 2, initialBackoffMs: 1 };`)
	ctx := context.Background()

	ri := f.Call("flaky", `{"mode":"retry"}`)
	for i := 0; i < 2; i++ {
		waitsOn(t, ri, "step_retry")
		if w := ri.Waiting[0]; w.Until == nil || w.Until.Sub(time.Now()) < 25*time.Second {
			t.Errorf("retry %d is due at %v, want about 30s away (retryAfter)", i+1, w.Until)
		}
		ri = f.fire(ri.ID, 31*time.Second)
		if ri.Status == store.StatusWaiting && ri.Waiting[0].Kind == "step" {
			testhost.WaitUntil(t, "the step attempt", func() bool { ri, _ = f.H.Run(ctx, ri.ID); return ri.Waiting[0].Kind != "step" })
		}
	}
	ri, _ = f.H.Drive(ctx, ri.ID)
	if r := result[map[string]any](t, ri); r["value"] != "done on attempt 3" {
		t.Errorf("retried step: %s", ri.Result)
	}

	for _, tc := range []struct{ mode, caught, message, ran string }{
		{"fatal", "FatalError", "no such service", "fatal ran\n"},
		{"oops", "TypeError", "Cannot read property 'x'", "oops ran\n"},
	} {
		ri := f.Call("flaky", `{"mode":"`+tc.mode+`"}`)
		ri, _ = f.H.Drive(ctx, ri.ID)
		r := result[map[string]any](t, ri)
		if r["caught"] != tc.caught || !strings.Contains(r["message"].(string), tc.message) || r["isFatal"] != (tc.caught == "FatalError") {
			t.Errorf("%s: %s", tc.mode, ri.Result)
		}
		if out := output(t, f.H, ri.ID); out != tc.ran {
			t.Errorf("%s: the step ran %q, want once", tc.mode, out)
		}
	}

	// A step that never returns is stopped at the JavaScript time limit,
	// retried once, and its error reaches the body.
	ri = f.Call("flaky", `{"mode":"spin"}`)
	testhost.WaitUntil(t, "both attempts", func() bool {
		f.H.FireDue(ctx, time.Now().Add(time.Minute), nil)
		ri, _ = f.H.Run(ctx, ri.ID)
		return ri.Status != store.StatusWaiting
	})
	if r := result[map[string]any](t, ri); r["caught"] != jsprogram.ErrorType || r["message"] != "the program ran JavaScript for more than 2s in one step attempt" {
		t.Errorf("spinning step: %s", ri.Result)
	}
}
