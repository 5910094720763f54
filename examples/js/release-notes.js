// release-notes: the "review the release notes, then publish if
// approved". The publish step can only run after the reviewer agent's
// structured answer approves, whatever the model does.
//
//   sandflow --agents examples/agents.json plugin add examples/js/release-notes.js
defineWorkflowTool({
  description: "Have the reviewer check the release notes, then publish them if approved.",
  inputSchema: { type: "object", properties: { notes: { type: "string" } }, required: ["notes"] },
  async execute({ notes }, ctx) {
    "use workflow";
    const response = await ctx.agent("reviewer").send(`Review these release notes:\n\n${notes}`, {
      outputSchema: {
        type: "object",
        properties: { approved: { type: "boolean" }, reason: { type: "string" } },
        required: ["approved", "reason"],
      },
    });
    const { data, status } = await response.result();
    if (status === "failed" || data === undefined) {
      throw new Error("The review did not finish.");
    }
    if (!data.approved) return { published: false, reason: data.reason };
    return { published: true, url: await publish(notes) };
  },
});

async function publish(notes) {
  "use step";
  console.log(`side effect: published ${notes.length} characters of release notes`);
  return `https://notes.deploys.invalid/${getStepMetadata().stepId.replace(":", "-")}`;
}
