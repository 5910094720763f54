// Command guest is the crash harness's tool. Each of its steps tells the
// harness's counter server that it ran (one request per execution, sent
// before the step returns), so the harness can compare how often a step
// really ran with the attempts the run's log records. Between the steps
// it waits on whatever its input asks for: a question, a durable sleep, a
// hook, a webhook and an agent turn, in that order.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o chaos.wasm .
package main

import (
	"fmt"
	"net/url"
	"time"

	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	Counter     string `json:"counter"`
	StepDelayMs int    `json:"stepDelayMs"`
	Ask         bool   `json:"ask"`
	SleepMs     int64  `json:"sleepMs"`
	Hook        string `json:"hook"`
	Webhook     bool   `json:"webhook"`
	Agent       string `json:"agent"`
}

// effect is the body of the tool's steps s1, s2 and s3: it reports one
// execution to the counter server, which holds its response for delayMs
// so that a kill of the host lands inside the step now and then. The step
// names differ so that the harness can tell the steps' ops apart in the
// log.
func effect(name string) *sandflow.Step[effectIn, string] {
	return sandflow.DefineStep(name, func(sc *sandflow.StepContext, in effectIn) (string, error) {
		q := url.Values{"run": {sc.RunID()}, "step": {name}, "stepId": {sc.StepID()},
			"attempt": {fmt.Sprint(sc.Attempt())}, "delayMs": {fmt.Sprint(in.DelayMs)}}
		resp, err := sandflow.Fetch(sc, sandflow.FetchRequest{Method: "POST", URL: in.Counter + "/hit?" + q.Encode()})
		if err != nil {
			return "", err
		}
		if resp.Status != 200 {
			return "", fmt.Errorf("counter server answered %d", resp.Status)
		}
		return name + "@" + fmt.Sprint(sc.Attempt()), nil
	},
		// Kills land inside steps often, and an interrupted attempt counts
		// against the retry policy like a failed one: enough attempts, soon
		// after each other, that the runs end within the harness's time.
		sandflow.MaxAttempts(20), sandflow.Backoff(50*time.Millisecond, 500*time.Millisecond, 2))
}

type effectIn struct {
	Counter string `json:"counter"`
	DelayMs int    `json:"delayMs"`
}

var steps = map[string]*sandflow.Step[effectIn, string]{"s1": effect("s1"), "s2": effect("s2"), "s3": effect("s3")}

func init() {
	sandflow.Execute(func(ctx *sandflow.Context, in input) (map[string]any, error) {
		out := map[string]any{}
		step := func(name string) error {
			v, err := steps[name].Run(ctx, effectIn{Counter: in.Counter, DelayMs: in.StepDelayMs})
			out[name] = v
			return err
		}
		if err := step("s1"); err != nil {
			return nil, err
		}
		if in.Ask {
			a, err := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: "chaos?", Display: sandflow.DisplayText}).Await(ctx)
			if err != nil {
				return nil, err
			}
			out["answer"] = a
		}
		if err := step("s2"); err != nil {
			return nil, err
		}
		if in.SleepMs > 0 {
			if _, err := sandflow.Sleep(ctx, time.Duration(in.SleepMs)*time.Millisecond).Await(ctx); err != nil {
				return nil, err
			}
			out["slept"] = in.SleepMs
		}
		if in.Hook != "" {
			h, err := sandflow.CreateHook[map[string]any](ctx, sandflow.HookOptions{Token: in.Hook})
			if err != nil {
				return nil, err
			}
			p, err := h.Next(ctx).Await(ctx)
			if err != nil {
				return nil, err
			}
			out["hook"] = p
		}
		if in.Webhook {
			w, err := sandflow.CreateWebhook(ctx, sandflow.WebhookOptions{})
			if err != nil {
				return nil, err
			}
			r, err := w.Next(ctx).Await(ctx)
			if err != nil {
				return nil, err
			}
			out["webhook"] = string(r.Bytes())
		}
		if in.Agent != "" {
			r, err := sandflow.Agent(ctx, in.Agent, sandflow.AgentRequest{Message: "chaos turn"}).Await(ctx)
			if err != nil {
				return nil, err
			}
			out["agent"] = r
		}
		if err := step("s3"); err != nil {
			return nil, err
		}
		return out, nil
	})
}

func main() {}
