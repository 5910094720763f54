// Command deploy is the deploy tool: plan the deploy in a step, ask
// a person to confirm it, and apply it in a step once approved.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o deploy.wasm .
package main

import (
	"fmt"

	"github.com/sandflow/sandflow/examples/lib"
	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	Service string `json:"service"`
}

type output struct {
	Deployed bool   `json:"deployed"`
	Reason   string `json:"reason,omitempty"`
	URL      string `json:"url,omitempty"`
}

func init() {
	sandflow.Name("deploy")
	sandflow.Execute(func(ctx *sandflow.Context, in input) (output, error) {
		plan, err := lib.PlanDeploy.Run(ctx, in.Service)
		if err != nil {
			return output{}, err
		}
		answer, err := sandflow.Ask(ctx, sandflow.AskRequest{
			Prompt:  fmt.Sprintf("Deploy %s?\n\n%s", in.Service, plan.Summary),
			Display: sandflow.DisplayConfirmation,
			Options: lib.ApproveOrCancel,
		}).Await(ctx)
		if err != nil {
			return output{}, err
		}
		if answer.Status != sandflow.Answered || answer.OptionID != "approve" {
			return output{Deployed: false, Reason: "rejected"}, nil
		}
		url, err := lib.ApplyDeploy.Run(ctx, plan)
		if err != nil {
			return output{}, err
		}
		return output{Deployed: true, URL: url}, nil
	})
}

func main() {}
