// approve-deadline: the "approve with a deadline and an escalation".
// One question stays open the whole time; if nobody answers before the
// first deadline, page on-call and wait until the second.
//
//   sandflow tool add examples/js/approve-deadline.js
const APPROVE_OR_CANCEL = [
  { id: "approve", label: "Deploy", style: "primary" },
  { id: "cancel", label: "Cancel" },
];

defineWorkflowTool({
  description: "Deploy a service once a person approves; pages on-call if nobody answers in time.",
  inputSchema: {
    type: "object",
    properties: {
      service: { type: "string" },
      firstDeadline: { type: "string", default: "4h" },
      secondDeadline: { type: "string", default: "20h" },
    },
    required: ["service"],
  },
  async task({ service, firstDeadline = "4h", secondDeadline = "20h" }, ctx) {
    "use workflow";
    const plan = await planDeploy(service);
    const pending = ctx.ask({ prompt: `Deploy ${service}?`, display: "confirmation", options: APPROVE_OR_CANCEL });

    let paged = false;
    let answer = await Promise.race([pending, sleep(firstDeadline)]);
    if (answer === undefined) {
      paged = await pageOnCall(service);
      answer = await Promise.race([pending, sleep(secondDeadline)]);
    }

    if (answer === undefined) return { deployed: false, reason: "timed out", paged };
    if (answer.status !== "answered" || answer.optionId !== "approve") {
      return { deployed: false, reason: "rejected", paged };
    }
    return { deployed: true, url: await applyDeploy(plan), paged };
  },
});

async function planDeploy(service) {
  "use step";
  const steps = [`build ${service}`, "push image", "roll out 3 replicas"];
  return { service, steps, summary: steps.join(" → ") };
}

async function pageOnCall(service) {
  "use step";
  console.log(`side effect: paged on-call about ${service} (step ${getStepMetadata().stepId})`);
  return true;
}

async function applyDeploy(plan) {
  "use step";
  const { stepId } = getStepMetadata();
  console.log(`side effect: applied deploy of ${plan.service} (step ${stepId})`);
  return `https://${plan.service}.deploys.invalid/releases/${stepId.replace(":", "-")}`;
}
