package jsprogram_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

func (f *fixture) start(js string) string {
	f.t.Helper()
	in, _ := json.Marshal(map[string]string{"js": js})
	ri, err := f.H.Start(context.Background(), jsprogram.WorkflowToolName, in, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return ri.ID
}

// Start to result of a program that returns at once: one activation on a
// warm worker, with the run's log written (store sync on).
func BenchmarkTrivialProgram(b *testing.B) {
	f := newFixture(b, jsprogram.Limits{}, nil)
	f.run(`return 1;`) // start a worker
	b.ResetTimer()
	for b.Loop() {
		ri := f.run(`return { ok: true };`)
		if ri.Status != store.StatusCompleted {
			b.Fatal(ri.Status)
		}
	}
}

// A 100-way fan-out with agents that answer at once: the time is the
// kernel's and the program's overhead, beyond the agents' own. Two
// activations: the start issues 100 calls, the resume replays them and
// fans in.
func BenchmarkFanOut100(b *testing.B) {
	f := newFixture(b, jsprogram.Limits{}, nil)
	js := `const ps = []; for (let i = 0; i < 100; i++) ps.push(ctx.agent("echo", { message: "m" + i }));
const rs = await Promise.all(ps); return rs.length;`
	f.run(js)
	b.ResetTimer()
	for b.Loop() {
		ri := f.run(js)
		if string(ri.Result) != "100" {
			b.Fatal(ri.Status, string(ri.Result))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/call")
}

// Replay of a program with 100 recorded calls, awaited one after another
// (101 activations), from its history in one worker activation.
func BenchmarkReplay100Calls(b *testing.B) {
	f := newFixture(b, jsprogram.Limits{}, nil)
	ri := f.run(`let n = 0; for (let i = 0; i < 100; i++) n += (await ctx.agent("echo", { message: "" + i })).length; return n;`)
	if ri.Status != store.StatusCompleted {
		b.Fatal(ri.Status, ri.Error)
	}
	benchReplay(b, f, ri.ID, 101)
}

// benchReplay measures a replay check of a run's history, which must
// replay its ops to the end.
func benchReplay(b *testing.B, f *fixture, runID string, ops int) {
	var buf bytes.Buffer
	if err := f.H.ExportHistory(context.Background(), runID, &buf); err != nil {
		b.Fatal(err)
	}
	raw := buf.Bytes()
	b.ResetTimer()
	for b.Loop() {
		hist, err := host.ReadHistory(bytes.NewReader(raw))
		if err != nil {
			b.Fatal(err)
		}
		rep, err := f.H.CheckReplay(context.Background(), hist, nil)
		if err != nil || rep.End != "completed" || rep.Ops != ops || rep.RecordedOps != ops {
			b.Fatal(err, rep)
		}
	}
}

// Memory per concurrent program: the resident memory of a worker that ran
// a program (what each program running at once costs), and the host's heap
// per run that waits on its children (which holds no worker).
func BenchmarkMemoryPerProgram(b *testing.B) {
	a := newAgents(echo)
	f := newFixture(b, jsprogram.Limits{}, a)
	f.run(`return 1;`)
	st := f.JS.Stats()
	if st.Workers == 0 {
		b.Fatal("no worker")
	}
	const waiting = 50
	var heap int64
	for i := range b.N {
		gate := make(chan struct{})
		a.mu.Lock()
		a.gate = gate
		a.mu.Unlock()
		base, _ := a.turns()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		done := make(chan struct{}, waiting)
		for j := range waiting {
			id := f.start(fmt.Sprintf(`return await ctx.agent("echo", { message: "%d.%d" });`, i, j))
			go func() {
				f.H.Drive(context.Background(), id)
				done <- struct{}{}
			}()
		}
		testhost.WaitUntil(b, "every run to wait", func() bool { n, _ := a.turns(); return n-base >= waiting })
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap += int64(after.HeapAlloc) - int64(before.HeapAlloc)
		close(gate)
		for range waiting {
			<-done
		}
	}
	b.ReportMetric(float64(st.RSSBytes)/float64(st.Workers), "worker-rss-bytes")
	b.ReportMetric(float64(heap)/float64(b.N*waiting), "host-heap-bytes/waiting-run")
}

const benchTool = `defineWorkflowTool({ description: "bench", inputSchema: { type: "object" },
  async execute({ steps }) {
    "use workflow";
    let n = 0;
    for (let i = 0; i < steps; i++) n += await add(i);
    return { n };
  } });
async function add(i) { "use step"; return i; }`

// Start to result of an authored tool that returns at once: the script is
// loaded and its entry point run in a warm worker, with the run's log
// written (store sync on).
func BenchmarkToolTrivial(b *testing.B) {
	f := newFixture(b, jsprogram.Limits{}, nil)
	f.AddJS("bench", benchTool)
	f.Call("bench", `{"steps":0}`)
	b.ResetTimer()
	for b.Loop() {
		if ri := f.Call("bench", `{"steps":0}`); ri.Status != store.StatusCompleted {
			b.Fatal(ri.Status, ri.Error)
		}
	}
}

// A tool with one step: two activations of the body and one step
// attempt, each in a worker, and their commits.
func BenchmarkToolOneStep(b *testing.B) {
	f := newFixture(b, jsprogram.Limits{}, nil)
	f.AddJS("bench", benchTool)
	f.Call("bench", `{"steps":1}`)
	b.ResetTimer()
	for b.Loop() {
		ri := f.Call("bench", `{"steps":1}`)
		if ri.Status != store.StatusCompleted {
			ri, _ = f.H.Drive(context.Background(), ri.ID)
		}
		if ri.Status != store.StatusCompleted {
			b.Fatal(ri.Status, ri.Error)
		}
	}
}

// Replay of an authored tool's run with 100 recorded steps (101
// activations) from its history, in one worker activation.
func BenchmarkToolReplay100Steps(b *testing.B) {
	f := newFixture(b, jsprogram.Limits{}, nil)
	f.AddJS("bench", benchTool)
	ri := f.Call("bench", `{"steps":100}`)
	for ri.Status == store.StatusWaiting || ri.Status == store.StatusRunning {
		ri, _ = f.H.Drive(context.Background(), ri.ID)
	}
	if string(ri.Result) != `{"n":4950}` {
		b.Fatal(ri.Status, ri.Error, string(ri.Result))
	}
	benchReplay(b, f, ri.ID, 101)
}
