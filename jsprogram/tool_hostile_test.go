package jsprogram_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

// hostileTool is a tool whose body runs input.body, and whose steps are
// there for bodies to call (none retries, so failures show at once).
const hostileTool = `defineWorkflowTool({ description: "runs its input", inputSchema: { type: "object" },
  async execute(input, ctx) {
    "use workflow";
    return await BODIES[input.body](ctx);
  } });

const BODIES = {
  loop: async () => { for (;;) {} },
  repeat: async () => 'x'.repeat(2**40),
  hoard: async () => { const keep = []; for (;;) keep.push(new Array(1e7).fill(0)); },
  recurse: async () => { function f() { return f() + 1; } return f(); },
  cyclic: async () => { const a = {}; a.a = a; return a; },
  bigint: async () => 10n,
  badSleep: async () => { await sleep("soon"); },
  forever: async () => { await new Promise(() => {}); },
  forgedStep: async () => __sandflow.steps(["defineWorkflowTool", () => {}]),
  overwriteGuard: async () => { "use strict"; globalThis.__sandflow = { step: undefined }; },
  badAsk: async (ctx) => { try { await ctx.ask({ title: "no prompt" }); } catch (e) { return { name: e.name, message: e.message }; } },
  stepLoop: async () => { try { await spin(); } catch (e) { return { name: e.name, message: e.message }; } },
  stepMemory: async () => { try { await hoardStep(); } catch (e) { return { name: e.name, message: e.message }; } },
  stepSleeps: async () => { try { await sleepyStep(); } catch (e) { return { name: e.name, message: e.message }; } },
  stepBigint: async () => { try { await bigStep(); } catch (e) { return { name: e.name, message: e.message }; } },
  patchedJSON: async () => {
    JSON.stringify = () => "garbage";
    JSON.parse = () => "garbage";
    const v = await echoStep({ b: 1, a: 2 });
    return { keys: Object.keys(v).join(","), v };
  },
  patchedThen: async () => {
    Promise.prototype.then = function () { throw new Error("patched"); };
    return await echoStep(1).then((v) => v);
  },
  deepInput: async () => { let a = []; for (let i = 0; i < 100000; i++) a = [a]; try { await echoStep(a); } catch (e) { return { name: e.name, message: e.message }; } },
};

async function spin() { "use step"; for (;;) {} }
spin.maxRetries = 0;
async function hoardStep() { "use step"; const keep = []; for (;;) keep.push(new Array(1e7).fill(0)); }
hoardStep.maxRetries = 0;
async function sleepyStep() { "use step"; await sleep(1); }
sleepyStep.maxRetries = 0;
async function bigStep() { "use step"; return 1n; }
bigStep.maxRetries = 0;
async function echoStep(v) { "use step"; return v; }
`

// A hostile corpus for authored tools, in the body and in steps: each
// fails its run (or its step) with its own error while the host keeps
// serving other runs.
func TestHostileTools(t *testing.T) {
	f := newFixture(t, hostileLimits, nil)
	f.AddJS("hostile", hostileTool)
	for _, tc := range []struct {
		body string
		// want is the run's error (type: message) or, for a completed run,
		// its result.
		status, want string
	}{
		{"loop", "failed", jsprogram.ErrorType + ": the program ran JavaScript for more than 4s in one start or resume [js_time_limit]"},
		{"repeat", "failed", jsprogram.ErrorType + ": [memory_limit]"},
		{"hoard", "failed", jsprogram.ErrorType + ": [memory_limit]"},
		{"recurse", "failed", jsprogram.ErrorType + ": RangeError: Maximum call stack size exceeded (the limit is 2000 frames) [stack_overflow]"},
		{"cyclic", "failed", jsprogram.ErrorType + ": the result cannot be converted to JSON: [output_not_serializable]"},
		{"bigint", "failed", jsprogram.ErrorType + ": the result cannot be converted to JSON: [output_not_serializable]"},
		{"badSleep", "failed", `TypeError: sleep: "soon" is not a duration such as "30s", "10 min", "1h" or "2 days"`},
		{"forever", "failed", jsprogram.ErrorType + ": the workflow waits for something that never happens: [program_never_settles]"},
		{"forgedStep", "failed", `TypeError: __sandflow.steps is called once, by the step compiler`},
		{"overwriteGuard", "failed", "TypeError: Cannot assign to read only property '__sandflow'"},
		{"badAsk", "completed", `{"name":"BadRequestError","message":"ask: prompt is required"}`},
		{"stepLoop", "completed", `{"name":"` + jsprogram.ErrorType + `","message":"the program ran JavaScript for more than 4s in one step attempt"}`},
		{"stepMemory", "completed", `"name":"` + jsprogram.ErrorType + `"`},
		{"stepSleeps", "completed", `{"name":"Error","message":"sleep can be called only in the workflow body, not in a step"}`},
		{"stepBigint", "completed", `{"name":"` + jsprogram.ErrorType + `","message":"the result of step bigStep cannot be converted to JSON: Do not know how to serialize a BigInt"}`},
		// The shim keeps its own JSON; the values keep their key order.
		{"patchedJSON", "completed", `{"keys":"b,a","v":{"b":1,"a":2}}`},
		// A program that breaks promises breaks its own awaits, not the host.
		{"patchedThen", "failed", "Error: patched"},
		{"deepInput", "completed", `{"name":"TypeError","message":"the input of step echoStep nests deeper than 1000 levels"}`},
	} {
		t.Run(tc.body, func(t *testing.T) {
			stop := serveOthers(t, f)
			ri, err := f.H.Call(context.Background(), "hostile", json.RawMessage(fmt.Sprintf(`{"body":%q}`, tc.body)), nil)
			if err == nil {
				ri, err = f.H.Drive(context.Background(), ri.ID)
			}
			if err == nil && ri.Status == store.StatusWaiting {
				// A step is running: wait for it.
				testhost.WaitUntil(t, "the step", func() bool { ri, err = f.H.Run(context.Background(), ri.ID); return err != nil || ri.Status.Terminal() })
			}
			if err != nil {
				t.Fatal(err)
			}
			var got string
			switch ri.Status {
			case store.StatusFailed:
				got = ri.Error.Type + ": " + ri.Error.Message
				if e, ok := jsprogram.FromObject(ri.Error); ok {
					got += " [" + e.Code + "]"
				}
			case store.StatusCompleted:
				got = string(ri.Result)
			}
			if string(ri.Status) != tc.status || !containsAll(got, tc.want) {
				t.Errorf("run %s: %s\nwant %s: %s", ri.Status, got, tc.status, tc.want)
			}
			served := stop()
			t.Logf("%s; %d other runs completed meanwhile", firstLine(got), served)
		})
	}
}

// containsAll reports whether s matches want: want's text before a
// trailing " [code]" (less a final colon) starts s or is in it, and the
// code, when given, ends s.
func containsAll(s, want string) bool {
	head, code, hasCode := strings.Cut(want, " [")
	if hasCode && !strings.HasSuffix(s, " ["+code) {
		return false
	}
	return strings.HasPrefix(s, strings.TrimSuffix(head, ":")) || strings.Contains(s, head)
}

// What a tool's body reads of Math.random and Date comes back the same on
// every replay; steps draw their own (real) randomness, recorded with
// their results; values keep their key order.
func TestToolRandomAndDateReplay(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	f.AddJS("dice", `defineWorkflowTool({ description: "dice", inputSchema: { type: "object" },
  async execute(input, ctx) {
    "use workflow";
    const r1 = Math.random(), d1 = Date.now();
    ctx.progress({ r1, d1 });
    const roll = await rollStep();
    await sleep("1h");
    const r2 = Math.random(), d2 = Date.now();
    return { r1, d1, roll, r2, d2, offset: new Date().getTimezoneOffset() };
  } });
async function rollStep() { "use step"; return { z: Math.random(), a: Date.now() }; }`)
	ri := f.Call("dice", `{}`)
	testhost.WaitUntil(t, "the step", func() bool {
		ri, _ = f.H.Run(context.Background(), ri.ID)
		return len(ri.Waiting) == 1 && ri.Waiting[0].Kind == "sleep"
	})
	var progress struct {
		R1 float64 `json:"r1"`
		D1 int64   `json:"d1"`
	}
	if err := json.Unmarshal(ri.Progress, &progress); err != nil {
		t.Fatal(err)
	}
	f.Restart()
	ri = f.fire(ri.ID, 61*time.Minute)
	type out struct {
		R1, R2 float64
		D1, D2 int64
		Roll   json.RawMessage
		Offset int
	}
	got := result[out](t, ri)
	if got.R1 != progress.R1 || got.D1 != progress.D1 {
		t.Errorf("the replay drew r1 %v at %d; the first activation %v at %d", got.R1, got.D1, progress.R1, progress.D1)
	}
	// The clock after the sleep is when the timer fired, as recorded.
	if got.R2 == got.R1 || got.D2 < got.D1 || got.Offset != 0 {
		t.Errorf("after the sleep: %+v", got)
	}
	if !strings.HasPrefix(string(got.Roll), `{"z":0.`) {
		t.Errorf("the step's result lost its key order or its value: %s", got.Roll)
	}
	var buf strings.Builder
	if err := f.H.ExportHistory(context.Background(), ri.ID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := f.H.CheckReplay(context.Background(), hist, nil); err != nil || rep.End != "completed" || rep.Ops != rep.RecordedOps {
		t.Errorf("replay check: %+v %v", rep, err)
	}
}
