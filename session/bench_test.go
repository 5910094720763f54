package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

// benchFixture is a host with JavaScript tools on the embedded store as
// host.OpenDir opens it (store.Open with nil options: fsync on every
// commit, the default), an agent backend that answers at once, and a
// session manager over it. The store is wrapped to count its writes and
// reads; the wrapper only counts.
type benchFixture struct {
	b      *testing.B
	eng    *jsprogram.Engine
	st     *benchCountingStore
	h      *host.Host
	m      *session.Manager
	agents *benchInstantAgents
}

func newBenchFixture(b *testing.B) *benchFixture {
	b.Helper()
	ctx := context.Background()
	a := newBenchInstantAgents()
	dir := filepath.Join(b.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	bolt, err := store.Open(filepath.Join(dir, "sandflow.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	st := &benchCountingStore{Store: bolt}
	eng, err := jsprogram.NewEngine(nil)
	if err != nil {
		bolt.Close()
		b.Fatal(err)
	}
	h, err := host.Open(ctx, st, &host.Options{CacheDir: filepath.Join(dir, "cache"),
		Engines: map[string]host.Engine{jsprogram.EngineName: eng}, Agents: a.backend})
	if err != nil {
		eng.Close(ctx)
		bolt.Close()
		b.Fatal(err)
	}
	f := &benchFixture{b: b, eng: eng, st: st, h: h, m: session.NewManager(h), agents: a}
	b.Cleanup(func() {
		f.m.Close()
		f.h.Close(ctx)
		f.eng.Close(ctx)
		bolt.Close()
	})
	return f
}

// benchCountingStore counts a store's commits (run creations, appends,
// session records) and the bytes of session records written, and its run
// and event reads.
type benchCountingStore struct {
	store.Store
	commits, sessionBytes, reads atomic.Int64
	// onPutSession, when set, is called on each session record write.
	onPutSession func()
}

func (c *benchCountingStore) CreateRun(ctx context.Context, run store.Run, b store.Batch) error {
	c.commits.Add(1)
	return c.Store.CreateRun(ctx, run, b)
}

func (c *benchCountingStore) Append(ctx context.Context, runID string, expectLastSeq uint64, b store.Batch) error {
	c.commits.Add(1)
	return c.Store.Append(ctx, runID, expectLastSeq, b)
}

func (c *benchCountingStore) PutSession(ctx context.Context, id string, data []byte) error {
	c.commits.Add(1)
	c.sessionBytes.Add(int64(len(data)))
	if c.onPutSession != nil {
		c.onPutSession()
	}
	return c.Store.PutSession(ctx, id, data)
}

func (c *benchCountingStore) Run(ctx context.Context, id string) (store.Run, error) {
	c.reads.Add(1)
	return c.Store.Run(ctx, id)
}

func (c *benchCountingStore) Events(ctx context.Context, runID string, after uint64, limit int) ([]store.Event, error) {
	c.reads.Add(1)
	return c.Store.Events(ctx, runID, after, limit)
}

func (f *benchFixture) add(name, src string) {
	f.b.Helper()
	if _, err := jsprogram.RegisterTool(context.Background(), f.h, name, []byte(src)); err != nil {
		f.b.Fatalf("registering %s: %v", name, err)
	}
}

func (f *benchFixture) session(id string) *session.Session {
	f.b.Helper()
	s, err := f.m.Open(context.Background(), id)
	if err != nil {
		f.b.Fatal(err)
	}
	return s
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

const benchSeqAgentTool = `defineWorkflowTool({ description: "sequential agent turns",
  inputSchema: { type: "object", properties: { n: { type: "integer", minimum: 0 } }, required: ["n"] },
  async execute({ n }, ctx) {
    "use workflow";
    let total = 0;
    for (let i = 0; i < n; i++) {
      const response = await ctx.agent("echo").send("m");
      const { status, reply } = await response.result();
      if (status !== "completed") throw new Error("turn " + i + ": " + status);
      total += reply.length;
    }
    return total;
  } });`

// BenchmarkAgentRoundTripJS is the host's overhead of one ctx.agent round
// trip from an authored JavaScript tool, with an agent backend that
// answers at once: the body sends n turns one after another, awaiting
// each result before the next send. One op is one run of n turns, started
// and driven to its end (n=0 is the run's fixed cost). Each resume runs
// the body again from the top in a worker process against the run's log,
// so turn k replays the k-1 before it. ns/roundtrip is the op's time over
// n; backend-ns/roundtrip the time spent inside the agent function.
func BenchmarkAgentRoundTripJS(b *testing.B) {
	for _, n := range []int{0, 1, 10, 50} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			f := newBenchFixture(b)
			f.add("seqagent", benchSeqAgentTool)
			ctx := context.Background()
			in := json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))
			want := fmt.Sprint(2 * n)
			run := func() {
				ri, err := f.h.Call(ctx, "seqagent", in, nil)
				if err != nil || ri.Status != store.StatusCompleted || string(ri.Result) != want {
					b.Fatalf("run: %v %s %s %+v", err, ri.Status, ri.Result, ri.Error)
				}
			}
			run() // start the workers
			turns0, inside0 := f.agents.turns.Load(), f.agents.inside.Load()
			b.ResetTimer()
			for b.Loop() {
				run()
			}
			b.StopTimer()
			if got := f.agents.turns.Load() - turns0; got != int64(b.N*n) {
				b.Fatalf("%d turns, want %d", got, b.N*n)
			}
			if n > 0 {
				rt := float64(b.N * n)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/rt, "ns/roundtrip")
				b.ReportMetric(float64(f.agents.inside.Load()-inside0)/rt, "backend-ns/roundtrip")
			}
		})
	}
}

const benchTaskTool = `defineWorkflowTool({ description: "returns its input", inputSchema: { type: "object" },
  async task(input) { "use workflow"; return input; } });`

// BenchmarkTaskResultThroughput is how fast a session delivers task
// results: one op starts m calls of a trivial task tool in a new session
// (no more than session.MaxWorkingTasks working at once: a call refused
// with too_many_tasks waits for results first) and takes their results
// with HoldTurn until all m have arrived, each once. The time includes the
// receipts. ns/result and results/s are over all results.
func BenchmarkTaskResultThroughput(b *testing.B) {
	for _, m := range []int{session.MaxWorkingTasks, 8 * session.MaxWorkingTasks} {
		b.Run(fmt.Sprintf("m=%d", m), func(b *testing.B) {
			f := newBenchFixture(b)
			f.add("echo-task", benchTaskTool)
			ctx := context.Background()
			seq := 0
			batch := func() {
				seq++
				s := f.session(fmt.Sprintf("bench-%d", seq))
				started, got := 0, 0
				for got < m {
					for started < m {
						_, err := s.Call(ctx, "echo-task", json.RawMessage(fmt.Sprintf(`{"i":%d}`, started)), nil)
						if errors.Is(err, session.ErrTooManyTasks) {
							break
						}
						if err != nil {
							b.Fatal(err)
						}
						started++
					}
					ended, res, err := benchHoldTurn(b, s)
					if err != nil {
						b.Fatal(err)
					}
					if ended && started == m && got < m {
						b.Fatalf("the turn ended with %d of %d results", got, m)
					}
					got += strings.Count(res, `status="completed">{"i":`)
					if n := strings.Count(res, "<task_result "); n != strings.Count(res, `status="completed">{"i":`) {
						b.Fatalf("a result that is not a completed echo: %s", res)
					}
				}
				if got != m {
					b.Fatalf("%d results, want %d", got, m)
				}
			}
			batch() // start the workers
			commits0, bytes0 := f.st.commits.Load(), f.st.sessionBytes.Load()
			b.ResetTimer()
			for b.Loop() {
				batch()
			}
			b.StopTimer()
			results := float64(b.N * m)
			per := float64(b.Elapsed().Nanoseconds()) / results
			b.ReportMetric(per, "ns/result")
			b.ReportMetric(1e9/per, "results/s")
			b.ReportMetric(float64(f.st.commits.Load()-commits0)/results, "commits/result")
			b.ReportMetric(float64(f.st.sessionBytes.Load()-bytes0)/results, "session-bytes/result")
		})
	}
}

// BenchmarkParallelTaskCalls is a model's parallel tool calls: one op
// makes session.MaxWorkingTasks calls of a trivial task tool at once in a
// new session and waits for every receipt (not the results). Each receipt
// follows the durable write of the session's record with its task;
// session-writes/call is how many record writes the calls took between
// them, ns/call the time per receipt.
func BenchmarkParallelTaskCalls(b *testing.B) {
	f := newBenchFixture(b)
	f.add("echo-task", benchTaskTool)
	ctx := context.Background()
	var writes atomic.Int64
	f.st.onPutSession = func() { writes.Add(1) }
	seq := 0
	batch := func() {
		seq++
		s := f.session(fmt.Sprintf("bench-%d", seq))
		errs := make(chan error, session.MaxWorkingTasks)
		for i := range session.MaxWorkingTasks {
			go func() {
				_, err := s.Call(ctx, "echo-task", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), nil)
				errs <- err
			}()
		}
		for range session.MaxWorkingTasks {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
	batch() // start the workers
	writes.Store(0)
	b.ResetTimer()
	for b.Loop() {
		batch()
	}
	b.StopTimer()
	calls := float64(b.N * session.MaxWorkingTasks)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/calls, "ns/call")
	b.ReportMetric(float64(writes.Load())/calls, "session-writes/call")
}

// BenchmarkIdleServeTaskMemory is what an idle resumable task costs the
// host: one op starts k release-plan tasks (examples/js/release-plan.js)
// in a new session, each of which replies to its first call and goes
// idle, and the results are taken. Measured around the op, after a GC:
// the host's heap growth per idle task (B/idle-task, HeapAlloc) and the
// goroutines left per idle task (goroutines/idle-task). The JavaScript
// workers after it: busy-workers is how many are not idle in the pool
// (idle tasks should hold none), workers how many are alive, and
// worker-rss-bytes the resident memory of one (what a task that held a
// worker would cost).
func BenchmarkIdleServeTaskMemory(b *testing.B) {
	const k = 64
	f := newBenchFixture(b)
	src, err := os.ReadFile("../examples/js/release-plan.js")
	if err != nil {
		b.Fatal(err)
	}
	f.add("release-plan", string(src))
	ctx := context.Background()
	seq := 0
	// batch starts k tasks in a new session and returns when all are idle
	// and their replies were delivered.
	batch := func() *session.Session {
		seq++
		s := f.session(fmt.Sprintf("idle-%d", seq))
		started, replies := 0, 0
		for started < k || replies < k {
			for started < k {
				_, err := s.Call(ctx, "release-plan", json.RawMessage(fmt.Sprintf(`{"request":"draft %d"}`, started)), nil)
				if errors.Is(err, session.ErrTooManyTasks) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				started++
			}
			_, res, err := benchHoldTurn(b, s)
			if err != nil {
				b.Fatal(err)
			}
			replies += strings.Count(res, `status="completed">{"requests":`)
		}
		benchWait(b, "every task to go idle", func() bool {
			for _, t := range s.Tasks(ctx) {
				if t.Status != session.Idle {
					return false
				}
			}
			return true
		})
		return s
	}
	batch() // start the workers
	var heap, goroutines, resultsNs, resultsReads float64
	var st jsprogram.Stats
	commits0 := f.st.commits.Load()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		g0 := benchSettledGoroutines()
		h0 := benchSettledHeap()
		b.StartTimer()
		s := batch()
		b.StopTimer()
		g1 := benchSettledGoroutines()
		h1 := benchSettledHeap()
		b.StartTimer()
		heap += float64(int64(h1) - int64(h0))
		goroutines += float64(g1 - g0)
		st = f.eng.Stats()
		if busy := st.Workers - st.Idle; busy != 0 {
			b.Errorf("%d busy workers with every task idle", busy)
		}
		if n := len(s.Tasks(ctx)); n != k {
			b.Fatalf("%d tasks", n)
		}
		// What one more model turn costs a session of k idle tasks: a
		// Results call with nothing to deliver.
		b.StopTimer()
		reads0, start := f.st.reads.Load(), time.Now()
		if res, err := s.Results(ctx); err != nil || res != "" {
			b.Fatalf("results %q %v", res, err)
		}
		resultsNs += float64(time.Since(start).Nanoseconds())
		resultsReads += float64(f.st.reads.Load() - reads0)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(f.st.commits.Load()-commits0)/float64(b.N*k), "commits/idle-task")
	b.ReportMetric(resultsNs/float64(b.N), "ns/Results-call")
	b.ReportMetric(resultsReads/float64(b.N), "store-reads/Results-call")
	b.ReportMetric(heap/float64(b.N*k), "B/idle-task")
	b.ReportMetric(goroutines/float64(b.N*k), "goroutines/idle-task")
	b.ReportMetric(float64(st.Workers-st.Idle), "busy-workers")
	b.ReportMetric(float64(st.Workers), "workers")
	if st.Workers > 0 {
		b.ReportMetric(float64(st.RSSBytes)/float64(st.Workers), "worker-rss-bytes")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k), "ns/idle-task")
}

// benchSettledHeap is HeapAlloc after a GC.
func benchSettledHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// benchSettledGoroutines is the goroutine count once it has not changed
// for 100 ms (goroutines that drove a run end just after it commits).
func benchSettledGoroutines() int {
	n, since := runtime.NumGoroutine(), time.Now()
	deadline := time.Now().Add(3 * time.Second)
	for time.Since(since) < 100*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

// benchHoldTurn is HoldTurn with a deadline, so a result that never
// comes fails the benchmark instead of hanging it.
func benchHoldTurn(b *testing.B, s *session.Session) (bool, string, error) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ended, res, err := s.HoldTurn(ctx)
	if err != nil && ctx.Err() != nil {
		var st []string
		for _, t := range s.Tasks(context.Background()) {
			st = append(st, t.ID+":"+t.Status)
		}
		b.Fatalf("HoldTurn: no result within 60 s (%v); tasks: %s", err, strings.Join(st, " "))
	}
	return ended, res, err
}

func benchWait(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
