// Package lib holds the steps the deploy examples share. Steps are
// package-level: the host finds them by name in a step instance.
package lib

import (
	"fmt"
	"strings"

	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

// Plan is what a deploy would do.
type Plan struct {
	Service string   `json:"service"`
	Summary string   `json:"summary"`
	Steps   []string `json:"steps"`
}

// PlanDeploy computes a deploy plan. It prints a line per execution, which
// the host records, so tests can count how often the side effect ran.
var PlanDeploy = sandflow.DefineStep("planDeploy", func(sc *sandflow.StepContext, service string) (Plan, error) {
	if strings.TrimSpace(service) == "" {
		return Plan{}, sandflow.FatalError("no service named")
	}
	fmt.Printf("side effect: planned deploy of %s (step %s, attempt %d)\n", service, sc.StepID(), sc.Attempt())
	steps := []string{"build " + service, "push image", "roll out 3 replicas"}
	return Plan{Service: service, Steps: steps, Summary: strings.Join(steps, " → ")}, nil
})

// ApplyDeploy applies a plan and returns the release URL.
var ApplyDeploy = sandflow.DefineStep("applyDeploy", func(sc *sandflow.StepContext, plan Plan) (string, error) {
	fmt.Printf("side effect: applied deploy of %s (step %s, attempt %d)\n", plan.Service, sc.StepID(), sc.Attempt())
	return fmt.Sprintf("https://%s.deploys.invalid/releases/%s", plan.Service, strings.ReplaceAll(sc.StepID(), ":", "-")), nil
})

// PageOnCall escalates to the on-call person.
var PageOnCall = sandflow.DefineStep("pageOnCall", func(sc *sandflow.StepContext, service string) (bool, error) {
	fmt.Printf("side effect: paged on-call about %s (step %s)\n", service, sc.StepID())
	return true, nil
})

// ApproveOrCancel are the options of a deploy question.
var ApproveOrCancel = []sandflow.AskOption{
	{ID: "approve", Label: "Deploy", Style: sandflow.StylePrimary},
	{ID: "cancel", Label: "Cancel"},
}
