// Command workload is the Go guest of the benchmark workloads
// (bench/workload). The input's mode picks the workload; each makes the
// same ops, in the same order and activations, as the C guest
// (../cworkload) and the JavaScript tool (../../workload.js), so that a
// history recorded by one replays on the others:
//
//   - steps: n sequential steps "inc" (v -> v+1) from 0; the result is n.
//   - fanout: n agent turns with the agent "echo", all sent before any is
//     awaited, then awaited together; the result is how many completed.
//   - askstep: n times, a question, then a step "inc"; the result is n.
//   - stepsask: n steps "inc", then asks questions one after another; the
//     result is n.
//   - greet: no ops; the result is {"greeting":"hello "+name}, the work of a
//     trivial tool (bench/peers' Extism plugin does the same).
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o workload.wasm .
package main

import (
	"fmt"
	"strconv"

	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	Mode string `json:"mode"`
	N    int    `json:"n"`
	Asks int    `json:"asks"`
	Name string `json:"name"`
}

type greeting struct {
	Greeting string `json:"greeting"`
}

var inc = sandflow.DefineStep("inc", func(sc *sandflow.StepContext, v int) (int, error) { return v + 1, nil })

// maxAwait is how many futures one await may list (abi/README.md).
const maxAwait = 4096

var question = sandflow.AskRequest{Prompt: "Go on?", Options: []sandflow.AskOption{{ID: "ok", Label: "OK"}}}

func ask(ctx *sandflow.Context) error {
	a, err := sandflow.Ask(ctx, question).Await(ctx)
	if err != nil {
		return err
	}
	if a.Status != "answered" {
		return sandflow.FatalError("question not answered: " + a.Status)
	}
	return nil
}

func init() {
	// greet returns its greeting as any, a type the SDK cannot see to
	// warm: a tool warms such types itself (sandflow.Warm says why).
	sandflow.Warm[greeting]()
	sandflow.Execute(func(ctx *sandflow.Context, in input) (any, error) {
		switch in.Mode {
		case "greet":
			return greeting{Greeting: "hello " + in.Name}, nil

		case "steps":
			v := 0
			for range in.N {
				var err error
				if v, err = inc.Run(ctx, v); err != nil {
					return 0, err
				}
			}
			return v, nil

		case "fanout":
			fs := make([]*sandflow.Future[sandflow.AgentResult], in.N)
			for i := range fs {
				fs[i] = sandflow.Agent(ctx, "echo", sandflow.AgentRequest{Message: "m" + strconv.Itoa(i)})
			}
			for lo := 0; lo < len(fs); lo += maxAwait {
				chunk := make([]sandflow.Awaitable, 0, maxAwait)
				for _, f := range fs[lo:min(lo+maxAwait, len(fs))] {
					chunk = append(chunk, f)
				}
				if err := sandflow.All(ctx, chunk...); err != nil {
					return 0, err
				}
			}
			done := 0
			for _, f := range fs {
				if r, err := f.Await(ctx); err == nil && r.Status == "completed" {
					done++
				}
			}
			return done, nil

		case "askstep":
			v := 0
			for range in.N {
				if err := ask(ctx); err != nil {
					return 0, err
				}
				var err error
				if v, err = inc.Run(ctx, v); err != nil {
					return 0, err
				}
			}
			return v, nil

		case "stepsask":
			v := 0
			for range in.N {
				var err error
				if v, err = inc.Run(ctx, v); err != nil {
					return 0, err
				}
			}
			for range in.Asks {
				if err := ask(ctx); err != nil {
					return 0, err
				}
			}
			return v, nil
		}
		return 0, sandflow.FatalError(fmt.Sprintf("unknown mode %q", in.Mode))
	})
}

func main() {}
