// Command release-plan is the resumable task as a Go guest: a
// serve body drafts a release plan for the first call, replies, and waits
// for the next call to the same task (by its taskId) to revise it. The
// plan lives in a variable of the body; replay rebuilds it from the
// recorded steps.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o release-plan.wasm .
package main

import (
	"fmt"
	"strings"

	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type request struct {
	Request string `json:"request"`
}

type plan struct {
	Revision int      `json:"revision"`
	Requests []string `json:"requests"`
	Steps    []string `json:"steps"`
}

type revision struct {
	Plan    *plan  `json:"plan"`
	Request string `json:"request"`
}

// revise drafts the plan, or revises it for a request.
var revise = sandflow.DefineStep("revise", func(sc *sandflow.StepContext, r revision) (plan, error) {
	next := plan{Revision: 1, Steps: []string{"freeze the release branch", "run the release checklist", "tag and publish"}}
	if r.Plan != nil {
		next = plan{Revision: r.Plan.Revision + 1, Requests: r.Plan.Requests, Steps: append([]string(nil), r.Plan.Steps...)}
	}
	fmt.Printf("side effect: revision %d for %q\n", next.Revision, r.Request)
	if len(r.Request) > 4 && strings.EqualFold(r.Request[:4], "add ") {
		n := len(next.Steps)
		next.Steps = append(next.Steps[:n-1:n-1], r.Request[4:], next.Steps[n-1])
	}
	next.Requests = append(append([]string(nil), next.Requests...), r.Request)
	return next, nil
})

func init() {
	sandflow.Name("release-plan")
	sandflow.Serve(func(ctx *sandflow.Context, calls *sandflow.Calls[request]) (*plan, error) {
		var p *plan
		for {
			call, err := calls.Receive(ctx).Await(ctx)
			if err != nil {
				return p, err
			}
			next, err := revise.Run(ctx, revision{Plan: p, Request: call.Input.Request})
			if err != nil {
				return p, err
			}
			p = &next
			if _, err := sandflow.Reply(ctx, p); err != nil {
				return p, err
			}
		}
	})
}

func main() {}
