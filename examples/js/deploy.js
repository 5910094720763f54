// deploy: the deploy tool as an authored JavaScript tool. Plan the
// deploy in a step, ask a person to confirm it, and apply it in a step
// once approved.
//
//   sandflow tool add examples/js/deploy.js
defineWorkflowTool({
  description: "Deploy a service to production. Pauses for a human to approve the plan.",
  inputSchema: {
    type: "object",
    properties: { service: { type: "string", minLength: 1 } },
    required: ["service"],
    additionalProperties: false,
  },
  async execute({ service }, ctx) {
    "use workflow";
    const plan = await planDeploy(service);
    const answer = await ctx.ask({
      prompt: `Deploy ${service}?\n\n${plan.summary}`,
      display: "confirmation",
      options: [
        { id: "approve", label: "Deploy", style: "primary" },
        { id: "cancel", label: "Cancel" },
      ],
    });

    if (answer.status !== "answered" || answer.optionId !== "approve") {
      return { deployed: false, reason: "rejected" };
    }
    return { deployed: true, url: await applyDeploy(plan) };
  },
});

async function planDeploy(service) {
  "use step";
  const { stepId, attempt } = getStepMetadata();
  console.log(`side effect: planned deploy of ${service} (step ${stepId}, attempt ${attempt})`);
  const steps = [`build ${service}`, "push image", "roll out 3 replicas"];
  return { service, steps, summary: steps.join(" → ") };
}

async function applyDeploy(plan) {
  "use step";
  const { stepId, attempt } = getStepMetadata();
  console.log(`side effect: applied deploy of ${plan.service} (step ${stepId}, attempt ${attempt})`);
  return `https://${plan.service}.deploys.invalid/releases/${stepId.replace(":", "-")}`;
}
