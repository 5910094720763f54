package jsprogram_test

import (
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
)

// failOn answers like echo, but fails the turn whose message is "fail".
func failOn(t host.AgentTurn) abi.AgentResult {
	if t.Message == "fail" {
		return abi.AgentResult{Status: abi.AgentFailed, Error: &abi.AgentError{Code: abi.AgentErrFailed, Message: "the agent gave up"}}
	}
	return echo(t)
}

// Every way ctx.agent fails is a rejected promise. Regression: a bad call
// (invalid_call, input_too_large) and a call over maxSubagents threw at
// the call, while a failed turn rejected, so .catch, .then(ok, err) and
// Promise.allSettled fan-outs failed the run instead of seeing the error.
func TestAgentFailuresReject(t *testing.T) {
	lim := hostileLimits
	lim.MaxSubagents = 3
	f := newFixture(t, lim, newAgents(failOn))
	for _, tc := range []struct{ name, js, want string }{
		{"invalid call caught with .catch",
			`return await ctx.agent(42, { message: "x" }).catch((e) => e.code);`, `"invalid_call"`},
		{"no arguments is a promise, not a throw",
			`let p; try { p = ctx.agent(); } catch (e) { return "threw " + e.code; }
return await p.then(() => "fulfilled", (e) => "rejected " + e.code);`, `"rejected invalid_call"`},
		{"unknown option with .then(ok, err)",
			`return await ctx.agent("echo", { message: "x", extra: 1 }).then(() => "ok", (e) => e.name + " " + e.code);`,
			`"WorkflowProgramAgentError invalid_call"`},
		{"input over the limit",
			`return await ctx.agent("echo", { message: "x".repeat(1048576) }).catch((e) => e.code);`, `"input_too_large"`},
		{"call over maxSubagents with .then(ok, err)",
			`const ps = []; for (let i = 0; i < 4; i++) ps.push(ctx.agent("echo", { message: "m" + i }).then((r) => "ok", (e) => e.code));
return await Promise.all(ps);`, `["ok","ok","ok","max_subagents"]`},
		{"allSettled fan-out of good, bad and failed calls",
			`const rs = await Promise.allSettled([ctx.agent("echo", { message: "a" }), ctx.agent("", { message: "b" }), ctx.agent("echo", { message: "fail" })]);
return rs.map((r) => r.status === "fulfilled" ? r.value : r.reason.code);`, `["echo: a","invalid_call","agent_failed"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ri := f.run(tc.js)
			_ = result[any](t, ri) // completed
			if string(ri.Result) != tc.want {
				t.Fatalf("result = %s, want %s", ri.Result, tc.want)
			}
		})
	}
}

// A rejected ctx.agent call the program never handles still fails the
// run with its code, as a call that threw did: the error does not vanish.
func TestUnhandledAgentFailureFailsTheRun(t *testing.T) {
	f := newFixture(t, hostileLimits, newAgents(failOn))
	for _, tc := range []struct{ name, js, code string }{
		{"bad call never awaited", `ctx.agent(42, { message: "x" }); return 1;`, jsprogram.CodeInvalidCall},
		{"failed turn never awaited", `const p = ctx.agent("echo", { message: "fail" }); await ctx.agent("echo", { message: "ok" }); return 1;`, abi.AgentErrFailed},
		{"the first of two unhandled", `ctx.agent("echo", { message: "x".repeat(1048576) }); ctx.agent(42, {}); return 1;`, jsprogram.CodeInputTooLarge},
		{"bad call from toJSON", `return { toJSON() { ctx.agent("", {}); return 1; } };`, jsprogram.CodeInvalidCall},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if e := failure(t, f.run(tc.js)); e.Code != tc.code {
				t.Fatalf("code = %s, want %s: %v", e.Code, tc.code, e)
			}
		})
	}
}
