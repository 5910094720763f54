package jsprogram_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/jsprogram"
)

// deepJS builds a 1500-deep array in `deep`: past the default ValueDepth of
// 1000, well inside what the host's JSON decoder accepts.
const deepJS = `let deep = []; for (let i = 0; i < 1500; i++) deep = [deep];
`

// Adversarial programs: each one tries to break a guarantee of the
// sandbox (the host survives, a failure carries the right code, what the
// program sees replays, the shim's checks cannot be dodged, the pool keeps
// serving). Each case asserts the outcome the system should give; those
// marked "Found:" failed when the corpus was written and were fixed.
func TestAdversarialPrograms(t *testing.T) {
	lim := hostileLimits
	lim.JSTime = 5 * time.Second // wall-clock: room for a loaded machine
	lim.TotalTime = 15 * time.Second
	f := newFixture(t, lim, nil)
	for _, tc := range []struct {
		name string
		js   string
		// codes: the run must fail with one of these codes.
		codes []string
		// result: else the run must complete with this result, as JSON.
		result string
		check  func(t *testing.T, e *jsprogram.WorkflowProgramError)
	}{
		// --- (d) the depth limit of the return value ---

		// Found: shim.js tooDeep walks the value itself, but JSON.stringify
		// serializes what toJSON returns: a 1500-deep value passes the 1000
		// ValueDepth limit. Observed: completed; expected: output_too_deep.
		{name: "depth limit dodged by toJSON", js: deepJS + `return { toJSON() { return deep; } };`,
			codes: []string{jsprogram.CodeOutputTooDeep}},
		// Found: tooDeep reads each property once and JSON.stringify reads it
		// again; a getter answers 0 to the first read and the deep value to
		// the second. Observed: completed; expected: output_too_deep.
		{name: "depth limit dodged by a getter read twice", js: deepJS + `let n = 0; return { get x() { return n++ ? deep : 0; } };`,
			codes: []string{jsprogram.CodeOutputTooDeep}},
		// Found: the same check-then-use race through a Proxy's get trap.
		// Observed: completed; expected: output_too_deep.
		{name: "depth limit dodged by a Proxy", js: deepJS + `let n = 0; return new Proxy({ x: 0 }, { get(t, k) { return k === "x" && n++ ? deep : t[k]; } });`,
			codes: []string{jsprogram.CodeOutputTooDeep}},
		// Found: tooDeep's work list `stack[n] = c` (shim.js) writes past the
		// array's end, which goes through an accessor the program put on
		// Array.prototype: the walk never sees the second child. Observed:
		// completed; expected: output_too_deep.
		{name: "depth limit dodged by an Array.prototype setter", js: deepJS +
			`Object.defineProperty(Array.prototype, "1", { get() { return undefined; }, set(v) {}, configurable: true });
return { a: 0, b: deep };`,
			codes: []string{jsprogram.CodeOutputTooDeep}},
		// The shim keeps its own built-ins: replacing the program's copies
		// changes nothing for the limits.
		{name: "Object.keys, Set and Reflect.apply replaced", js: deepJS +
			`Object.keys = () => []; Set.prototype.has = () => true; Set.prototype.add = function () { return this; }; Reflect.apply = () => undefined;
return deep;`,
			codes: []string{jsprogram.CodeOutputTooDeep}},
		{name: "JSON.stringify replaced", js: `JSON.stringify = () => '"small"'; return 'x'.repeat(1048576);`,
			codes: []string{jsprogram.CodeOutputTooLarge}},
		{name: "Array.prototype.push replaced", js: `Array.prototype.push = function () { return 0; }; const a = {}; a.self = a; return a;`,
			codes: []string{jsprogram.CodeNotSerializable}},

		// --- (d) ctx.agent sends only what the host accepts ---

		{name: "Object.prototype.toJSON turns the message into a number", js: `Object.prototype.toJSON = function () { return { message: 5 }; };
return await ctx.agent("echo", { message: "x" });`,
			codes: []string{jsprogram.CodeInvalidCall}},
		{name: "Object.prototype.toJSON adds an option", js: `Object.prototype.toJSON = function () { return this.message === "x" ? { message: "x", extra: 1 } : this; };
return await ctx.agent("echo", { message: "x" });`,
			codes: []string{jsprogram.CodeInvalidCall}, check: func(t *testing.T, e *jsprogram.WorkflowProgramError) {
				if !strings.Contains(e.Message, "extra") {
					t.Errorf("message %q does not name the extra option", e.Message)
				}
			}},
		{name: "String.prototype.toJSON is not used for the message", js: `String.prototype.toJSON = function () { return "changed"; };
return await ctx.agent("echo", { message: "x" });`,
			result: `"echo: x"`},
		{name: "ctx is frozen", js: `"use strict"; ctx.agent = () => "forged"; return 1;`,
			codes: []string{jsprogram.CodeUncaught}},
		{name: "agent name over 256 bytes", js: `return await ctx.agent("x".repeat(300), { message: "" });`,
			codes: []string{jsprogram.CodeInvalidCall}},
		// Found: nothing bounds an agent name before it goes out, and the
		// refusal quotes the whole name (worker.go agent, s.throw with %q);
		// the uncaught error (message and stack, 20 MB) is then over the
		// host's 1 MiB payload limit, session.complete gets the refusal and
		// the run ends as a crashed worker. Observed: worker_crashed ("the
		// host refused the program's error"); expected: invalid_call.
		{name: "agent name of 10 MB", js: `return await ctx.agent("x".repeat(10e6), { message: "" });`,
			codes: []string{jsprogram.CodeInvalidCall}},
		// Found: a ctx.agent call made while the return value is encoded
		// (from toJSON) comes after the pending-call check in
		// session.activate (worker.go); the op is issued and recorded, and
		// the run completes with it never awaited. Observed: completed with
		// result 1; expected: pending_call_at_return.
		{name: "ctx.agent from toJSON of the return value", js: `return { toJSON() { ctx.agent("echo", { message: "late" }); return 1; } };`,
			codes: []string{jsprogram.CodePendingAtReturn}},

		// --- (d) no code evaluation, no Go values ---

		{name: "indirect eval", js: `return (0, globalThis["ev" + "al"])("1");`, codes: []string{jsprogram.CodeUncaught},
			check: wantName("EvalError")},
		{name: "generator Function constructor", js: `return Object.getPrototypeOf(function* () {}).constructor("yield 1")().next().value;`,
			codes: []string{jsprogram.CodeUncaught}, check: wantName("EvalError")},
		{name: "class constructor's constructor", js: `return (class {}).constructor("return 1")();`,
			codes: []string{jsprogram.CodeUncaught}, check: wantName("EvalError")},
		{name: "Reflect.construct Function", js: `return Reflect.construct(Function, ["return 1"])();`,
			codes: []string{jsprogram.CodeUncaught}, check: wantName("EvalError")},
		{name: "redefining eval", js: `Object.defineProperty(globalThis, "eval", { value: (s) => 1 }); return 1;`,
			codes: []string{jsprogram.CodeUncaught}, check: wantName("TypeError")},
		{name: "restoring Function.prototype.constructor", js: `Function.prototype.constructor = function () { return () => 1; }; return (function () {}).constructor("x")();`,
			codes: []string{jsprogram.CodeUncaught}, check: wantName("EvalError")},
		{name: "dynamic import", js: `return await import("fs");`, codes: []string{jsprogram.CodeSyntaxError}},
		{name: "async generator constructor", js: `return Object.getPrototypeOf(async function* () {}).constructor("return 1");`,
			codes: []string{jsprogram.CodeSyntaxError}},
		// Found: a setter for "code" on Object.prototype makes the shim's
		// agentError constructor throw (this.code = code); session.throw
		// (worker.go) then throws vm.NewGoError(err), a GoError whose
		// `value` is the Go *goja.Exception, a wrapped Go value with its
		// methods (Error, Stack, String, Unwrap, Value) callable from the
		// program. Observed: "function"; expected: "undefined" (no Go value
		// reaches the program).
		{name: "Go value through a GoError", js: `Object.defineProperty(Object.prototype, "code", { set(v) { throw { x: 1 }; }, configurable: true });
try { await ctx.agent("x".repeat(300), { message: "x" }); } catch (e) { return typeof (e && e.value && e.value.Unwrap); }
return "no error";`,
			result: `"undefined"`},

		// --- (b) codes: the program cannot forge them, nor crash the worker ---

		// Found: session.uncaught (worker.go) takes any `code` of a thrown
		// value named WorkflowProgramAgentError: the program forges a host
		// limit. Observed: memory_limit; expected: uncaught_exception.
		{name: "forged memory_limit code", js: `throw Object.assign(new Error("x"), { name: "WorkflowProgramAgentError", code: "memory_limit" });`,
			codes: []string{jsprogram.CodeUncaught}},
		// Found: the same with the shim's own class, which is global.
		// Observed: js_time_limit; expected: uncaught_exception.
		{name: "forged js_time_limit with the exported class", js: `throw new WorkflowProgramAgentError("js_time_limit", "fake");`,
			codes: []string{jsprogram.CodeUncaught}},
		// Found: any string at all becomes details.code. Observed: "x";
		// expected: uncaught_exception.
		{name: "arbitrary code", js: `throw { name: "WorkflowProgramAgentError", code: { toString() { return "x"; } } };`,
			codes: []string{jsprogram.CodeUncaught}},
		// Calls the host refuses (here: an outputSchema that is not a
		// schema) are recorded, so they count toward the budget: a loop of
		// them ends at call 101 instead of filling the run's log.
		{name: "loop of refused calls", js: `for (;;) { try { await ctx.agent("echo", { message: "", outputSchema: { type: 5 } }); } catch (e) { if (e.code !== "invalid_call") throw e; } }`,
			codes: []string{jsprogram.CodeMaxSubagents}},
		// A real agent error rethrown keeps its code.
		{name: "real agent error rethrown", js: `try { await ctx.agent("", { message: "" }); } catch (e) { throw e; }`,
			codes: []string{jsprogram.CodeInvalidCall}},
		// Found: session.uncaught reads name/message/stack/code with
		// obj.Get and x.String(), which run the program's getters and
		// toString outside any error handling: a throw there panics and
		// session.run's recover reports the engine as failed and retires the
		// worker. Observed: worker_crashed; expected: uncaught_exception.
		{name: "thrown object with a throwing getter", js: `throw { get name() { throw 1; } };`,
			codes: []string{jsprogram.CodeUncaught}},
		// Found: same path, a toString that throws. Observed: worker_crashed;
		// expected: uncaught_exception.
		{name: "thrown object whose name's toString throws", js: `throw { name: { toString() { throw new Error("no"); } } };`,
			codes: []string{jsprogram.CodeUncaught}},
		// Found: same path, a getter that loops: the JS time limit interrupts
		// it inside obj.Get, which panics. Observed: worker_crashed ("the
		// JavaScript engine failed: jsprogram: limit js_time_limit");
		// expected: js_time_limit.
		{name: "thrown object with a looping getter", js: `throw { get message() { for (;;) {} } };`,
			codes: []string{jsprogram.CodeJSTime}},
		// Found: session.complete sends the error's message and stack
		// untruncated; over the host's 1 MiB payload the host refuses it and
		// the run ends as a crashed worker. Observed: worker_crashed ("the
		// host refused the program's error: complete: payload of 4000209
		// bytes is over the limit of 1049600"); expected:
		// uncaught_exception.
		{name: "uncaught error with a 2 MB message", js: `throw new Error("x".repeat(2e6));`,
			codes: []string{jsprogram.CodeUncaught}},
		{name: "rejection with a symbol", js: `return Promise.reject(Symbol("s"));`, codes: []string{jsprogram.CodeUncaught}},
		{name: "thenable that never calls back", js: `return { then() {} };`, codes: []string{jsprogram.CodeNeverSettles}},

		// --- (a) the host survives deep recursion inside built-ins ---

		{name: "JSON.parse of 2M brackets", js: `return JSON.parse("[".repeat(2000000)).length;`,
			codes: []string{jsprogram.CodeMemory, jsprogram.CodeStackOverflow}},
		{name: "String of a 300k-deep array", js: `let a = []; for (let i = 0; i < 300000; i++) a = [a]; return String(a).length;`,
			codes: []string{jsprogram.CodeMemory, jsprogram.CodeStackOverflow}},
		{name: "1M-deep bound function", js: `let f = function () {}; for (let i = 0; i < 1000000; i++) f = f.bind(null); return f();`,
			codes: []string{jsprogram.CodeMemory, jsprogram.CodeStackOverflow}},
		{name: "regex of 100k nested groups", js: `return new RegExp("(".repeat(100000) + ")".repeat(100000)).test("");`,
			codes: []string{jsprogram.CodeUncaught}},
		// 5 MB of output, five times the 1 MiB cap, well inside the 2 s
		// JavaScript budget even on a loaded machine (10 MB came within a
		// fraction of it when other builds ran beside the tests).
		{name: "console flood", js: `for (let i = 0; i < 50000; i++) console.log("x".repeat(100)); return 1;`, result: `1`},

		// --- (c) what the program sees replays ---

		// Date.now() between two calls of one activation, sent in a
		// message: the replays must send the same one.
		{name: "Date between calls replays", js: `const a = Date.now(); const p = ctx.agent("echo", { message: "1" });
const b = Date.now(); const q = ctx.agent("echo", { message: String(b - a) });
const r = await Promise.all([p, q]); const c = Date.now();
const s = await ctx.agent("echo", { message: String(c - b) });
return r[1] === "echo: " + (b - a) && s === "echo: " + (c - b);`, result: `true`},
		{name: "Math.random replaced and restored", js: `const r = Math.random; Math.random = () => 0.5;
const m = await ctx.agent("echo", { message: String(r()) }); return m.startsWith("echo: 0.") && m !== "echo: 0.5";`, result: `true`},
		{name: "lone surrogate returned", js: `return "\ud800x";`, result: `"\ud800x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Other runs must keep completing meanwhile (the pool is not
			// wedged); checked when the case ends, even when it failed.
			stop := serveOthers(t, f)
			t.Cleanup(func() { stop() })
			ri := f.run(tc.js)
			if tc.codes == nil {
				result[any](t, ri)
				if string(ri.Result) != tc.result {
					t.Fatalf("result = %.200s, want %s", ri.Result, tc.result)
				}
			} else {
				e := failure(t, ri)
				if !slices.Contains(tc.codes, e.Code) {
					t.Fatalf("code = %s, want %s: %.300s", e.Code, strings.Join(tc.codes, " or "), e.Message)
				}
				if tc.check != nil {
					tc.check(t, e)
				}
			}
		})
	}
}

func wantName(name string) func(t *testing.T, e *jsprogram.WorkflowProgramError) {
	return func(t *testing.T, e *jsprogram.WorkflowProgramError) {
		t.Helper()
		if e.Name != name {
			t.Errorf("error = %+v, want a %s", e, name)
		}
	}
}
