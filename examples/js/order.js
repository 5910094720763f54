// order: wait for an order's payment. The hook has the fixed token
// order-<id>, so the payment system can find it later and resume it with
// the payment (sandflow hooks resume order-<id> --payload ...).
//
//   sandflow tool add examples/js/order.js
defineWorkflowTool({
  description: "Wait for an order's payment and report it.",
  inputSchema: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
  async execute({ orderId }) {
    "use workflow";
    const hook = createHook({ token: `order-${orderId}` });
    const holder = await hook.getConflict();
    if (holder !== null) throw new FatalError(`order ${orderId} is already awaited by run ${holder}`);
    const payment = await hook;
    return { orderId, paid: payment.amount, currency: payment.currency };
  },
});
