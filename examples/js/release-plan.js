// release-plan: the resumable task. A serve body drafts a release
// plan for the first call, replies, and waits for the next call to the
// same task (by its taskId) to revise it. The plan lives in a variable of
// the body: replay rebuilds it from the recorded steps.
//
//   sandflow plugin add examples/js/release-plan.js
defineWorkflowTool({
  description: "Draft a release plan and revise it on request.",
  inputSchema: {
    type: "object",
    properties: { request: { type: "string", minLength: 1 } },
    required: ["request"],
    additionalProperties: false,
  },
  async serve(receive, ctx) {
    "use workflow";
    let plan;
    for (;;) {
      const { input, abortSignal } = await receive(); // the first call, then each by taskId
      try {
        plan = await revise(plan, input.request);
        ctx.reply(plan); // a result; the task stays available
      } catch (error) {
        if (!abortSignal.aborted) throw error; // cancelled: wait for the next call
      }
    }
  },
});

async function revise(plan, request) {
  "use step";
  console.log(`side effect: revision ${plan ? plan.revision + 1 : 1} for "${request}"`);
  const steps = plan ? plan.steps.slice() : ["freeze the release branch", "run the release checklist", "tag and publish"];
  const m = /^add (.+)$/i.exec(request);
  if (m) steps.splice(steps.length - 1, 0, m[1]);
  return { revision: plan ? plan.revision + 1 : 1, requests: [...(plan ? plan.requests : []), request], steps };
}
