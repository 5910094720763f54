package jsprogram_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/jsprogram"
)

// How the step compiler treats "use step" functions (the stand-ins it
// puts in their place) and which entry points defineWorkflowTool takes.

// registerAndRun registers a script and runs it with input to its end, as
// one line (advOutcome), or "refused: ..." when it is not registered.
func registerAndRun(t *testing.T, f *fixture, name, src, input string) string {
	t.Helper()
	if _, err := jsprogram.RegisterTool(context.Background(), f.H, name, []byte(src)); err != nil {
		return "refused: " + err.Error()
	}
	ri, err := f.H.Call(context.Background(), name, json.RawMessage(input), nil)
	if err != nil {
		t.Fatal(err)
	}
	return advOutcome(f.settle(ri))
}

// "use step" functions compile to stand-ins that behave as the author's
// functions do (recursion, steps calling steps, hoisting, strict mode,
// default arguments, the last line of the script), and "use step" where
// it has no effect (methods, getters, class members, blocks, generators,
// the script's prologue, a plain function) is refused with a message that
// says where steps go.
func TestToolStepDeclarationsCompileOrAreRefused(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	const head = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" }, `
	for _, tc := range []struct {
		name, src string
		want      []string // globs, any of
	}{
		// A step that calls itself runs the recursion inside its one attempt.
		{"recursion", head + `async execute() { "use workflow"; return await fact(5); } });
async function fact(n) { "use step"; return n <= 1 ? 1 : n * await fact(n - 1); }`, []string{"completed 120"}},
		// A step that calls another step runs it as a function.
		{"step calls step", head + `async execute() { "use workflow"; return await outer(3); } });
async function outer(x) { "use step"; return (await inner(x)) + 1; }
async function inner(x) { "use step"; return x * 2; }`, []string{"completed 7"}},
		// Hoisting: the tool is defined above its steps, and a step is
		// called while the script loads (it runs as a function there).
		{"hoisted", `"use strict";
const early = typeof plan === "function" && plan.name === "plan" && plan.length === 1;
` + head + `async execute() { "use workflow"; return { early, value: await plan("x") }; } });
async function plan(s) { "use step"; return "plan " + s; }`, []string{`completed {"early":true,"value":"plan x"}`}},
		// "use strict" in the script and in the step.
		{"use strict", `'use strict'
` + head + `async execute() { "use workflow"; return await strict(); } });
async function strict() { "use strict"; "use step"; return this === undefined; }`, []string{"completed true"}},
		// The last line is a comment, without a newline.
		{"last line a comment", head + `async execute() { "use workflow"; return await plan(); } });
async function plan() { "use step"; return 1; }
// the end`, []string{"completed 1"}},
		// The last line is an expression without a semicolon that a line
		// starting with [ would continue.
		{"last line without a semicolon", head + `async execute() { "use workflow"; return await plan(); } })
async function plan() { "use step"; return [1, 2] }
const t = plan`, []string{"completed [1,2]"}},
		// The last line ends inside a template's text? No: a block comment
		// closing on the last line.
		{"last line a block comment", head + `async execute() { "use workflow"; return await plan(); } });
async function plan() { "use step"; return 2; } /* a
comment */`, []string{"completed 2"}},
		// Undefined arguments: defaults apply in the attempt as in a direct
		// call, in every position.
		{"undefined arguments", head + `async execute() { "use workflow";
  return [await args(undefined, 2), await args(1, undefined), await args(undefined), await args(null, undefined, 3), await args([undefined], { u: undefined })]; } });
async function args(a = "da", b = "db", c = "dc") { "use step"; return [a, b, c]; }`,
			[]string{`completed [["da",2,"dc"],[1,"db","dc"],["da","db","dc"],[null,"db",3],[[null],{},"dc"]]`}},
		// Function.prototype.toString.call(step), String(step) and
		// step.toString() all give the author's text, never the
		// compiler's stand-in.
		{"toString", head + `async execute() { "use workflow";
  return { str: String(plan).slice(0, 20), method: plan.toString().slice(0, 20), proto: Function.prototype.toString.call(plan).slice(0, 20) }; } });
async function plan() { "use step"; return 1; }`,
			[]string{`completed {"str":"async function plan(","method":"async function plan(","proto":"async function plan("}`}},
		// "use step" in methods, getters and class members is refused with a
		// message that says where steps go.
		{"object method", head + `async execute() { "use workflow"; return await o.m(); } });
const o = { async m() { "use step"; return 1; } };`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"getter", head + `async execute() { "use workflow"; return o.g; } });
const o = { get g() { "use step"; return 1; } };`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"class method", head + `async execute() { "use workflow"; return await new C().m(); } });
class C { async m() { "use step"; return 1; } }`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"static class method", head + `async execute() { "use workflow"; return await C.m(); } });
class C { static async m() { "use step"; return 1; } }`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"class field arrow", head + `async execute() { "use workflow"; return await new C().m(); } });
class C { m = async () => { "use step"; return 1; } }`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"function in a block", head + `async execute() { "use workflow"; return await b(); } });
{ async function b() { "use step"; return 1; } }`, []string{`refused: *"use step" has no effect here*line 2*`}},
		{"async generator", head + `async execute() { "use workflow"; return 1; } });
async function* g() { "use step"; yield 1; }`, []string{`refused: *`}},
		// A later plain declaration of a step's name would replace the
		// step's function, so the "use step" function could never run:
		// the script is refused, as a step declared twice is.
		{"step redeclared as a plain function", head + `async execute() { "use workflow"; return await plan(); } });
async function plan() { "use step"; return "the step"; }
function plan() { return "the plain function"; }`, []string{`refused: *plan*`, `completed "the step"`}},
		// "use step" as the script's own directive would do nothing, so it
		// is refused, like "use step" anywhere it has no effect.
		{"script-level use step", `"use step";
` + head + `async execute() { "use workflow"; return 1; } });`, []string{`refused: *"use step" has no effect here*`}},
		// A step named as a prelude global.
		{"step named sleep", head + `async execute() { "use workflow"; return await sleep(); } });
async function sleep() { "use step"; return "slept"; }`, []string{`refused: *sleep*`, `completed "slept"`}},
		{"plain function", head + `async execute() { "use workflow"; return 1; } });
function p() { "use step"; return 1; }`, []string{`refused: *step p must be an async function*`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := registerAndRun(t, f, "steps-"+strings.ReplaceAll(tc.name, " ", "-"), tc.src, `{}`)
			wantAny(t, got, tc.want)
			t.Logf("%s", clipLine(got))
		})
	}
}

// wantAny fails the test unless got matches one of the globs in want.
func wantAny(t *testing.T, got string, want []string) {
	t.Helper()
	for _, w := range want {
		if globMatch(w, got) {
			return
		}
	}
	t.Errorf("got  %s\nwant %s", clipLine(got), strings.Join(want, "\n  or "))
}

// A generator function as the entry point is refused (or, for execute,
// runs its body): a generator's call only makes a generator object, so a
// tool that registered one would complete at once with {} without
// running a line of its body. A serve body cannot be a generator, and
// goja has no async generators, so a generator execute or task is not the
// async-generator progress form either.
func TestToolGeneratorEntryPointsAreRefused(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		// A serve body can't be a generator; nor can a body that goja
		// cannot run as an async generator.
		{"generator serve", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  *serve(receive, ctx) { "use workflow"; yield 1; } });`, []string{`refused: *generator*`}},
		{"generator execute", `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  *execute(input, ctx) { "use workflow"; yield 1; return 2; } });`, []string{`refused: *generator*`, "completed 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := registerAndRun(t, f, "gen-"+strings.ReplaceAll(tc.name, " ", "-"), tc.src, `{}`)
			wantAny(t, got, tc.want)
		})
	}
}
