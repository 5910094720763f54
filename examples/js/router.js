// router: the agent router. A step picks the target agent (a
// routing decision is a side effect of judgement, recorded once), and
// ctx.agent sends the question there. Both get the call's abort signal:
// the step sees an abort while it runs, and the child turn is cancelled.
//
//   sandflow --agents examples/agents.json plugin add examples/js/router.js
defineWorkflowTool({
  description: "Answer a customer's question with the agent that handles its topic.",
  inputSchema: { type: "object", properties: { question: { type: "string" } }, required: ["question"] },
  async execute({ question }, ctx) {
    "use workflow";
    const target = await pickAgent(question, ctx.abortSignal);
    const response = await ctx.agent(target).send(question, { signal: ctx.abortSignal });
    const { status, reply, error } = await response.result();
    if (status !== "completed") throw new Error(`${target} did not answer: ${error ? error.message : status}`);
    return { agent: target, reply };
  },
});

async function pickAgent(question, signal) {
  "use step";
  signal.throwIfAborted();
  return /invoice|refund|charge|billing/i.test(question) ? "billing" : "support";
}
