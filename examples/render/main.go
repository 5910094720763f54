// Command render is the "wait for an external system to call back":
// it creates a webhook, submits a render job with the webhook's URL in a
// step, and waits, holding no compute, until the render farm posts its
// result to that URL.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o render.wasm .
package main

import (
	"fmt"

	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	ProjectID string `json:"projectId"`
}

type submission struct {
	ProjectID   string `json:"projectId"`
	CallbackURL string `json:"callbackUrl"`
}

// submitRender stands in for the call to a render farm; it prints the
// callback URL it would hand over.
var submitRender = sandflow.DefineStep("submitRender", func(sc *sandflow.StepContext, s submission) (string, error) {
	fmt.Printf("side effect: submitted render of %s with callback %s\n", s.ProjectID, s.CallbackURL)
	return "job-" + s.ProjectID, nil
})

func init() {
	sandflow.Name("render")
	sandflow.Execute(func(ctx *sandflow.Context, in input) (map[string]string, error) {
		done, err := sandflow.CreateWebhook(ctx, sandflow.WebhookOptions{})
		if err != nil {
			return nil, err
		}
		jobID, err := submitRender.Run(ctx, submission{ProjectID: in.ProjectID, CallbackURL: done.URL()})
		if err != nil {
			return nil, err
		}
		callback, err := done.Next(ctx).Await(ctx)
		if err != nil {
			return nil, err
		}
		var result struct{ Status, URL string }
		if err := callback.JSON(&result); err != nil {
			return nil, sandflow.FatalError(fmt.Sprintf("render %s: the callback is not JSON: %v", jobID, err))
		}
		if result.Status != "ok" {
			return nil, sandflow.FatalError(fmt.Sprintf("render %s failed: %s", jobID, result.Status))
		}
		return map[string]string{"url": result.URL}, nil
	})
}

func main() {}
