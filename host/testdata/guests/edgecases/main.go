// Command edgecases is a test tool for the host tests of the kernel's edges
// (edgecases_test.go and the tests that use it): each mode is a scenario
// that one test checks.
package main

import (
	"fmt"
	"math"
	mrand "math/rand"
	"time"

	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	Mode  string `json:"mode"`
	N     int    `json:"n"`
	Token string `json:"token"`
	Ms    int64  `json:"ms"`
	Text  string `json:"text"`
}

// count calls the host's "count" capability, which tallies calls by key.
var count = sandflow.DefineStep("count", func(sc *sandflow.StepContext, key string) (int, error) {
	return sandflow.Call[int](sc, "count", key)
})

// block calls the host's "block" capability, which waits for the test.
var block = sandflow.DefineStep("block", func(sc *sandflow.StepContext, key string) (int, error) {
	return sandflow.Call[int](sc, "block", key)
}, sandflow.MaxAttempts(1))

var echo = sandflow.DefineStep("echo", func(sc *sandflow.StepContext, v float64) (float64, error) { return v, nil })

// printer writes its input to stdout and returns its length.
var printer = sandflow.DefineStep("printer", func(sc *sandflow.StepContext, s string) (int, error) {
	fmt.Print(s)
	return len(s), nil
})

// farRetry fails its first attempt asking for a retry far in the future
// (260 years: a valid time.Duration, past the store's year 2262).
var farRetry = sandflow.DefineStep("farRetry", func(sc *sandflow.StepContext, key string) (int, error) {
	n, err := sandflow.Call[int](sc, "count", key)
	if err != nil {
		return 0, err
	}
	if sc.Attempt() == 1 {
		return 0, sandflow.RetryableError("come back much later", 260*365*24*time.Hour)
	}
	return n, nil
})

func init() {
	sandflow.Execute(func(ctx *sandflow.Context, in input) (any, error) {
		switch in.Mode {
		case "rand-after-progress":
			// Progress encodes the map (json iterates it, drawing from the
			// Go runtime's generator), live and on replay alike.
			if err := sandflow.Progress(ctx, map[string]int{"a": 1, "b": 2, "c": 3}); err != nil {
				return nil, err
			}
			x := mrand.Int63()
			if err := sandflow.Progress(ctx, x); err != nil {
				return nil, err
			}
			if _, err := sandflow.Sleep(ctx, time.Duration(in.Ms)*time.Millisecond).Await(ctx); err != nil {
				return nil, err
			}
			return x, nil

		case "nan-step":
			// A step input that cannot be encoded fails locally and is
			// caught; the body goes on with another step.
			_, nanErr := echo.Run(ctx, math.NaN())
			v, err := echo.Run(ctx, 7)
			if err != nil {
				return nil, err
			}
			return map[string]any{"nanErr": fmt.Sprint(nanErr), "v": v}, nil

		case "nan-progress":
			perr := sandflow.Progress(ctx, math.NaN())
			if _, err := sandflow.Sleep(ctx, time.Duration(in.Ms)*time.Millisecond).Await(ctx); err != nil {
				return nil, err
			}
			return map[string]any{"progressErr": perr != nil}, nil

		case "hook-redispose":
			// Dispose a hook, create another on the same token, and dispose
			// the first again (a cleanup that runs twice).
			h1, err := sandflow.CreateHook[map[string]any](ctx, sandflow.HookOptions{Token: in.Token})
			if err != nil {
				return nil, err
			}
			if err := h1.Dispose(ctx); err != nil {
				return nil, err
			}
			h2, err := sandflow.CreateHook[map[string]any](ctx, sandflow.HookOptions{Token: in.Token})
			if err != nil {
				return nil, err
			}
			if c := h2.Conflict(); c != "" {
				return map[string]any{"conflict": c}, nil
			}
			_ = h1.Dispose(ctx)
			p, err := h2.Next(ctx).Await(ctx)
			if err != nil {
				return nil, err
			}
			return map[string]any{"payload": p}, nil

		case "step-print":
			total := 0
			for range in.N {
				n, err := printer.Run(ctx, in.Text)
				if err != nil {
					return nil, err
				}
				total += n
			}
			return total, nil

		case "far-retry":
			return farRetry.Run(ctx, in.Token)

		case "metadata-url":
			// A deterministic body whose ops depend on what metadata says.
			if md := sandflow.GetMetadata(ctx); md.URL != "" {
				if err := sandflow.Progress(ctx, md.URL); err != nil {
					return nil, err
				}
			}
			if _, err := sandflow.Sleep(ctx, time.Duration(in.Ms)*time.Millisecond).Await(ctx); err != nil {
				return nil, err
			}
			return "ok", nil

		case "block-then-count":
			if _, err := block.Run(ctx, in.Token); err != nil {
				return nil, err
			}
			return count.Run(ctx, in.Token)

		case "spin":
			// n activations, each computing for a while (in.Ms million
			// rounds of xorshift) before a short durable sleep.
			var acc uint64 = 88172645463325252
			for i := range in.N {
				for range in.Ms * 1_000_000 {
					acc ^= acc << 13
					acc ^= acc >> 7
					acc ^= acc << 17
				}
				if i < in.N-1 {
					if _, err := sandflow.Sleep(ctx, time.Millisecond).Await(ctx); err != nil {
						return nil, err
					}
				}
			}
			return fmt.Sprint(acc), nil

		case "ask-text":
			a, err := sandflow.Ask(ctx, sandflow.AskRequest{Prompt: "Name?", Display: sandflow.DisplayText}).Await(ctx)
			return a, err
		}
		return nil, sandflow.FatalError("unknown mode " + in.Mode)
	})
}

func main() {}
