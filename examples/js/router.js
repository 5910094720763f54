// router: the spec's agent router. A step picks the target agent (a
// routing decision is a side effect of judgement, recorded once), and
// ctx.agent sends the question there.
//
//   sandflow --agents agents.json plugin add examples/js/router.js
defineWorkflowTool({
  description: "Answer a customer's question with the agent that handles its topic.",
  inputSchema: { type: "object", properties: { question: { type: "string" } }, required: ["question"] },
  async execute({ question }, ctx) {
    "use workflow";
    const target = await pickAgent(question);
    const response = await ctx.agent(target).send(question);
    const { status, reply, error } = await response.result();
    if (status !== "completed") throw new Error(`${target} did not answer: ${error ? error.message : status}`);
    return { agent: target, reply };
  },
});

async function pickAgent(question) {
  "use step";
  return /invoice|refund|charge|billing/i.test(question) ? "billing" : "support";
}
