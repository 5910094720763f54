// Command order waits for an order's payment: it creates a hook with the
// fixed token order-<id>, so the payment system can find it later and
// resume it (the host's resumeHook) with the payment.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o order.wasm .
package main

import (
	"fmt"

	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	OrderID string `json:"orderId"`
}

type payment struct {
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
}

func init() {
	sandflow.Name("order")
	sandflow.Execute(func(ctx *sandflow.Context, in input) (map[string]any, error) {
		hook, err := sandflow.CreateHook[payment](ctx, sandflow.HookOptions{Token: "order-" + in.OrderID})
		if err != nil {
			return nil, err
		}
		if run := hook.Conflict(); run != "" {
			return nil, sandflow.FatalError(fmt.Sprintf("order %s is already awaited by run %s", in.OrderID, run))
		}
		p, err := hook.Next(ctx).Await(ctx)
		if err != nil {
			return nil, err
		}
		return map[string]any{"orderId": in.OrderID, "paid": p.Amount, "currency": p.Currency}, nil
	})
}

func main() {}
