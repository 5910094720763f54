package jsprogram_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

// parkModes are the ways a program resumes: parked in its worker (the
// default), by replay from the top answered from the log in the worker
// (parking off), and by replay of round trips (parking and the log off).
var parkModes = []struct {
	name string
	opts jsprogram.Options
}{{"parked", jsprogram.Options{}}, {"replayed", jsprogram.Options{MaxParked: -1}},
	{"replayed-round-trips", jsprogram.Options{MaxParked: -1, RoundTripReplay: true}}}

// A workflow program of agent calls one after another, each with a 1 MB
// message answered with a reply as large: the whole run, start to result,
// with agents that answer at once. Resumed by replay, the run's time grows
// with the square of the calls (so the replayed modes run only at 10
// calls); parked, with the calls.
func BenchmarkSequential1MBCalls(b *testing.B) {
	for _, calls := range []int{10, 100} {
		for _, m := range parkModes {
			if calls > 10 && m.name != "parked" {
				continue
			}
			b.Run(fmt.Sprintf("calls=%d/%s", calls, m.name), func(b *testing.B) {
				f := openFixture(b, m.opts, nil, jsprogram.WorkflowTool{MaxSubagents: calls})
				js := fmt.Sprintf(`const m = "x".repeat(1000000); let n = 0;
for (let i = 0; i < %d; i++) n += (await ctx.agent("echo", { message: m })).length;
return n;`, calls)
				want := fmt.Sprint(calls * len("echo: "+strings.Repeat("x", 1000000)))
				for b.Loop() {
					if ri := f.run(js); string(ri.Result) != want {
						b.Fatal(ri.Status, ri.Error, len(ri.Result))
					}
				}
				b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/run")
			})
		}
	}
}

// One resume of a program after k agent calls: the time from the k+1th
// call's reply to the run's end, which is the resume (the program parked
// in its worker, or replayed from the top through k calls) and the
// commit of its result. The k+1th call waits for the benchmark to let its
// agent answer, outside the timing.
func BenchmarkResumeAfterCalls(b *testing.B) {
	for _, k := range []int{1, 100} {
		for _, m := range parkModes {
			b.Run(fmt.Sprintf("k=%d/%s", k, m.name), func(b *testing.B) {
				started, release := make(chan struct{}), make(chan struct{})
				agents := host.AgentFunc{List: []host.AgentInfo{{Name: "echo"}, {Name: "last"}},
					Fn: func(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
						if t.Agent == "last" {
							started <- struct{}{}
							<-release
						}
						return abi.AgentResult{Status: abi.AgentCompleted, Reply: t.Message}, nil
					}}
				th := testhost.New(b, &testhost.Options{Host: host.Options{Agents: agents}, JS: m.opts})
				if _, err := jsprogram.RegisterWorkflowTool(context.Background(), th.H, jsprogram.WorkflowTool{MaxSubagents: k + 1}); err != nil {
					b.Fatal(err)
				}
				f := &fixture{Host: th, t: b}
				js := fmt.Sprintf(`let n = 0;
for (let i = 0; i < %d; i++) n += (await ctx.agent("echo", { message: "m" + i })).length;
return n + (await ctx.agent("last", { message: "end" })).length;`, k)
				for b.Loop() {
					b.StopTimer()
					id := f.start(js)
					done := make(chan host.RunInfo, 1)
					go func() {
						ri, _ := f.H.Drive(context.Background(), id)
						done <- ri
					}()
					<-started
					b.StartTimer()
					release <- struct{}{}
					ri := <-done
					if ri.Status != store.StatusCompleted {
						b.Fatal(ri.Status, ri.Error)
					}
				}
			})
		}
	}
}
