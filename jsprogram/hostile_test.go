package jsprogram_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
)

// hostileLimits are the default limits with the times cut short, so the
// corpus runs in seconds.
var hostileLimits = jsprogram.Limits{JSTime: 4 * time.Second, TotalTime: 20 * time.Second, MemoryBytes: 128 << 20}

// A hostile corpus: each program fails its run with its own code, and the
// host keeps serving other runs meanwhile.
func TestHostilePrograms(t *testing.T) {
	big := func(t host.AgentTurn) abi.AgentResult {
		if t.Message == "big" {
			return abi.AgentResult{Status: abi.AgentCompleted, Reply: strings.Repeat("r", 4<<20-1)}
		}
		return echo(t)
	}
	f := newFixture(t, hostileLimits, newAgents(big))
	for _, tc := range []struct {
		name, js, code string
		check          func(t *testing.T, e *jsprogram.WorkflowProgramError)
	}{
		{"infinite loop", `for (;;) {}`, jsprogram.CodeJSTime, nil},
		{"infinite loop in a catch-all", `for (;;) { try { for (;;) {} } catch (e) {} finally { continue; } }`, jsprogram.CodeJSTime, nil},
		{"huge repeat", `return 'x'.repeat(2**40);`, jsprogram.CodeMemory, nil},
		// Regression: a length past any address space made goja panic
		// ("makeslice: len out of range"), which ended as worker_crashed.
		{"repeat past any address space", `return 'x'.repeat(2**62);`, jsprogram.CodeMemory, nil},
		{"padStart past any address space", `return 'x'.padStart(2**62);`, jsprogram.CodeMemory, nil},
		{"array fill loop", `const keep = []; for (;;) keep.push(new Array(1e7).fill(0));`, jsprogram.CodeMemory, nil},
		{"string doubling", `let s = 'x'; for (;;) s += s; `, jsprogram.CodeMemory, nil},
		{"catastrophic regex", `return /^(a+)+(?=b)c/.test('a'.repeat(40) + 'b');`, jsprogram.CodeJSTime, nil},
		{"deep recursion", `function f() { return f() + 1; } return f();`, jsprogram.CodeStackOverflow, nil},
		{"native-to-JS recursion", `function f() { [1].map(f); } f();`, jsprogram.CodeStackOverflow, nil},
		{"100k-deep array returned", `let a = []; for (let i = 0; i < 100000; i++) a = [a]; return a;`, jsprogram.CodeOutputTooDeep, nil},
		{"sourceMappingURL to a host file", "//# sourceMappingURL=file:///etc/passwd\nnull.x;", jsprogram.CodeUncaught, func(t *testing.T, e *jsprogram.WorkflowProgramError) {
			// Positions are the program's own, not remapped through a map
			// read from the host's disk.
			if e.Name != "TypeError" || e.Line != 2 || strings.Contains(e.Stack, "root:") {
				t.Errorf("error = %+v, want a TypeError at line 2", e)
			}
		}},
		{"eval", `return eval("1 + 1");`, jsprogram.CodeUncaught, func(t *testing.T, e *jsprogram.WorkflowProgramError) {
			if e.Name != "EvalError" || e.Line != 1 {
				t.Errorf("error = %+v, want an EvalError at line 1", e)
			}
		}},
		{"Function", "\nreturn new Function('return 1')();", jsprogram.CodeUncaught, func(t *testing.T, e *jsprogram.WorkflowProgramError) {
			if e.Name != "EvalError" || e.Line != 2 {
				t.Errorf("error = %+v, want an EvalError at line 2", e)
			}
		}},
		{"Function through a constructor", `return (async () => {}).constructor('return 1')();`, jsprogram.CodeUncaught, func(t *testing.T, e *jsprogram.WorkflowProgramError) {
			if e.Name != "EvalError" {
				t.Errorf("error = %+v, want an EvalError", e)
			}
		}},
		{"never-awaited ctx.agent", `ctx.agent("echo", { message: "hi" }); return 1;`, jsprogram.CodePendingAtReturn, nil},
		{"Promise.race loser", `return await Promise.race([ctx.agent("echo", { message: "a" }), ctx.agent("echo", { message: "b" })]);`, jsprogram.CodePendingAtReturn, func(t *testing.T, e *jsprogram.WorkflowProgramError) {
			if !strings.Contains(e.Message, "call 2") {
				t.Errorf("message %q does not name call 2, the loser", e.Message)
			}
		}},
		{"call 101", `const ps = []; for (let i = 0; i < 101; i++) ps.push(ctx.agent("echo", { message: "" + i })); return await Promise.all(ps);`, jsprogram.CodeMaxSubagents, func(t *testing.T, e *jsprogram.WorkflowProgramError) {
			if !strings.Contains(e.Message, "call 101") || !strings.Contains(e.Message, "100") {
				t.Errorf("message %q does not name call 101 and the budget", e.Message)
			}
		}},
		{"return value of 1 MiB + 1", `return 'x'.repeat(1048576 - 1);`, jsprogram.CodeOutputTooLarge, nil},
		{"child reply of 4 MiB + 1", `return await ctx.agent("echo", { message: "big" });`, jsprogram.CodeReplyTooLarge, nil},
		{"ctx.agent input of 1 MiB + 1", `return await ctx.agent("echo", { message: 'x'.repeat(1048576 - 13) });`, jsprogram.CodeInputTooLarge, nil},
		{"source of 256 KiB + 1", "return 1;" + strings.Repeat(" ", 256<<10-8), jsprogram.CodeSourceTooLarge, nil},
		{"cyclic return value", `const a = {}; a.self = a; return a;`, jsprogram.CodeNotSerializable, nil},
		{"BigInt return value", `return 10n;`, jsprogram.CodeNotSerializable, nil},
		{"never settles", `await new Promise(() => {}); return 1;`, jsprogram.CodeNeverSettles, nil},
		{"invalid ctx.agent call", `return await ctx.agent(42, { message: "x" });`, jsprogram.CodeInvalidCall, nil},
		{"closing the function early", "return 1; }); (async function () {", jsprogram.CodeSyntaxError, nil},
		{"uncaught throw", "const x = 1;\n  throw new TypeError('boom');", jsprogram.CodeUncaught, func(t *testing.T, e *jsprogram.WorkflowProgramError) {
			if e.Line != 2 || e.Column != 9 || e.Name != "TypeError" || !strings.Contains(e.Message, "boom") || !strings.Contains(e.Stack, "workflow.js:2:") {
				t.Errorf("error = %+v, want TypeError boom at 2:9 (where it was made) with a stack", e)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop := serveOthers(t, f)
			start := time.Now()
			ri := f.run(tc.js)
			e := failure(t, ri)
			if e.Code != tc.code {
				t.Fatalf("code = %s, want %s: %v", e.Code, tc.code, e)
			}
			if tc.check != nil {
				tc.check(t, e)
			}
			served := stop()
			t.Logf("%s in %s: %s; %d other runs completed meanwhile", tc.code, time.Since(start).Round(time.Millisecond), firstLine(e.Message), served)
		})
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// serveOthers runs small programs one after another until stopped; stop
// fails the test unless every one completed with its right result and at
// least one ran.
func serveOthers(t *testing.T, f *fixture) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int64
	var wg sync.WaitGroup
	var bad atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			in, _ := json.Marshal(map[string]string{"js": fmt.Sprintf(`return (await ctx.agent("echo", { message: "%d" })) + "!";`, i)})
			ri, err := f.H.Start(context.Background(), jsprogram.WorkflowToolName, in, nil)
			if err == nil {
				ri, err = f.H.Drive(context.Background(), ri.ID)
			}
			if err != nil {
				bad.Store(err.Error())
				return
			}
			if want := fmt.Sprintf(`"echo: %d!"`, i); string(ri.Result) != want {
				bad.Store(fmt.Sprintf("run %d: %s %s, want %s", i, ri.Status, ri.Result, want))
				return
			}
			n.Add(1)
		}
	}()
	return func() int {
		// At least one run must complete while the hostile one is served.
		deadline := time.Now().Add(20 * time.Second)
		for n.Load() == 0 && bad.Load() == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		wg.Wait()
		if b := bad.Load(); b != nil {
			t.Fatalf("another run failed meanwhile: %v", b)
		}
		if n.Load() == 0 {
			t.Fatal("no other run completed meanwhile")
		}
		return int(n.Load())
	}
}
