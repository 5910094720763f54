// workload: the benchmark workloads (bench/workload) as an authored
// JavaScript tool. It makes the same ops, in the same order and
// activations, as the Go guest (guests/workload) and the C guest
// (guests/cworkload), so that one history replays on all three.
//
//   steps     n sequential steps inc (v -> v+1) from 0; the result is n
//   fanout    n turns with the agent "echo", sent first, then awaited
//             together; the result is how many completed
//   askstep   n times a question, then a step inc; the result is n
//   stepsask  n steps inc, then `asks` questions; the result is n
//   greet     no ops; the result is {greeting: "hello " + name}
defineWorkflowTool({
  description: "sandflow benchmark workloads",
  inputSchema: {
    type: "object",
    properties: {
      mode: { type: "string" },
      n: { type: "integer", minimum: 0 },
      asks: { type: "integer", minimum: 0 },
      name: { type: "string" },
    },
    required: ["mode"],
  },
  async execute({ mode, n = 0, asks = 0, name = "" }, ctx) {
    "use workflow";
    const question = { prompt: "Go on?", options: [{ id: "ok", label: "OK" }] };
    const ask = async () => {
      const a = await ctx.ask(question);
      if (a.status !== "answered") throw new FatalError("question not answered: " + a.status);
    };
    let v = 0;
    switch (mode) {
      case "greet":
        return { greeting: "hello " + name };
      case "steps":
        for (let i = 0; i < n; i++) v = await inc(v);
        return v;
      case "fanout": {
        const turns = [];
        for (let i = 0; i < n; i++) turns.push(ctx.agent("echo").send("m" + i).then((r) => r.result()));
        const results = await Promise.all(turns);
        return results.filter((r) => r.status === "completed").length;
      }
      case "askstep":
        for (let i = 0; i < n; i++) {
          await ask();
          v = await inc(v);
        }
        return v;
      case "stepsask":
        for (let i = 0; i < n; i++) v = await inc(v);
        for (let j = 0; j < asks; j++) await ask();
        return v;
    }
    throw new FatalError("unknown mode " + mode);
  },
});

async function inc(v) {
  "use step";
  return v + 1;
}
