// Command deploy-v2 is the deploy example with its op order changed: it
// asks before it plans. A run started on the original cannot move to it.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o deploy-v2.wasm .
package main

import (
	"github.com/sandflow/sandflow/examples/lib"
	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	Service string `json:"service"`
}

func init() {
	sandflow.Execute(func(ctx *sandflow.Context, in input) (map[string]any, error) {
		answer, err := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: "Deploy " + in.Service + "?", Options: lib.ApproveOrCancel}).Await(ctx)
		if err != nil {
			return nil, err
		}
		if answer.OptionID != "approve" {
			return map[string]any{"deployed": false}, nil
		}
		plan, err := lib.PlanDeploy.Run(ctx, in.Service)
		if err != nil {
			return nil, err
		}
		url, err := lib.ApplyDeploy.Run(ctx, plan)
		return map[string]any{"deployed": true, "url": url}, err
	})
}

func main() {}
