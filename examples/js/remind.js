// remind: the reminder tool. Report progress, sleep durably, and
// return the note. (A reminder is naturally an async generator that yields
// progress; goja has no async generators, so progress is ctx.progress.)
//
//   sandflow tool add examples/js/remind.js
defineWorkflowTool({
  description: "Schedule a reminder.",
  inputSchema: {
    type: "object",
    properties: { note: { type: "string" }, delay: { type: "string" } },
    required: ["note", "delay"],
  },
  async execute({ note, delay }, ctx) {
    "use workflow";
    ctx.progress({ status: "preparing reminder" });
    await sleep(delay);
    return { reminder: note };
  },
});
