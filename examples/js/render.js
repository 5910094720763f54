// render: the "wait for an external system to call back". Create a
// webhook, submit the render job with its URL in a step, and wait, holding
// no compute, until the render farm posts its result to the URL.
//
//   sandflow tool add examples/js/render.js
defineWorkflowTool({
  description: "Render a video. Returns the URL once the render farm finishes.",
  inputSchema: { type: "object", properties: { projectId: { type: "string" } }, required: ["projectId"] },
  async execute({ projectId }) {
    "use workflow";
    const done = createWebhook();
    const jobId = await submitRender(projectId, done.url);
    const callback = await done;
    const { status, url } = await callback.json();

    if (status !== "ok") throw new FatalError(`Render ${jobId} failed: ${status}`);
    return { url };
  },
});

// submitRender stands in for the call to a render farm; it prints the
// callback URL it would hand over.
async function submitRender(projectId, callbackUrl) {
  "use step";
  console.log(`side effect: submitted render of ${projectId} with callback ${callbackUrl}`);
  return `job-${projectId}`;
}
