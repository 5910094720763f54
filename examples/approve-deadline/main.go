// Command approve-deadline is the "approve with a deadline and an
// escalation": one question stays open the whole time; if nobody answers
// before the first deadline, page on-call and wait for the second.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o approve-deadline.wasm .
package main

import (
	"fmt"
	"time"

	"github.com/sandflow/sandflow/examples/lib"
	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	Service        string `json:"service"`
	FirstDeadline  string `json:"firstDeadline"`
	SecondDeadline string `json:"secondDeadline"`
}

type output struct {
	Deployed bool   `json:"deployed"`
	Reason   string `json:"reason,omitempty"`
	URL      string `json:"url,omitempty"`
	Paged    bool   `json:"paged,omitempty"`
}

func init() {
	sandflow.Name("approve-deadline")
	sandflow.Task(func(ctx *sandflow.Context, in input) (output, error) {
		first, err := time.ParseDuration(in.FirstDeadline)
		if err != nil {
			return output{}, sandflow.FatalError("firstDeadline: " + err.Error())
		}
		second, err := time.ParseDuration(in.SecondDeadline)
		if err != nil {
			return output{}, sandflow.FatalError("secondDeadline: " + err.Error())
		}
		plan, err := lib.PlanDeploy.Run(ctx, in.Service)
		if err != nil {
			return output{}, err
		}
		pending := sandflow.Ask(ctx, sandflow.AskRequest{
			Prompt:  fmt.Sprintf("Deploy %s?", in.Service),
			Display: sandflow.DisplayConfirmation,
			Options: lib.ApproveOrCancel,
		})

		won, err := sandflow.Race(ctx, pending, sandflow.Sleep(ctx, first))
		if err != nil {
			return output{}, err
		}
		paged := false
		if won == 1 {
			if paged, err = lib.PageOnCall.Run(ctx, in.Service); err != nil {
				return output{}, err
			}
			if won, err = sandflow.Race(ctx, pending, sandflow.Sleep(ctx, second)); err != nil {
				return output{}, err
			}
		}
		if won == 1 {
			return output{Deployed: false, Reason: "timed out", Paged: paged}, nil
		}
		answer, err := pending.Await(ctx)
		if err != nil {
			return output{}, err
		}
		if answer.Status != sandflow.Answered || answer.OptionID != "approve" {
			return output{Deployed: false, Reason: "rejected", Paged: paged}, nil
		}
		url, err := lib.ApplyDeploy.Run(ctx, plan)
		if err != nil {
			return output{}, err
		}
		return output{Deployed: true, URL: url, Paged: paged}, nil
	})
}

func main() {}
