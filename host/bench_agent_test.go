package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/store"
)

// benchSeqAgentGuest is a Go guest whose body makes in.n agent turns one
// after another, each awaited before the next is sent. It is written to a
// temporary module and built from source there (no guest is committed for
// a benchmark alone).
const benchSeqAgentGuest = `package main

import (
	"fmt"

	sandflow "github.com/sandflow/sandflow/guest-sdk"
)

type input struct {
	N int ` + "`json:\"n\"`" + `
}

func init() {
	sandflow.Execute(func(ctx *sandflow.Context, in input) (any, error) {
		n := 0
		for i := range in.N {
			r, err := sandflow.Agent(ctx, "echo", sandflow.AgentRequest{Message: "m"}).Await(ctx)
			if err != nil {
				return nil, err
			}
			if r.Status != "completed" {
				return nil, fmt.Errorf("turn %d: %s", i, r.Status)
			}
			n += len(r.Reply)
		}
		return n, nil
	})
}

func main() {}
`

// benchSeqAgentWasm builds benchSeqAgentGuest once per test binary.
func benchSeqAgentWasm(b *testing.B) []byte {
	b.Helper()
	root := repo(b)
	dir, err := os.MkdirTemp("", "sandflow-bench-seqagent-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	gomod := fmt.Sprintf(`module sandflowbench/seqagent

go 1.26.8

require (
	github.com/sandflow/sandflow v0.0.0
	github.com/sandflow/sandflow/guest-sdk v0.0.0
)

replace (
	github.com/sandflow/sandflow => %s
	github.com/sandflow/sandflow/guest-sdk => %s
)
`, root, filepath.Join(root, "guest-sdk"))
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(benchSeqAgentGuest), 0o644); err != nil {
		b.Fatal(err)
	}
	p, err := guestbuild.Build(dir)
	if err != nil {
		b.Fatal(err)
	}
	wasm, err := os.ReadFile(p)
	if err != nil {
		b.Fatal(err)
	}
	return wasm
}

// benchInstantAgents answers every turn at once, and sums the time spent
// inside its function (the backend's own time).
type benchInstantAgents struct {
	turns   atomic.Int64
	inside  atomic.Int64 // ns
	backend host.AgentFunc
}

func newBenchInstantAgents() *benchInstantAgents {
	a := &benchInstantAgents{}
	a.backend = host.AgentFunc{
		List: []host.AgentInfo{{Name: "echo", Description: "answers at once"}},
		Fn: func(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
			start := time.Now()
			a.turns.Add(1)
			res := abi.AgentResult{Status: abi.AgentCompleted, Reply: "ok"}
			a.inside.Add(int64(time.Since(start)))
			return res, nil
		},
	}
	return a
}

// BenchmarkAgentRoundTripWASM is the host's overhead of one ctx.agent
// round trip from a Go WASM guest (wazero), with an agent backend that
// answers at once: each op of the n turns, awaited one after another, is
// recorded as sent (the activation's commit), the turn runs, its result is
// recorded (a second commit), and the guest resumes (on its parked
// instance, unless warm=off, when every resume replays from the top).
// One op is one run of n turns, started and driven to its end (the n=0
// case is the run's fixed cost). ns/roundtrip is the op's time over n;
// backend-ns/roundtrip is the time spent inside the agent function.
//
// store=sync is the embedded store as the host opens it by default
// (fsync on every commit); store=nosync shows how much of that is fsync.
func BenchmarkAgentRoundTripWASM(b *testing.B) {
	wasm := benchSeqAgentWasm(b)
	for _, c := range []struct {
		store string
		warm  bool
		n     int
	}{
		{"sync", true, 0},
		{"sync", true, 1},
		{"sync", true, 10},
		{"sync", true, 50},
		{"nosync", true, 0},
		{"nosync", true, 50},
		{"sync", false, 50},
	} {
		warm := "on"
		if !c.warm {
			warm = "off"
		}
		b.Run(fmt.Sprintf("store=%s/warm=%s/n=%d", c.store, warm, c.n), func(b *testing.B) {
			ctx := context.Background()
			var so *store.Options // nil: the default, as host.OpenDir opens it
			if c.store == "nosync" {
				so = &store.Options{NoSync: true}
			}
			st, err := store.Open(filepath.Join(b.TempDir(), "sandflow.db"), so)
			if err != nil {
				b.Fatal(err)
			}
			a := newBenchInstantAgents()
			opts := &host.Options{Engine: sharedEngine(b), Agents: a.backend}
			if !c.warm {
				opts.MaxWarm = -1
			}
			h, err := host.Open(ctx, st, opts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { h.Close(ctx); st.Close() })
			m := host.Manifest{Name: "seqagent", Description: "sequential agent turns", Entry: host.EntryExecute,
				InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":0}},"required":["n"]}`)}
			if _, err := h.AddPlugin(ctx, wasm, m); err != nil {
				b.Fatal(err)
			}
			in := json.RawMessage(fmt.Sprintf(`{"n":%d}`, c.n))
			want := fmt.Sprint(2 * c.n)
			run := func() {
				ri, err := h.Call(ctx, "seqagent", in, nil)
				if err != nil || ri.Status != store.StatusCompleted || string(ri.Result) != want {
					b.Fatalf("run: %v %s %s %+v", err, ri.Status, ri.Result, ri.Error)
				}
			}
			run() // compile, and warm the engine's caches
			turns0, inside0 := a.turns.Load(), a.inside.Load()
			b.ResetTimer()
			for b.Loop() {
				run()
			}
			b.StopTimer()
			if got := a.turns.Load() - turns0; got != int64(b.N*c.n) {
				b.Fatalf("%d turns, want %d", got, b.N*c.n)
			}
			if c.n > 0 {
				rt := float64(b.N * c.n)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/rt, "ns/roundtrip")
				b.ReportMetric(float64(a.inside.Load()-inside0)/rt, "backend-ns/roundtrip")
			}
		})
	}
}
