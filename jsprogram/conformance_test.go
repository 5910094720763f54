package jsprogram_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/host/engine/enginetest"
	"github.com/sandflow/sandflow/jsprogram"
)

// The engines' conformance suite, on authored tools that show its
// behaviours, and on the workflow tool's configuration as the module for
// the cases that need no guest.
func TestConformance(t *testing.T) {
	// 64 MiB: the grow loop reaches the workers' memory limit in a few
	// dozen allocations (InstanceConfig.MemoryLimit does not bound a
	// worker: Limits.MemoryBytes does, per engine).
	e, err := jsprogram.NewEngine(&jsprogram.Options{Limits: jsprogram.Limits{MemoryBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	enginetest.Suite{
		Engine:  func(testing.TB) engine.Engine { return e },
		Module:  []byte(`{"sandflow": "workflow-tool"}`),
		Version: abi.Version,
		Language: &enginetest.Language{
			Guest:      conformanceGuest,
			Serve:      serveTool,
			LimitNames: map[string]string{"cpu": "js_time", "memory": "memory"},
			OpTimeFree: true,
		},
	}.Run(t)
}

// conformanceBodies are the bodies of the tools that show the suite's
// behaviours. A body returns what a WebAssembly guest's sandflow_run
// would; ping is a step, whose op is named for it.
var conformanceBodies = map[enginetest.Behaviour]string{
	enginetest.TightLoop:      `for (;;) {}`,
	enginetest.GrowLoop:       `const keep = []; for (let i = 0; ; i++) keep.push("x".repeat(1 << 20) + i);`,
	enginetest.Fail:           `throw new Error("the tool fails");`,
	enginetest.TwoOpsThenLoop: `ctx.progress(1); ctx.progress(2); for (;;) {}`,
	// A tool sees an answer's value, not its header: it measures the
	// value as JSON.
	enginetest.AnswerLength: `return 8 + JSON.stringify(getWorkflowMetadata()).length;`,
	enginetest.RoundTrips: `let n = 0, last;
    for (let i = 0; i < 11; i++) { last = await ping("abc"); n += 8 + JSON.stringify(last).length; }
    return n + last.charCodeAt(last.length - 1);`,
	enginetest.OpThenCount: `ctx.progress(1); let n = 0; for (let i = 0; i < 1 << 14; i++) n += i; return 1;`,
	enginetest.WriteHi:     `console.log("hi"); console.error("ho"); return 1;`,
	// Date is the run's clock (ms), Math.random seeded from the
	// instance's random source.
	enginetest.ClockAndRandom: `return (Date.now() % 1e6) * 1000 + Math.floor(Math.random() * 1000);`,
}

func conformanceGuest(b enginetest.Behaviour) []byte {
	body, ok := conformanceBodies[b]
	if !ok {
		return nil
	}
	return []byte(fmt.Sprintf(`defineWorkflowTool({
  description: "conformance",
  inputSchema: { type: "object" },
  async execute(input, ctx) {
    "use workflow";
    %s
  },
});
async function ping(x) { "use step"; return x; }`, body))
}

// serveTool answers the ops an authored tool's run makes of its own: its
// input and, before its body starts, its metadata; and its completion,
// whose result or error it returns. The body's ops go to next.
func serveTool(next engine.OpHandler) (engine.OpHandler, func() (int32, error)) {
	var started, completed bool
	var result int32
	var failure *abi.ErrorObject
	ok := func(value string) []byte { return append(make([]byte, abi.BodyHeaderSize), value...) }
	h := enginetest.OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
		switch {
		case kind == abi.OpInput:
			return ok(`{}`), nil
		case kind == abi.OpMetadata && !started:
			started = true
			return ok(`{}`), nil
		case kind == abi.OpComplete:
			var out struct {
				Result *int32           `json:"result"`
				Error  *abi.ErrorObject `json:"error"`
			}
			if err := json.Unmarshal(payload, &out); err != nil || (out.Result == nil) == (out.Error == nil) {
				return nil, fmt.Errorf("the tool completed with %q", payload)
			}
			completed, failure = true, out.Error
			if out.Result != nil {
				result = *out.Result
			}
			return ok(""), nil
		}
		return next.Op(ctx, kind, name, payload)
	})
	return h, func() (int32, error) {
		switch {
		case !completed:
			return 0, fmt.Errorf("the tool's run returned without completing")
		case failure != nil:
			return 0, &engine.GuestError{Message: failure.Message, Object: failure}
		}
		return result, nil
	}
}
