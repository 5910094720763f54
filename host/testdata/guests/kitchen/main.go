// Command kitchen is a test tool with many scenarios, picked by the input's
// mode. Each scenario exercises one kernel behaviour.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o kitchen.wasm .
package main

import (
	crand "crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"time"

	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	Mode  string `json:"mode"`
	N     int    `json:"n"`
	Token string `json:"token"`
	Ms    int64  `json:"ms"`
	Fail  int    `json:"fail"`
	Text  string `json:"text"`
}

// observation is what the determinism scenario sees of its world.
type observation struct {
	Now      string   `json:"now"`
	Rand     int64    `json:"rand"`
	Crypto   string   `json:"crypto"`
	MapOrder []string `json:"mapOrder"`
	Select   []int    `json:"select"`
	// Bodies counts the workflow bodies this instance has begun, this
	// one included: an instance reused without being reset would count
	// its earlier runs.
	Bodies int `json:"bodies"`
}

var bodies int

func observe() observation {
	m := map[string]int{}
	for i := range 16 {
		m[fmt.Sprintf("k%02d", i)] = i
	}
	var order []string
	for k := range m {
		order = append(order, k)
	}
	b := make([]byte, 8)
	crand.Read(b)
	// select among ready channels picks at random: it must replay too.
	a, c := make(chan int, 8), make(chan int, 8)
	for i := range 8 {
		a <- 0
		c <- 1
		_ = i
	}
	var sel []int
	for range 8 {
		select {
		case v := <-a:
			sel = append(sel, v)
		case v := <-c:
			sel = append(sel, v)
		}
	}
	// Where new objects of a few size classes land: any allocation that
	// differs before this moves one of them.
	return observation{Now: time.Now().UTC().Format(time.RFC3339Nano), Rand: rand.Int63(), Crypto: hex.EncodeToString(b), MapOrder: order, Select: sel,
		Bodies: bodies}
}

// count calls the host's "count" capability, which tallies calls by key.
var count = sandflow.DefineStep("count", func(sc *sandflow.StepContext, key string) (int, error) {
	return sandflow.Call[int](sc, "count", key)
})

// flaky fails until its attempt number passes in.Fail.
type flakyIn struct {
	Key  string `json:"key"`
	Fail int    `json:"fail"`
	Kind string `json:"kind"`
}

var flaky = sandflow.DefineStep("flaky", func(sc *sandflow.StepContext, in flakyIn) (int, error) {
	n, err := sandflow.Call[int](sc, "count", in.Key)
	if err != nil {
		return 0, err
	}
	if sc.Attempt() <= in.Fail {
		switch in.Kind {
		case "fatal":
			return 0, sandflow.FatalError(fmt.Sprintf("attempt %d: fatal", sc.Attempt()))
		case "retry-after":
			return 0, sandflow.RetryableError(fmt.Sprintf("attempt %d: busy", sc.Attempt()), 300*time.Millisecond)
		case "panic":
			panic(fmt.Sprintf("attempt %d panics", sc.Attempt()))
		}
		return 0, fmt.Errorf("attempt %d: transient", sc.Attempt())
	}
	return n, nil
}, sandflow.MaxAttempts(3), sandflow.Backoff(50*time.Millisecond, time.Second, 2))

var fetchStep = sandflow.DefineStep("fetch", func(sc *sandflow.StepContext, url string) (map[string]any, error) {
	resp, err := sandflow.Fetch(sc, sandflow.FetchRequest{URL: url, Headers: map[string]string{"X-Step": sc.StepID()}})
	if err != nil {
		return map[string]any{"error": sandflow.ErrorType(err), "message": err.Error()}, nil
	}
	return map[string]any{"status": resp.Status, "body": resp.Body}, nil
}, sandflow.MaxAttempts(1))

// fetchRetry is fetch with attempts to spare: an attempt cut off (its
// host killed) is retried.
var fetchRetry = sandflow.DefineStep("fetchRetry", func(sc *sandflow.StepContext, url string) (map[string]any, error) {
	resp, err := sandflow.Fetch(sc, sandflow.FetchRequest{URL: url, Headers: map[string]string{"X-Step": sc.StepID()}})
	if err != nil {
		return nil, err
	}
	return map[string]any{"status": resp.Status, "body": resp.Body}, nil
}, sandflow.MaxAttempts(3), sandflow.Backoff(50*time.Millisecond, time.Second, 2))

var echo = sandflow.DefineStep("echo", func(sc *sandflow.StepContext, v int) (int, error) { return v, nil })

var noCall = sandflow.DefineStep("notListed", func(sc *sandflow.StepContext, _ int) (int, error) {
	return sandflow.Call[int](sc, "secret", 1)
}, sandflow.MaxAttempts(1))

var bigResult = sandflow.DefineStep("bigResult", func(sc *sandflow.StepContext, n int) (string, error) {
	return strings.Repeat("x", n), nil
})

// untilAborted tallies key (so a test knows it runs), then waits, up to
// 20 seconds, for the run to be aborted, and returns the abort's reason
// and whether it saw an abort before it began waiting.
var untilAborted = sandflow.DefineStep("untilAborted", func(sc *sandflow.StepContext, key string) (map[string]any, error) {
	_, early := sc.Aborted()
	if _, err := sandflow.Call[int](sc, "count", key); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if a, ok := sc.Aborted(); ok {
			return map[string]any{"reason": a.Reason, "early": early}, nil
		}
	}
	return map[string]any{"reason": "", "early": early}, nil
}, sandflow.MaxAttempts(1))

var stepLoop = sandflow.DefineStep("stepLoop", func(sc *sandflow.StepContext, _ int) (int, error) {
	for {
	}
}, sandflow.MaxAttempts(1))

func init() {
	sandflow.Execute(func(ctx *sandflow.Context, in input) (any, error) {
		bodies++
		switch in.Mode {
		case "determinism", "determinism-after-step":
			if in.Mode == "determinism-after-step" {
				// Live, the run suspends and resumes at the step; on
				// replay the step settles at once. What is observed after
				// it must not tell the two apart.
				if _, err := echo.Run(ctx, 1); err != nil {
					return nil, err
				}
			}
			before := observe()
			if err := sandflow.Progress(ctx, before); err != nil {
				return nil, err
			}
			if _, err := sandflow.Sleep(ctx, time.Duration(in.Ms)*time.Millisecond).Await(ctx); err != nil {
				return nil, err
			}
			after := observe()
			return map[string]observation{"before": before, "after": after}, nil

		case "steps":
			// n sequential steps, then the sum.
			sum := 0
			for i := range in.N {
				v, err := echo.Run(ctx, i)
				if err != nil {
					return nil, err
				}
				sum += v
			}
			return sum, nil

		case "held-step", "held-step-unused":
			// A step started first and, with held-step, awaited only after n
			// more steps and three questions: a resume then needs an op
			// from the start of a long history.
			held := echo.Start(ctx, 1000)
			sum := 0
			for i := range in.N {
				v, err := echo.Run(ctx, i)
				if err != nil {
					return nil, err
				}
				sum += v
			}
			var texts []string
			for i := range 3 {
				a, err := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: fmt.Sprintf("q%d?", i), Display: sandflow.DisplayText}).Await(ctx)
				if err != nil {
					return nil, err
				}
				texts = append(texts, a.Text)
			}
			if in.Mode == "held-step" {
				v, err := held.Await(ctx)
				if err != nil {
					return nil, err
				}
				sum += v
			}
			return map[string]any{"sum": sum, "answers": texts}, nil

		case "parallel":
			fs := make([]sandflow.Awaitable, in.N)
			futures := make([]*sandflow.Future[int], in.N)
			for i := range in.N {
				futures[i] = echo.Start(ctx, i)
				fs[i] = futures[i]
			}
			if err := sandflow.All(ctx, fs...); err != nil {
				return nil, err
			}
			sum := 0
			for _, f := range futures {
				v, _ := f.Await(ctx)
				sum += v
			}
			return sum, nil

		case "count":
			return count.Run(ctx, in.Token)

		case "flaky", "fatal", "retry-after", "panic-step":
			kind := map[string]string{"flaky": "error", "fatal": "fatal", "retry-after": "retry-after", "panic-step": "panic"}[in.Mode]
			n, err := flaky.Run(ctx, flakyIn{Key: in.Token, Fail: in.Fail, Kind: kind})
			if err != nil {
				return map[string]any{"failed": true, "type": sandflow.ErrorType(err), "message": err.Error()}, nil
			}
			return map[string]any{"calls": n}, nil

		case "hooks":
			h, err := sandflow.CreateHook[map[string]any](ctx, sandflow.HookOptions{Token: in.Token, Metadata: map[string]string{"purpose": "test"}})
			if err != nil {
				return nil, err
			}
			if c := h.Conflict(); c != "" {
				_, err := h.Next(ctx).Await(ctx)
				return map[string]any{"conflict": c, "type": sandflow.ErrorType(err)}, nil
			}
			if err := sandflow.Progress(ctx, map[string]string{"token": h.Token()}); err != nil {
				return nil, err
			}
			var got []map[string]any
			for range in.N {
				p, err := h.Next(ctx).Await(ctx)
				if err != nil {
					return nil, err
				}
				got = append(got, p)
			}
			if in.Fail == 1 {
				if err := h.Dispose(ctx); err != nil {
					return nil, err
				}
				_, err := h.Next(ctx).Await(ctx)
				return map[string]any{"payloads": got, "afterDispose": sandflow.ErrorType(err)}, nil
			}
			return map[string]any{"payloads": got}, nil

		case "multihost":
			// Every kind of wait a host may leave a run in: a step (with a
			// side effect), a durable sleep, a question, a hook, a step.
			a, err := count.Run(ctx, in.Token+"/1")
			if err != nil {
				return nil, err
			}
			if _, err := sandflow.Sleep(ctx, time.Duration(in.Ms)*time.Millisecond).Await(ctx); err != nil {
				return nil, err
			}
			ans, err := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: "go on?", Display: sandflow.DisplayText}).Await(ctx)
			if err != nil {
				return nil, err
			}
			h, err := sandflow.CreateHook[map[string]any](ctx, sandflow.HookOptions{Token: in.Token})
			if err != nil {
				return nil, err
			}
			p, err := h.Next(ctx).Await(ctx)
			if err != nil {
				return nil, err
			}
			b, err := count.Run(ctx, in.Token+"/2")
			if err != nil {
				return nil, err
			}
			return map[string]any{"counts": []int{a, b}, "answer": ans.Text, "hook": p}, nil

		case "hold-hook":
			// Holds a hook and waits on a question, so its token stays taken.
			if _, err := sandflow.CreateHook[any](ctx, sandflow.HookOptions{Token: in.Token}); err != nil {
				return nil, err
			}
			_, err := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: "release the hook?", Options: []sandflow.AskOption{{ID: "yes", Label: "Yes"}}}).Await(ctx)
			return "released", err

		case "webhook", "webhook-manual":
			opts := sandflow.WebhookOptions{RespondWith: &sandflow.Response{Status: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: "thanks"}}
			if in.Mode == "webhook-manual" {
				opts = sandflow.WebhookOptions{Manual: true}
			}
			wh, err := sandflow.CreateWebhook(ctx, opts)
			if err != nil {
				return nil, err
			}
			if err := sandflow.Progress(ctx, map[string]string{"url": wh.URL()}); err != nil {
				return nil, err
			}
			var got []map[string]any
			for range in.N {
				req, err := wh.Next(ctx).Await(ctx)
				if err != nil {
					return nil, err
				}
				if in.Mode == "webhook-manual" {
					echo := base64.StdEncoding.EncodeToString(append([]byte("got "), req.Bytes()...))
					if err := req.Respond(ctx, sandflow.Response{Status: 201, Body: echo, BodyEncoding: "base64"}); err != nil {
						return nil, err
					}
				}
				got = append(got, map[string]any{"method": req.Method, "bytes": base64.StdEncoding.EncodeToString(req.Bytes()), "index": req.Index, "type": req.Headers["Content-Type"]})
			}
			return got, nil

		case "race":
			ask := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: "Quick?", Options: []sandflow.AskOption{{ID: "yes", Label: "Yes"}}})
			won, err := sandflow.Race(ctx, ask, sandflow.Sleep(ctx, time.Duration(in.Ms)*time.Millisecond))
			if err != nil {
				return nil, err
			}
			if won == 1 {
				return "timed out", nil
			}
			a, _ := ask.Await(ctx)
			return "answered " + a.OptionID, nil

		case "agents":
			// Fan out to in.N agent turns at once, then collect each.
			var fs []*sandflow.Future[sandflow.AgentResult]
			var all []sandflow.Awaitable
			for i := range in.N {
				req := sandflow.AgentRequest{Message: fmt.Sprintf("%s #%d", in.Text, i)}
				if i%2 == 1 {
					req.OutputSchema = []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
				}
				f := sandflow.Agent(ctx, in.Token, req)
				fs, all = append(fs, f), append(all, f)
			}
			if err := sandflow.All(ctx, all...); err != nil {
				return nil, err
			}
			var got []sandflow.AgentResult
			for _, f := range fs {
				r, err := f.Await(ctx)
				if err != nil {
					return nil, err
				}
				got = append(got, r)
			}
			return got, nil

		case "ask-text":
			a, err := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: "Name?", Display: sandflow.DisplayText}).Await(ctx)
			return a, err

		case "ask-then":
			// What the answer says happens next: "exit" ends the guest
			// (proc_exit), anything else is the result.
			a, err := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: "Then?", Display: sandflow.DisplayText}).Await(ctx)
			if err != nil {
				return nil, err
			}
			if a.Text == "exit" {
				os.Exit(3)
			}
			return a.Text, nil

		case "two-asks":
			a1 := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: "first?", Options: []sandflow.AskOption{{ID: "a", Label: "A"}}})
			a2 := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: "second?", Options: []sandflow.AskOption{{ID: "b", Label: "B"}}})
			if err := sandflow.All(ctx, a1, a2); err != nil {
				return nil, err
			}
			x, _ := a1.Await(ctx)
			y, _ := a2.Await(ctx)
			return []string{x.OptionID, y.OptionID}, nil

		case "progress-null":
			sandflow.Progress(ctx, map[string]int{"step": 1})
			sandflow.Progress(ctx, map[string]int{"step": 2})
			return nil, nil

		case "metadata":
			return sandflow.GetMetadata(ctx), nil

		case "bad-ask":
			// A refused op, caught, then a good one: must replay.
			_, err := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: ""}).Await(ctx)
			if sandflow.ErrorType(err) != "BadRequestError" {
				return nil, fmt.Errorf("empty prompt: got %v", err)
			}
			if _, err := sandflow.Sleep(ctx, time.Millisecond).Await(ctx); err != nil {
				return nil, err
			}
			return "recovered: " + err.Error(), nil

		case "big-progress":
			err := sandflow.Progress(ctx, strings.Repeat("x", in.N))
			return map[string]string{"type": sandflow.ErrorType(err)}, nil

		case "big-result":
			return strings.Repeat("y", in.N), nil

		case "big-step-result":
			_, err := bigResult.Run(ctx, in.N)
			return map[string]string{"type": sandflow.ErrorType(err)}, nil

		case "many-progress":
			for i := range in.N {
				if err := sandflow.Progress(ctx, i); err != nil {
					return nil, err
				}
			}
			return in.N, nil

		case "print":
			for range in.N {
				fmt.Println(in.Text)
			}
			fmt.Fprintln(os.Stderr, "to stderr")
			if _, err := sandflow.Sleep(ctx, time.Duration(in.Ms)*time.Millisecond).Await(ctx); err != nil {
				return nil, err
			}
			fmt.Println("after sleep")
			return "printed", nil

		case "close-stdout":
			// The host refuses to close stdout (fd_close: ENOTSUP); Go
			// still marks its os.File closed, in the guest's memory.
			fmt.Println("before close")
			closeErr := ""
			if err := os.Stdout.Close(); err != nil {
				closeErr = err.Error()
			}
			_, err := fmt.Println("after close")
			return map[string]any{"closeErr": closeErr, "writeFailed": err != nil}, nil

		case "fetch":
			return fetchStep.Run(ctx, in.Text)
		case "fetch-retry":
			return fetchRetry.Run(ctx, in.Text)

		case "capability-not-listed":
			_, err := noCall.Run(ctx, 1)
			return map[string]string{"type": sandflow.ErrorType(err), "message": fmt.Sprint(err)}, nil

		case "abort-step":
			// A step in flight sees the abort; one called after it does
			// not count the abort before its call.
			first, err := untilAborted.Run(ctx, in.Token)
			if err != nil {
				return nil, err
			}
			_, after := sandflow.Signal(ctx).Await(ctx)
			again, err := untilAborted.Run(ctx, in.Token+"-after")
			if err != nil {
				return nil, err
			}
			return map[string]any{"inFlight": first, "signalled": after == nil, "after": again}, nil

		case "step-loop":
			_, err := stepLoop.Run(ctx, 1)
			return map[string]string{"type": sandflow.ErrorType(err)}, nil

		case "sandbox":
			// No files, no real sleep.
			_, readErr := os.ReadFile("/etc/hostname")
			writeErr := os.WriteFile("/tmp/sandflow-escape", []byte("x"), 0o644)
			before := time.Now()
			time.Sleep(time.Hour)
			slept := time.Since(before)
			return map[string]any{"read": readErr != nil, "write": writeErr != nil, "slept": slept.String()}, nil

		case "loop":
			for {
			}

		case "oom":
			var keep [][]byte
			for {
				keep = append(keep, make([]byte, 1<<20))
			}

		case "panic":
			var m map[string]int
			m["x"] = 1
			return nil, nil

		case "fail":
			return nil, errors.New("the body gave up")

		case "fail-typed":
			return nil, &sandflow.Error{Type: "QuotaError", Message: "over quota", Retryable: true}
		}
		return nil, sandflow.FatalError("unknown mode " + in.Mode)
	})
}

func main() {}
