package jsprogram_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

// advLimits are short limits, so the stalls below end in seconds.
var advLimits = jsprogram.Limits{JSTime: 2 * time.Second, TotalTime: 10 * time.Second, MemoryBytes: 128 << 20}

// advTool is a tool whose body runs BODIES[input.body]. Its steps do not
// retry, so a step's failure reaches the body at once.
const advTool = `defineWorkflowTool({ description: "adversarial bodies", inputSchema: { type: "object" },
  async execute(input, ctx) {
    "use workflow";
    return await BODIES[input.body](ctx, input);
  } });

const MiB = 1 << 20;
// caught is what a body saw: the value f resolved to, or the error it threw.
const caught = async (f) => {
  try { return { value: await f() }; } catch (e) { return { name: e.name, message: e.message }; }
};
const deep = (n) => { let a = []; for (let i = 0; i < n; i++) a = [a]; return a; };

const BODIES = {
  // Stalls and crashes.
  resultGetterLoops: async () => ({ get x() { for (;;) {} } }),
  thrownGetterLoops: async () => { throw { get name() { for (;;) {} } }; },
  stepThrownGetterLoops: async () => caught(() => loopyThrowStep()),
  throwingToJSON: async () => ({ a: { toJSON() { throw new Error("no JSON for you"); } } }),
  recursiveToJSON: async () => ({ toJSON() { return this.toJSON(); } }),
  selfWrappingToJSON: async () => ({ toJSON() { return { a: this }; } }),
  throwingGetter: async () => ({ get a() { throw new Error("no a"); } }),
  throwingOwnKeys: async () => new Proxy({}, { ownKeys() { throw new Error("no keys"); } }),
  neverSettlingThenable: async () => await { then() {} },
  tooManySleeps: async () => { await Promise.all(Array.from({ length: 4097 }, () => sleep("1h"))); },
  tooManyHookThens: async () => { const h = createHook(); await Promise.all(Array.from({ length: 4097 }, () => h.then())); },
  regexpStall: async () => /^(a+)+\1$/.test("a".repeat(40) + "b"),
  stepRegexpStall: async () => caught(() => regexpStep()),
  revokedProxyToString: async () => {
    const { proxy, revoke } = Proxy.revocable(function () {}, {});
    revoke();
    // shim.js replaced the global Function; this is the real prototype.
    return Object.getPrototypeOf(function () {}).toString.call(proxy);
  },
  stepCrash: async () => caught(() => crashStep()),
  functionPrototype: async () => [typeof Function.prototype.call, (function () {}) instanceof Function, (async () => {}) instanceof Function],
  deepHookPayload: async (ctx, input) => { const h = createHook({ token: input.token }); const v = await h; return Array.isArray(v) ? "an array" : typeof v; },
  progressFlood: async (ctx) => { for (let i = 0; ; i++) ctx.progress(i); },

  // Payloads: too big, too deep, not JSON.
  bigStepInput: async () => caught(() => echoStep("x".repeat(MiB + 10))),
  bigProgress: async (ctx) => caught(async () => ctx.progress("x".repeat(MiB + 10))),
  bigAsk: async (ctx) => caught(() => ctx.ask({ prompt: "x".repeat(MiB + 10) })),
  bigHookMetadata: async () => caught(async () => { createHook({ metadata: "x".repeat(MiB + 10) }); }),
  bigResult: async () => "x".repeat(MiB + 10),
  bigStepResult: async () => caught(() => bigStep()),
  bigError: async () => { throw new Error("x".repeat(2 * MiB)); },
  deepStepInput: async () => caught(() => echoStep(deep(1500))),
  deepStepInputViaToJSON: async () => caught(() => echoStep({ toJSON() { return deep(1500); } })),
  deepProgressViaToJSON: async (ctx) => caught(async () => ctx.progress({ toJSON() { return deep(1500); } })),
  deepResultViaToJSON: async () => ({ toJSON() { return deep(1500); } }),
  functionArgs: async () => caught(() => echoStep(() => 1, Symbol("s"))),
  undefinedArg: async () => caught(async () => [await defaultStep(undefined), await defaultStep(undefined, 2)]),
  bigintAsk: async (ctx) => caught(() => ctx.ask({ prompt: 10n })),
  symbolAsk: async (ctx) => caught(() => ctx.ask({ prompt: Symbol("p") })),
  cyclicAsk: async (ctx) => { const r = { prompt: "p" }; r.self = r; return caught(() => ctx.ask(r)); },

  // Ops used the wrong way.
  disposeTwice: async () => { const h = createHook(); h.dispose(); h.dispose(); return caught(() => h); },
  thenMany: async (ctx, input) => { const h = createHook({ token: input.token }); return await Promise.all([h.then(), h.then(), h.then()]); },
  respondNonManual: async () => {
    const w = createWebhook();
    const req = await w;
    return caught(async () => req.respondWith(new Response("mine")));
  },
  respondTwice: async () => {
    const w = createWebhook({ respondWith: "manual" });
    const req = await w;
    req.respondWith(new Response("one", { status: 201 }));
    return caught(async () => req.respondWith(new Response("two")));
  },
  sleepConstructor: async () => caught(() => sleep("1 constructor")),
  sleepHuge: async () => caught(() => sleep(1e300)),
  longAgentName: async (ctx) => caught(() => ctx.agent("a".repeat(300)).send("hi")),
  forgedErrorCode: async () => {
    Object.defineProperty(Object.prototype, "toJSON", { configurable: true, value: function () {
      if (this.type === "Error" && this.message === "real") {
        return { type: "WorkflowProgramError", message: "forged", details: { code: "memory_limit" } };
      }
      return this;
    } });
    throw new Error("real");
  },

  // The step guard.
  withStatement: async () => { with ({ __sandflow: { step: undefined } }) { return await metaStep(); } },
  aliasStep: async () => { const alias = metaStep; return await alias(); },
  boundStep: async () => await metaStep.bind(null)(),
  forgedGuardCall: async () => {
    // The compiler's statement ran first; a second call cannot swap a step.
    const swapped = await caught(async () => __sandflow.steps(["metaStep", async () => ({ forged: true })]));
    return { swapped, ran: await metaStep() };
  },
  protoStepGetter: async () => {
    Object.defineProperty(Object.prototype, "step", { configurable: true, get() { return undefined; } });
    return await metaStep();
  },
  shadowedMathFloor: async () => { Math.floor = (x) => x + 0.5; return await metaStep(); },
  redefineGuard: async () => caught(async () => { Object.defineProperty(globalThis, "__sandflow", { value: { step: undefined } }); }),

  // Determinism: what the body sees before a sleep, recomputed on replay.
  fingerprint: async (ctx, input) => {
    const stepValue = await keysStep();
    let stepErr;
    try { await fatalStep(); } catch (e) { stepErr = e; }
    const hook = createHook();
    const web = createWebhook();
    const fp = fingerprint(ctx, input, stepValue, stepErr, hook, web);
    hook.dispose();
    web.dispose();
    ctx.progress(fp);
    await sleep("1h");
    return fp;
  },
};

function fingerprint(ctx, input, stepValue, stepErr, hook, web) {
  const names = (o) => Object.getOwnPropertyNames(o).join(",");
  const forIn = (o) => { const ks = []; for (const k in o) ks.push(k); return ks.join(","); };
  let typeErr;
  try { null.x; } catch (e) { typeErr = e.stack; }
  return {
    now: Date.now(), dateString: String(new Date()), iso: new Date().toISOString(), locale: new Date().toLocaleString(),
    random: [Math.random(), Math.random(), Math.random()],
    globals: names(globalThis), math: names(Math), objectProto: names(Object.prototype), arrayProto: names(Array.prototype),
    functionProto: names(Function.prototype), promise: names(Promise), reflect: names(Reflect), json: names(JSON),
    ctx: Reflect.ownKeys(ctx).map(String).join(","), toolName: ctx.toolName, callId: ctx.callId,
    meta: JSON.stringify(getWorkflowMetadata()), input: forIn(input),
    parsedOrder: forIn(JSON.parse('{"b":1,"10":2,"a":3,"2":4}')),
    stepValue: JSON.stringify(stepValue), stepKeys: forIn(stepValue),
    stepErr: [stepErr.name, stepErr.message, String(stepErr.stack), JSON.stringify(stepErr.details), forIn(stepErr)],
    hook: [hook.token, forIn(hook)], web: [web.url, web.token, forIn(web)],
    symbols: [String(Symbol("s")), typeof Symbol.asyncIterator, typeof Symbol.dispose],
    weak: [typeof WeakRef, typeof FinalizationRegistry, typeof gc, typeof performance, typeof process],
    typeErr, errStack: new Error("e").stack, stepText: String(echoStep),
  };
}

async function echoStep(...args) { "use step"; return args.length === 1 ? args[0] : args; }
echoStep.maxRetries = 0;
async function metaStep() { "use step"; return { attempt: getStepMetadata().attempt }; }
metaStep.maxRetries = 0;
async function loopyThrowStep() { "use step"; throw { get name() { for (;;) {} } }; }
loopyThrowStep.maxRetries = 0;
async function regexpStep() { "use step"; return /^(a+)+\1$/.test("a".repeat(40) + "b"); }
regexpStep.maxRetries = 0;
async function bigStep() { "use step"; return "x".repeat((1 << 20) + 10); }
bigStep.maxRetries = 0;
async function defaultStep(a = "the default", b) { "use step"; return { a: a === null ? "null" : a, b }; }
defaultStep.maxRetries = 0;
async function crashStep() {
  "use step";
  const { proxy, revoke } = Proxy.revocable(function () {}, {});
  revoke();
  return Object.getPrototypeOf(function () {}).toString.call(proxy);
}
crashStep.maxRetries = 0;
async function keysStep() { "use step"; return { z: 1, a: 2, 10: 3 }; }
async function fatalStep() { "use step"; throw new FatalError("nope"); }
`

// Scripts of their own: what the step compiler makes of steps it does not
// expect.
const (
	advNestedStep = `defineWorkflowTool({ description: "an arrow step", inputSchema: { type: "object" },
  async execute() { "use workflow"; return await plan(); } });
const plan = async () => { "use step"; return { attempt: getStepMetadata().attempt }; };
`
	advNoSemicolons = `defineWorkflowTool({ description: "no semicolons", inputSchema: { type: "object" },
  async execute() {
    "use workflow"
    return await plan()
  } })

async function plan() {
  "use step"
  return { attempt: getStepMetadata().attempt }
}
`
	advShadows = `defineWorkflowTool({ description: "names in a step's scope", inputSchema: { type: "object" },
  async execute({ body }) {
    "use workflow";
    try {
      if (body === "const") return { value: await plan("api") };
      if (body === "param") return { value: await job({ id: 7, maxRetries: -1 }) };
    } catch (e) { return { name: e.name, message: e.message }; }
  } });

async function plan(service) {
  "use step";
  const plan = "plan for " + service;
  return plan;
}
async function job(job) {
  "use step";
  return job.maxRetries;
}
`
	advSandflowParam = `defineWorkflowTool({ description: "a step whose parameter is __sandflow", inputSchema: { type: "object" },
  async execute() { "use workflow"; return await sneaky({}); } });
async function sneaky(__sandflow) {
  "use step";
  return { attempt: getStepMetadata().attempt };
}
`
	advSandflowFunction = `defineWorkflowTool({ description: "a step that declares __sandflow", inputSchema: { type: "object" },
  async execute() { "use workflow"; return await sneaky(); } });
async function sneaky() {
  "use step";
  function __sandflow() {}
  return { attempt: getStepMetadata().attempt };
}
`
	advReassigned = `defineWorkflowTool({ description: "a reassigned step", inputSchema: { type: "object" },
  async execute() { "use workflow"; return await original(); } });
async function plan() { "use step"; return "declared"; }
const original = plan;
plan = async function () { return "reassigned at the top level"; };
`
	advColumns = `defineWorkflowTool({ description: "columns", inputSchema: { type: "object" },
  async execute() {
    "use workflow";
    let step, plain;
    try { await oops(); } catch (e) { step = e.details && e.details.column; }
    try { await ctrl(); } catch (e) { plain = Number(/tool\.js:\d+:(\d+)/.exec(e.stack)[1]); }
    return { step, plain };
  } });
async function oops() { "use step"; null.x; }
async function ctrl() { "use xxxx"; null.x; }
oops.maxRetries = 0;
`
	advDefineStall = `defineWorkflowTool({ description: "d", inputSchema: { type: "object" },
  async execute() { "use workflow"; return 1; } });
/^(a+)+\1$/.test("a".repeat(40) + "b");
`
	advDefineRevoked = `const { proxy, revoke } = Proxy.revocable(async function () { "use workflow"; return 1; }, {});
revoke();
defineWorkflowTool({ description: "d", inputSchema: { type: "object" }, execute: proxy });
`
	advBudget = `defineWorkflowTool({ description: "compute between sleeps", inputSchema: { type: "object" },
  async execute({ n, sleeps }) {
    "use workflow";
    let x = 0;
    for (let s = 0; s <= sleeps; s++) {
      for (let i = 0; i < n; i++) x = (x + i) % 1000003;
      if (s < sleeps) await sleep("1 min");
    }
    return { sleeps };
  } });
`
)

// advOutcome is how a case ended, as one line: "refused: ..." for a script
// the host would not register, else the run's status and its result or
// error ("failed Type: message [code]").
func advOutcome(ri host.RunInfo) string {
	switch ri.Status {
	case store.StatusFailed:
		s := "failed " + ri.Error.Type + ": " + ri.Error.Message
		if e, ok := jsprogram.FromObject(ri.Error); ok {
			s += " [" + e.Code + "]"
		}
		return s
	case store.StatusCompleted:
		return "completed " + string(ri.Result)
	}
	var kinds []string
	for _, w := range ri.Waiting {
		kinds = append(kinds, w.Kind)
	}
	return string(ri.Status) + " on " + strings.Join(kinds, ",")
}

// globMatch reports whether s matches pattern, where * matches any text.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(s, p) && len(s) >= len(p)
		}
		j := strings.Index(s, p)
		if j < 0 {
			return false
		}
		s = s[j+len(p):]
	}
	return s == ""
}

// settle drives a run until it ends or waits on something other than a
// running step.
func (f *fixture) settle(ri host.RunInfo) host.RunInfo {
	f.t.Helper()
	ctx := context.Background()
	ri, err := f.H.Drive(ctx, ri.ID)
	if err != nil {
		f.t.Fatalf("drive: %v", err)
	}
	testhost.WaitUntil(f.t, "the run to settle", func() bool {
		ri, err = f.H.Run(ctx, ri.ID)
		if err != nil {
			f.t.Fatal(err)
		}
		if ri.Status.Terminal() {
			return true
		}
		for _, w := range ri.Waiting {
			if w.Kind == "step" || w.Kind == "step_retry" {
				return false
			}
		}
		return true
	})
	return ri
}

func TestToolAdversarial(t *testing.T) {
	f := newFixture(t, advLimits, nil)
	ctx := context.Background()
	f.AddJS("adv", advTool)
	registered := map[string]error{}
	register := func(name, src string) error {
		if err, ok := registered[name]; ok {
			return err
		}
		_, err := jsprogram.RegisterTool(ctx, f.H, name, []byte(src))
		registered[name] = err
		return err
	}
	// body runs a body of the adversarial tool to its end.
	body := func(name string) func(t *testing.T) string {
		return func(t *testing.T) string {
			ri, err := f.H.Call(ctx, "adv", json.RawMessage(fmt.Sprintf(`{"body":%q}`, name)), nil)
			if err != nil {
				t.Fatal(err)
			}
			return advOutcome(f.settle(ri))
		}
	}
	// script registers a script of its own and calls it with input.
	script := func(name, src, input string) func(t *testing.T) string {
		return func(t *testing.T) string {
			if err := register(name, src); err != nil {
				return "refused: " + err.Error()
			}
			ri, err := f.H.Call(ctx, name, json.RawMessage(input), nil)
			if err != nil {
				t.Fatal(err)
			}
			return advOutcome(f.settle(ri))
		}
	}
	define := func(src string) func(t *testing.T) string {
		return func(t *testing.T) string {
			_, err := jsprogram.RegisterTool(ctx, f.H, "never", []byte(src))
			if err == nil {
				return "registered"
			}
			var pe *host.PluginError
			if !errors.As(err, &pe) || pe.Reason != "bad_program" {
				t.Errorf("%v is not a bad_program *PluginError", err)
			}
			return "refused: " + err.Error()
		}
	}

	for _, tc := range []struct {
		name string
		run  func(t *testing.T) string
		// want lists the outcomes a correct host may have (globs: * is any
		// text).
		want []string
		// others: the host must complete other runs meanwhile.
		others bool
	}{
		// --- Stalling the host while it encodes or describes values. ---
		{name: "result getter loops", run: body("resultGetterLoops"),
			want: []string{"failed " + jsprogram.ErrorType + ": the program ran JavaScript for more than 2s in one start or resume [js_time_limit]"}},
		// A limit that stops the reading of a thrown value's name is the run's error.
		{name: "thrown value's getter loops", run: body("thrownGetterLoops"),
			want: []string{"failed " + jsprogram.ErrorType + ": the program ran JavaScript for more than 2s in one start or resume [js_time_limit]"}},
		// The same in a step attempt.
		{name: "step's thrown value's getter loops", run: body("stepThrownGetterLoops"),
			want: []string{`completed {"name":"` + jsprogram.ErrorType + `","message":"the program ran JavaScript for more than 2s in one step attempt"}`}},
		{name: "throwing toJSON", run: body("throwingToJSON"),
			want: []string{"failed " + jsprogram.ErrorType + ": the result cannot be converted to JSON: no JSON for you [output_not_serializable]"}},
		{name: "toJSON recursion", run: body("recursiveToJSON"),
			want: []string{"failed " + jsprogram.ErrorType + ": RangeError: Maximum call stack size exceeded (the limit is 2000 frames) [stack_overflow]"}},
		{name: "toJSON wraps itself forever", run: body("selfWrappingToJSON"),
			want: []string{"failed " + jsprogram.ErrorType + ": * [js_time_limit]", "failed " + jsprogram.ErrorType + ": * [memory_limit]", "failed " + jsprogram.ErrorType + ": * [output_too_deep]"}},
		{name: "throwing getter in the result", run: body("throwingGetter"),
			want: []string{"failed " + jsprogram.ErrorType + ": the result cannot be converted to JSON: no a [output_not_serializable]"}},
		// A Proxy whose ownKeys trap throws is not JSON, as a throwing getter is not.
		{name: "throwing ownKeys in the result", run: body("throwingOwnKeys"),
			want: []string{"failed " + jsprogram.ErrorType + ": the result cannot be converted to JSON: no keys [output_not_serializable]"}},
		{name: "thenable that never settles", run: body("neverSettlingThenable"),
			want: []string{"failed " + jsprogram.ErrorType + ": the workflow waits for something that never happens: * [program_never_settles]"}},
		{name: "4097 pending sleeps", run: body("tooManySleeps"),
			want: []string{"failed " + jsprogram.ErrorType + ": the workflow waits on 4097 operations at once; the limit is 4096 [too_many_pending]"}},
		{name: "4097 pending hook.then", run: body("tooManyHookThens"),
			want: []string{"failed " + jsprogram.ErrorType + ": the workflow waits on 4097 operations at once; the limit is 4096 [too_many_pending]"}},
		{name: "regexp stall in a built-in", run: body("regexpStall"), others: true,
			want: []string{"failed " + jsprogram.ErrorType + ": the program ran JavaScript for more than 2s in one start or resume (stopped inside a built-in) [js_time_limit]"}},
		{name: "regexp stall in a step", run: body("stepRegexpStall"), others: true,
			want: []string{`completed {"name":"` + jsprogram.ErrorType + `","message":"the program ran JavaScript for more than 2s in one step attempt (stopped inside a built-in)"}`}},
		{name: "regexp stall while the script loads", run: define(advDefineStall),
			want: []string{"refused: *the script's top level ran JavaScript for more than 2s (stopped inside a built-in) [js_time_limit]"}},
		// A goja bug: Function.prototype.toString on a revoked proxy of a function panics in Go
		// (nil pointer). The worker must die cleanly, fail only this run (or step, or
		// registration) with worker_crashed, and be replaced while other runs go on.
		{name: "goja panic in the body", run: body("revokedProxyToString"), others: true,
			want: []string{"failed " + jsprogram.ErrorType + ": the JavaScript engine failed: * [worker_crashed]", "failed TypeError: *"}},
		{name: "goja panic in a step", run: body("stepCrash"), others: true,
			want: []string{`completed {"name":"` + jsprogram.ErrorType + `","message":"the JavaScript engine failed: *"}`, `completed {"name":"TypeError",*`}},
		{name: "goja panic while the script loads", run: define(advDefineRevoked),
			want: []string{"refused: *[worker_crashed]", "refused: *TypeError*"}},
		// Function is not available as a constructor, yet Function.prototype and
		// instanceof Function are as ever.
		{name: "Function.prototype and instanceof Function", run: body("functionPrototype"),
			want: []string{`completed ["function",true,true]`}},
		{name: "hook payload 9000 deep", run: func(t *testing.T) string {
			ri, err := f.H.Call(ctx, "adv", json.RawMessage(`{"body":"deepHookPayload","token":"adv-deep"}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			waitsOn(t, ri, "hook")
			if _, err := f.H.ResumeHook(ctx, "adv-deep", json.RawMessage(strings.Repeat("[", 9000)+strings.Repeat("]", 9000))); err != nil {
				return "resume refused: " + err.Error()
			}
			return advOutcome(f.settle(ri))
		}, want: []string{`completed "an array"`, "resume refused: *"}},
		{name: "progress flood", run: body("progressFlood"),
			want: []string{"failed " + jsprogram.ErrorType + ": the program ran JavaScript for more than 2s in one start or resume [js_time_limit]", "failed *[total_time_limit]", "failed *events*"}},

		// --- Payloads. ---
		{name: "step input over 1 MiB", run: body("bigStepInput"),
			want: []string{`completed {"name":"PayloadTooLargeError","message":"step: payload of 1048626 bytes is over the limit of 1048576"}`}},
		{name: "progress over 1 MiB", run: body("bigProgress"),
			want: []string{`completed {"name":"PayloadTooLargeError","message":"progress: payload of 1048588 bytes is over the limit of 1048576"}`}},
		{name: "question over 1 MiB", run: body("bigAsk"),
			want: []string{`completed {"name":"PayloadTooLargeError","message":"ask: payload of 1048599 bytes is over the limit of 1048576"}`}},
		{name: "hook metadata over 1 MiB", run: body("bigHookMetadata"),
			want: []string{`completed {"name":"PayloadTooLargeError","message":"hook_create: payload of 1048601 bytes is over the limit of 1048576"}`}},
		{name: "result over 1 MiB", run: body("bigResult"),
			want: []string{"failed " + jsprogram.ErrorType + ": the result is 1048588 bytes as JSON; the limit is 1048576 bytes [output_too_large]"}},
		{name: "step result over 1 MiB", run: body("bigStepResult"),
			want: []string{`completed {"name":"` + jsprogram.ErrorType + `","message":"the result of step bigStep is 1048588 bytes as JSON; the limit is 1048576 bytes"}`}},
		{name: "error message of 2 MiB", run: body("bigError"),
			want: []string{"failed Error: xxxxxxxx*... [2088960 bytes cut]"}},
		{name: "step input 1500 deep", run: body("deepStepInput"),
			want: []string{`completed {"name":"TypeError","message":"the input of step echoStep nests deeper than 1000 levels"}`}},
		// The depth limit holds for what toJSON returns: the encoded text decides.
		{name: "step input 1500 deep through toJSON", run: body("deepStepInputViaToJSON"),
			want: []string{`completed {"name":"TypeError","message":"the input of step echoStep nests *"}`}},
		// The same for ctx.progress.
		{name: "progress 1500 deep through toJSON", run: body("deepProgressViaToJSON"),
			want: []string{`completed {"name":"TypeError","message":"a progress value nests *"}`}},
		{name: "result 1500 deep through toJSON", run: body("deepResultViaToJSON"),
			want: []string{"failed " + jsprogram.ErrorType + ": the result nests 1501 levels deep as JSON; the limit is 1000 [output_too_deep]"}},
		// A step's arguments are JSON values: a function or a Symbol is refused at the
		// call, not turned into null.
		{name: "function and Symbol as step arguments", run: body("functionArgs"),
			want: []string{`completed {"name":"TypeError","message":"the input of step echoStep *"}`}},
		// An undefined argument arrives as undefined (one at the end is left off), so
		// a default parameter applies in the attempt as in a direct call.
		{name: "undefined step argument and a default parameter", run: body("undefinedArg"),
			want: []string{`completed {"value":[{"a":"the default"},{"a":"the default","b":2}]}`}},
		{name: "BigInt in a question", run: body("bigintAsk"),
			want: []string{`completed {"name":"TypeError","message":"ctx.ask cannot be converted to JSON: *"}`}},
		{name: "Symbol as a question's prompt", run: body("symbolAsk"),
			want: []string{`completed {"name":"BadRequestError","message":"ask: prompt is required"}`, `completed {"name":"TypeError",*`}},
		{name: "cyclic question", run: body("cyclicAsk"),
			want: []string{`completed {"name":"TypeError","message":"ctx.ask cannot be converted to JSON: *"}`}},

		// --- Ops used the wrong way. ---
		{name: "dispose twice, then await", run: body("disposeTwice"),
			want: []string{`completed {"name":"HookDisposedError","message":"hook \"hook_*\" was disposed"}`}},
		{name: "hook.then three times", run: func(t *testing.T) string {
			ri, err := f.H.Call(ctx, "adv", json.RawMessage(`{"body":"thenMany","token":"adv-then-many"}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			waitsOn(t, ri, "hook", "hook", "hook")
			for _, p := range []string{`1`, `{"two":2}`, `"three"`} {
				if _, err := f.H.ResumeHook(ctx, "adv-then-many", json.RawMessage(p)); err != nil {
					t.Fatal(err)
				}
			}
			return advOutcome(f.settle(ri))
		}, want: []string{`completed [1,{"two":2},"three"]`}},
		{name: "respondWith on a webhook that answers by itself", run: func(t *testing.T) string {
			return f.webhookCase(t, "respondNonManual", 202)
		}, want: []string{`completed {"name":"Error","message":"respondWith: this webhook answers by itself; create it with respondWith: \"manual\""}`}},
		{name: "respondWith twice", run: func(t *testing.T) string {
			return f.webhookCase(t, "respondTwice", 201)
		}, want: []string{`completed {"name":"BadRequestError","message":"webhook_respond: request 0 of webhook * is already answered"}`}},
		// Units are looked up among the units only, never on Object.prototype.
		{name: "sleep(\"1 constructor\")", run: body("sleepConstructor"),
			want: []string{`completed {"name":"TypeError","message":"sleep: \"1 constructor\" is not a duration such as \"30s\", \"10 min\", \"1h\" or \"2 days\""}`}},
		// A sleep past what JSON carries as an integer gets the host's bound.
		{name: "sleep(1e300)", run: body("sleepHuge"),
			want: []string{`completed {"name":"BadRequestError","message":"sleep: ms must be 0-*"}`, `completed {"name":"TypeError","message":"sleep: a duration *"}`}},
		{name: "agent name of 300 bytes", run: body("longAgentName"),
			want: []string{`completed {"name":"BadRequestError","message":"agent: name must be 1-256 bytes of UTF-8"}`, `completed {"name":"TypeError",*`}},
		// The run's error object is read field by field by the host, never through
		// the script's JSON: an Object.prototype.toJSON cannot forge its type or code.
		{name: "forged error object via Object.prototype.toJSON", run: body("forgedErrorCode"),
			want: []string{"failed Error: real"}},

		// --- The step guard. ---
		{name: "with statement around a step call", run: body("withStatement"), want: []string{`completed {"attempt":1}`}},
		{name: "aliased step", run: body("aliasStep"), want: []string{`completed {"attempt":1}`}},
		{name: "bound step", run: body("boundStep"), want: []string{`completed {"attempt":1}`}},
		{name: "step stand-ins declared again", run: body("forgedGuardCall"),
			want: []string{`completed {"swapped":{"name":"TypeError","message":"__sandflow.steps is called once, by the step compiler"},"ran":{"attempt":1}}`}},
		{name: "step getter on Object.prototype", run: body("protoStepGetter"), want: []string{`completed {"attempt":1}`}},
		// The prelude keeps its own Math.floor, indexOf, join and toLowerCase.
		{name: "Math.floor replaced before a step call", run: body("shadowedMathFloor"), want: []string{`completed {"attempt":1}`}},
		{name: "redefine __sandflow", run: body("redefineGuard"),
			want: []string{`completed {"name":"TypeError","message":"Cannot redefine property: __sandflow"}`}},
		// "use step" where it would have no effect is refused at registration.
		{name: "arrow function with \"use step\"", run: script("advnested", advNestedStep, `{}`),
			want: []string{`refused: *use step*`, `completed {"attempt":1}`}},
		// Scripts without semicolons compile.
		{name: "step directive without a semicolon", run: script("advnosemi", advNoSemicolons, `{}`),
			want: []string{`completed {"attempt":1}`}},
		// Names declared in a step's scope do not touch its stand-in.
		{name: "step declares a const of its own name", run: script("advshadows", advShadows, `{"body":"const"}`),
			want: []string{`completed {"value":"plan for api"}`}},
		// The retry policy is the declared function's, not an argument's.
		{name: "step parameter of its own name", run: script("advshadows", advShadows, `{"body":"param"}`),
			want: []string{`completed {"value":-1}`}},
		// Nothing a step declares can make it run inline in the workflow body.
		{name: "step parameter named __sandflow", run: script("advparam", advSandflowParam, `{}`),
			want: []string{`refused: *__sandflow*`, `completed {"attempt":1}`}},
		// The same with a function declaration in the step's body.
		{name: "step declares function __sandflow", run: script("advfunc", advSandflowFunction, `{}`),
			want: []string{`refused: *__sandflow*`, `completed {"attempt":1}`}},
		// A step attempt runs the declared "use step" function, whatever the
		// script later assigns to its name.
		{name: "step binding reassigned at the top level", run: script("advreassigned", advReassigned, `{}`),
			want: []string{`completed "declared"`, `refused: *plan*`}},
		// Positions in a step's errors are the author's.
		{name: "column of an error after a one-line step directive", run: func(t *testing.T) string {
			out := script("advcolumns", advColumns, `{}`)(t)
			var r struct{ Step, Plain int }
			if strings.HasPrefix(out, "completed ") && json.Unmarshal([]byte(strings.TrimPrefix(out, "completed ")), &r) == nil && r.Plain > 0 && r.Step == r.Plain {
				return "same column"
			}
			return out
		}, want: []string{"same column"}},

		// --- Determinism. ---
		{name: "what the body sees replays the same", run: f.fingerprintCase, want: []string{"same"}},
		// Each replayed activation gets its own JavaScript time budget, as it did
		// when it first ran (and as WebAssembly guests' do).
		{name: "replayed compute counts against the time limit", run: f.budgetCase(register), want: []string{`completed {"sleeps":4}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			var stop func() int
			if tc.others {
				stop = serveOthers(t, f)
			}
			got := tc.run(t)
			ok := false
			for _, w := range tc.want {
				ok = ok || globMatch(w, got)
			}
			if !ok {
				t.Errorf("got  %s\nwant %s", clipLine(got), strings.Join(tc.want, "\n  or "))
			}
			if stop != nil {
				stop()
			}
			// The host goes on serving.
			if ri := f.run(`return 1 + 1;`); ri.Status != store.StatusCompleted || string(ri.Result) != "2" {
				t.Errorf("a program after the case: %s", advOutcome(ri))
			}
			t.Logf("%s: %s", time.Since(start).Round(time.Millisecond), clipLine(got))
		})
	}
}

func clipLine(s string) string {
	if len(s) > 400 {
		return s[:400] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

// webhookCase runs a webhook body of the adversarial tool: the run waits on
// its webhook, a request is delivered (answered with status by the host or
// the run), and the run goes on to its end.
func (f *fixture) webhookCase(t *testing.T, name string, status int) string {
	ctx := context.Background()
	ri, err := f.H.Call(ctx, "adv", json.RawMessage(fmt.Sprintf(`{"body":%q}`, name)), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitsOn(t, ri, "webhook")
	w := ri.Waiting[0]
	d, err := f.H.DeliverWebhook(ctx, w.Token, abi.WebhookRequest{Method: "POST", URL: abi.WebhookPath(w.Token), Body: `{}`})
	if err != nil {
		t.Fatal(err)
	}
	ri = f.settle(ri)
	resp := d.Response
	if resp == nil {
		if resp, err = f.H.WebhookResponse(ctx, ri.ID, d.Hook, d.Index); err != nil {
			t.Fatal(err)
		}
	}
	if resp == nil || resp.Status != status {
		t.Errorf("the request was answered %+v, want status %d", resp, status)
	}
	return advOutcome(ri)
}

// fingerprintCase: what the body computes before a sleep (the clock,
// Math.random, key orders, stacks, host objects) is recorded as progress;
// after a restart the sleep fires, the body replays and returns what it
// computed this time. The two must be the same, byte for byte.
func (f *fixture) fingerprintCase(t *testing.T) string {
	ctx := context.Background()
	ri, err := f.H.Call(ctx, "adv", json.RawMessage(`{"body":"fingerprint","z":1,"a":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ri = f.settle(ri)
	waitsOn(t, ri, "sleep")
	first := string(ri.Progress)
	f.Restart()
	ri = f.fire(ri.ID, 2*time.Hour)
	if ri.Status != store.StatusCompleted {
		return advOutcome(ri)
	}
	if string(ri.Result) != first {
		return fmt.Sprintf("the replay saw\n%s\nthe first run\n%s", ri.Result, first)
	}
	var buf strings.Builder
	if err := f.H.ExportHistory(ctx, ri.ID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := f.H.CheckReplay(ctx, hist, nil); err != nil || rep.End != "completed" || rep.Ops != rep.RecordedOps {
		return fmt.Sprintf("replay check: %+v %v", rep, err)
	}
	t.Logf("fingerprint: %s", clipLine(first))
	return "same"
}

// budgetCase: a body computes for about 0.6 s (a third of the time limit)
// between four sleeps. The time limit is wall-clock, so a machine that
// slows down more than threefold after the calibration can push one
// activation past it: the case calibrates and tries again, up to three
// times, before it reports js_time_limit. A budget that did not restart
// with each replayed activation fails every try (each resume replays 5 ×
// 0.6 s).
func (f *fixture) budgetCase(register func(name, src string) error) func(t *testing.T) string {
	return func(t *testing.T) string {
		ctx := context.Background()
		if err := register("advbudget", advBudget); err != nil {
			t.Fatal(err)
		}
		// Calibrate: the time of n iterations, less a run's overhead.
		timeOf := func(n int) time.Duration {
			start := time.Now()
			ri := f.Call("advbudget", fmt.Sprintf(`{"n":%d,"sleeps":0}`, n))
			if ri.Status != store.StatusCompleted {
				t.Fatalf("calibration: %s", advOutcome(ri))
			}
			return time.Since(start)
		}
		var out string
		for try := 1; try <= 3; try++ {
			base := timeOf(0)
			const probe = 500_000
			per := float64(timeOf(probe)-base) / probe
			n := int(float64(600*time.Millisecond) / per)
			t.Logf("try %d: %.0f ns per iteration; %d iterations between sleeps", try, per, n)
			ri, err := f.H.Call(ctx, "advbudget", json.RawMessage(fmt.Sprintf(`{"n":%d,"sleeps":4}`, n)), nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5 && ri.Status == store.StatusWaiting; i++ {
				ri = f.fire(ri.ID, 2*time.Minute)
			}
			if out = advOutcome(ri); !strings.Contains(out, jsprogram.CodeJSTime) {
				return out
			}
		}
		return out
	}
}
