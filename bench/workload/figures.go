package workload

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

// openTB opens a sandbox in a directory of b's that b closes.
func openTB(b testing.TB, c hostConfig) *sandbox {
	b.Helper()
	if c.path == "" {
		c.path = filepath.Join(b.TempDir(), "db")
	}
	s, err := open(c)
	need(b, err)
	b.Cleanup(s.close)
	return s
}

func registerTB(b testing.TB, s *sandbox, rt Runtime) int {
	b.Helper()
	v, err := s.register(rt)
	need(b, err)
	return v
}

func perItem(b *testing.B, n int, unit string) {
	if n > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), unit)
	}
}

// Replay is figure 1: the time to replay the history of a completed run of
// n steps, from its decoded log to the guest's completion, with nothing
// recorded (host.ReplayChecker, made once for all the replays). The history is recorded once by the Go
// guest on wazero and replayed by the runtime's own module, which makes
// the same ops; PlainGo decodes the recorded results and feeds them to
// Plain. Besides ns/op it reports ns/step.
func Replay(rt Runtime, n int) func(*testing.B) { return replay(rt, Steps, n, false) }

// ReplayPreInit is Replay from a pre-initialised instance: the history is
// recorded on a host with host.Options.PreInit (its run records
// sharedInit), and the replaying host keeps instances ready, so each
// replay takes one from the pool (refilled between replays, outside the
// timer) and the time is the replay of the log alone.
func ReplayPreInit(rt Runtime, n int) func(*testing.B) { return replay(rt, Steps, n, true) }

// ReplayWorkload is Replay for any workload's history: askstep's holds n
// answered questions and n steps (ns/round), fanout's n agent turns
// (ns/turn).
func ReplayWorkload(rt Runtime, w Workload, n int) func(*testing.B) { return replay(rt, w, n, false) }

func replay(rt Runtime, w Workload, n int, preInit bool) func(*testing.B) {
	unit := map[Workload]string{Fanout: "ns/turn", AskStep: "ns/round"}[w]
	if unit == "" {
		unit = "ns/step"
	}
	return func(b *testing.B) {
		in := Input{Mode: w, N: n}
		rec, err := recordOn(in, preInit)
		need(b, err)
		if rt == PlainGo {
			for b.Loop() {
				in, ops, err := ReplayOps(rec.hist)
				if err != nil {
					b.Fatal(err)
				}
				if v, err := Plain(in, ops); err != nil || v != in.want() {
					b.Fatal(v, err)
				}
			}
			perItem(b, n, unit)
			return
		}
		pool := 0
		if preInit {
			pool = preInitPool
		}
		s := openTB(b, hostConfig{runtimes: []Runtime{rt}, preInit: pool})
		mod, err := rt.module()
		need(b, err)
		// One checker for all the replays: the module is compiled, and
		// found again, once, as a replayer registers its workflow once.
		chk, err := s.h.NewReplayChecker(context.Background(), mod, rt.engine())
		need(b, err)
		replay := func() {
			if preInit {
				b.StopTimer()
				need(b, s.h.WaitPreInit(context.Background()))
				b.StartTimer()
			}
			rep, err := chk.Check(context.Background(), rec.hist)
			if err != nil || rep.End != "completed" || rep.Ops != rep.RecordedOps {
				b.Fatalf("replay of %s n=%d on %s: %+v %v", w, n, rt, rep, err)
			}
		}
		replay() // the first replay on this host
		for b.Loop() {
			replay()
		}
		perItem(b, n, unit)
	}
}

// ColdResume is figure 2 without parking: a run waits on a question after
// n steps; the time is from answering it (host.AnswerAsk, fsync on) to the
// run's next wait, on a host that parks no instance (MaxWarm -1) and keeps
// no idle run's state (IdleRuns -1), so the run's log is read and the
// guest is instantiated and replays its history. The runs ask questions
// one after another after their steps, and each run is answered at most
// max(1, n/100) times, so a replayed history holds fewer than n/100
// questions besides its n steps. The runs are made on the Go guest on
// wazero and moved to the runtime's plugin with host.Upgrade (see
// prepare): a live JavaScript run replays at every activation, so making a
// 10,000-step one would take O(n²).
func ColdResume(rt Runtime, n int) func(*testing.B) {
	return resume(rt, n, resumeMode{cold: true, sync: true, reload: true})
}

// ColdResumePreInit is ColdResume on a host that keeps instances
// initialised ahead of demand (host.Options.PreInit), with runs created
// there: the resume replays on a pre-initialised instance. The pool is
// refilled between timed resumes, outside the timer.
func ColdResumePreInit(rt Runtime, n int) func(*testing.B) {
	return resume(rt, n, resumeMode{cold: true, sync: true, preInit: true, reload: true})
}

// SnapshotResume is ColdResume with snapshots (host.Options.Snapshots) and
// pre-initialised instances: each suspension that parks nothing stores a
// snapshot in its commit, and the resume restores it into a pooled
// instance instead of replaying. Each run's first answer, which takes the
// first snapshot on the runtime's plugin, is not timed.
func SnapshotResume(rt Runtime, n int) func(*testing.B) {
	return resume(rt, n, resumeMode{cold: true, sync: true, preInit: true, snapshots: true})
}

// SnapshotResumeReload is SnapshotResume on a host that keeps no idle
// run's state (host.Options.IdleRuns -1), as after a restart: the run's
// state is loaded from its state image and the events after it, then the
// snapshot restored instead of replaying.
func SnapshotResumeReload(rt Runtime, n int) func(*testing.B) {
	return resume(rt, n, resumeMode{cold: true, sync: true, preInit: true, snapshots: true, reload: true})
}

// SnapshotResumeNoSync is SnapshotResume on a store that does not fsync.
func SnapshotResumeNoSync(rt Runtime, n int) func(*testing.B) {
	return resume(rt, n, resumeMode{cold: true, preInit: true, snapshots: true})
}

// WarmResume is figure 2 with parking: as ColdResume, on a host that parks
// the suspended instance and continues it when the answer comes. Each
// run's first answer, which instantiates and parks it, is not timed.
// jsprogram parks no worker: its warm resume replays too.
func WarmResume(rt Runtime, n int) func(*testing.B) { return resume(rt, n, resumeMode{sync: true}) }

// WarmResumeNoSync is WarmResume on a store that does not fsync: what the
// host and the engine cost, without the disk's two synced commits (the
// answer's and the activation's).
func WarmResumeNoSync(rt Runtime, n int) func(*testing.B) { return resume(rt, n, resumeMode{}) }

// asksPerRun is how many questions the resume figures' runs ask, one
// after another, after their steps.
const asksPerRun = 1000

// resumeMode is how a resume figure's host runs: cold parks nothing; sync
// fsyncs; preInit keeps instances ready; snapshots keeps snapshots; reload
// keeps no idle run's state, so each resume reads the run's log.
type resumeMode struct{ cold, sync, preInit, snapshots, reload bool }

func resume(rt Runtime, n int, m resumeMode) func(*testing.B) {
	cold, sync, preInit := m.cold, m.sync, m.preInit
	return func(b *testing.B) {
		if rt == PlainGo {
			if cold {
				plainColdResume(b, n)
			} else {
				plainWarmResume(b, n)
			}
			return
		}
		in := Input{Mode: StepsAsk, N: n, Asks: asksPerRun}
		// How many answers of each run are timed: warm, all but the
		// first, which instantiates and parks the run.
		timed := asksPerRun - 1
		if cold {
			timed = max(1, n/100)
		}
		// Answered before the timer starts: warm, every run once, to park
		// it; with snapshots, to take its first on the runtime's plugin.
		untimed := !cold || m.snapshots
		// One more run is answered before the timer starts: it loads the
		// plugin on the timed host.
		runs := (b.N+timed-1)/timed + 1
		path := filepath.Join(b.TempDir(), "db")
		ids, err := prepare(path, rt, in, runs, preInit)
		need(b, err)
		maxWarm := -1
		if !cold {
			maxWarm = runs + 1
		}
		pool := 0
		if preInit {
			pool = preInitPool
		}
		s := openTB(b, hostConfig{path: path, sync: sync, maxWarm: maxWarm, runtimes: []Runtime{rt}, preInit: pool, snapshots: m.snapshots, reload: m.reload})
		ctx := context.Background()
		asks := make([]string, runs)
		answered := make([]int, runs)
		for r, id := range ids {
			ri, err := s.h.Run(ctx, id)
			if err == nil {
				asks[r], err = askOf(ri)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		reply := func(r int) {
			ri, err := s.h.AnswerAsk(ctx, asks[r], answer)
			if err != nil {
				b.Fatal(err)
			}
			if answered[r]++; answered[r] == in.Asks {
				if ri.Status != store.StatusCompleted || checkResult(in, ri.Result) != nil {
					b.Fatalf("run %s after its last answer: %s %s %v", ri.ID, ri.Status, ri.Result, ri.Error)
				}
				return
			}
			if asks[r], err = askOf(ri); err != nil {
				b.Fatal(err)
			}
		}
		reply(0)
		if untimed {
			for r := 1; r < runs; r++ {
				reply(r)
			}
		}
		r, used := 1, 0
		b.ResetTimer()
		for range b.N {
			if used == timed {
				r, used = r+1, 0
			}
			if preInit {
				// Between timed resumes, as a host between requests: the
				// pool refilled, the last snapshot stored.
				b.StopTimer()
				need(b, s.h.WaitPreInit(ctx))
				s.h.WaitSnapshots()
				b.StartTimer()
			}
			reply(r)
			used++
		}
		b.StopTimer()
		if st := s.h.SnapshotStats(); m.snapshots && (st.Restored < int64(b.N) || st.Refused > 0) {
			b.Fatalf("%d timed resumes, but snapshots %+v: some replayed", b.N, st)
		}
	}
}

// prepare copies runs of in that wait on their first question into a new
// store at path, on the runtime's plugin, and returns their ids. The runs
// come from a template store made once per process and input, where they
// run live on the Go guest on wazero with fsync off; on the copy, the
// other runtimes' runs are moved to their plugin with host.Upgrade (which
// replays each run's history there first). The store is closed after.
func prepare(path string, rt Runtime, in Input, runs int, preInit bool) ([]string, error) {
	t, err := templateRuns(in, runs, preInit)
	if err != nil {
		return nil, err
	}
	if err := copyFile(t.path, path); err != nil {
		return nil, err
	}
	ids := t.ids[:runs]
	if rt == GoWazero {
		return ids, nil
	}
	s, err := open(hostConfig{path: path, maxWarm: -1, runtimes: []Runtime{rt}})
	if err != nil {
		return nil, err
	}
	defer s.close()
	v, err := s.register(rt)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		_, rep, err := s.h.Upgrade(context.Background(), id, v)
		if err == nil && rep.Ops != rep.RecordedOps {
			err = fmt.Errorf("%+v", rep)
		}
		if err != nil {
			return nil, fmt.Errorf("moving run %s to the %s plugin: %w", id, rt, err)
		}
	}
	return ids, nil
}

// template is a store of runs that wait on their first question.
type template struct {
	path string
	ids  []string
}

var (
	templateMu sync.Mutex
	templates  = map[templateKey]*template{}
)

// templateKey names a template: its runs' input, and whether they were
// created on a host with pre-initialised instances (which runs record).
type templateKey struct {
	in      Input
	preInit bool
}

// preInitPool is the pool size of the figures with pre-initialised
// instances.
const preInitPool = 2

// templateRuns returns the template store of in with at least runs runs.
func templateRuns(in Input, runs int, preInit bool) (*template, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	key := templateKey{in, preInit}
	t := templates[key]
	if t != nil && len(t.ids) >= runs {
		return t, nil
	}
	if t == nil {
		dir, err := scratch("template")
		if err != nil {
			return nil, err
		}
		t = &template{path: filepath.Join(dir, "db")}
	}
	c := hostConfig{path: t.path, maxWarm: 1}
	if preInit {
		c.preInit = preInitPool
	}
	s, err := open(c)
	if err != nil {
		return nil, err
	}
	defer s.close()
	v := 1
	if len(t.ids) == 0 {
		if v, err = s.register(GoWazero); err != nil {
			return nil, err
		}
	}
	ctx := context.Background()
	for len(t.ids) < runs {
		ri, err := s.h.Call(ctx, ToolName, in.json(), &host.CallOptions{Version: v})
		if err == nil {
			_, err = askOf(ri)
		}
		if err != nil {
			return nil, fmt.Errorf("preparing a run: %w", err)
		}
		t.ids = append(t.ids, ri.ID)
	}
	templates[key] = t
	return t, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// plainColdResume is the floor of the cold resume: decode the log of a
// run answered at its first question after n steps, feed it to Plain, and
// run on to the next question.
func plainColdResume(b *testing.B, n int) {
	rec, err := record(Input{Mode: StepsAsk, N: n, Asks: 2})
	need(b, err)
	// The log as it stands when the first question has been answered.
	hist := *rec.hist
	for i, e := range hist.Events {
		if e.Kind == host.EvAskSettled {
			hist.Events = hist.Events[:i+1]
			break
		}
	}
	for b.Loop() {
		in, ops, err := ReplayOps(&hist)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Plain(in, ops); !errors.Is(err, errNoRecord) {
			b.Fatalf("the plain replay did not stop at the second question: %v", err)
		}
	}
}

// plainWarmResume is the floor of the warm resume: a goroutine that waits
// on a channel at each question.
func plainWarmResume(b *testing.B, n int) {
	asked, answers := make(chan struct{}), make(chan abi.AskAnswer)
	done := make(chan error, 1)
	ops := LiveOps()
	ops.Ask = func() (abi.AskAnswer, error) {
		asked <- struct{}{}
		return <-answers, nil
	}
	go func() {
		_, err := Plain(Input{Mode: StepsAsk, N: n, Asks: b.N + 1}, ops)
		done <- err
	}()
	<-asked
	a := abi.AskAnswer{Status: abi.AnswerAnswered, OptionID: answer.OptionID}
	b.ResetTimer()
	for range b.N {
		answers <- a
		<-asked
	}
	b.StopTimer()
	answers <- a
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// The benchmark guest's constant (bench/testdata/guests/benchguest) and
// the C guest's: how many ops one bench_ops call issues.
const opsPerCall = 10_000

// OpRoundTrip is figure 3: one op from guest code to the host's op handler
// and back (ns/roundtrip), timed over calls of an export that issues
// 10,000 metadata ops. The Go runtimes run bench/testdata/guests/benchguest
// (the ABI without the SDK), the C runtimes the C guest; PlainGo calls the
// handler through its interface. JavaScript has no such export: skipped.
func OpRoundTrip(rt Runtime) func(*testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		ops := floorOps
		var call func() (int32, error)
		switch rt {
		case JS:
			b.Skip("a JavaScript tool has no export to loop over ops")
		case PlainGo:
			call = func() (int32, error) {
				var sum int32
				for range opsPerCall {
					body, err := ops.Op(ctx, abi.OpMetadata, nil, nil)
					if err != nil {
						return 0, err
					}
					sum += int32(len(body))
				}
				return sum, nil
			}
		default:
			var mod []byte
			var err error
			if rt == GoWazero || rt == GoWasmtime {
				mod, err = guest("bench/testdata/guests/benchguest", guestbuild.Build)
			} else {
				mod, err = CGuest()
			}
			need(b, err)
			e, err := Engine(rt.engine())
			need(b, err)
			cm, err := e.Compile(ctx, mod)
			if err != nil {
				b.Fatal(err)
			}
			defer cm.Close(ctx)
			inst, err := cm.Instantiate(ctx, instanceConfig(ops))
			if err != nil {
				b.Fatal(err)
			}
			defer inst.Close(ctx)
			call = func() (int32, error) { return inst.Call(ctx, "bench_ops") }
		}
		for b.Loop() {
			if n, err := call(); err != nil || n != 8*opsPerCall {
				b.Fatal(n, err)
			}
		}
		perItem(b, opsPerCall, "ns/roundtrip")
	}
}

type guestClock struct{ now int64 }

func (c *guestClock) Now() int64     { return c.now }
func (c *guestClock) Sleep(ns int64) { c.now += max(ns, 1) }

// okOps answers every op with the same ok body.
type okOps struct{ body []byte }

// floorOps is the op handler of OpRoundTrip, in a variable so that the
// floor's calls go through the interface as the engines' do.
var floorOps host.OpHandler = &okOps{body: make([]byte, 8)}

func (o *okOps) Op(context.Context, abi.OpKind, []byte, []byte) ([]byte, error) { return o.body, nil }

// instanceConfig is what a bare instance (no host) runs with.
func instanceConfig(ops host.OpHandler) host.InstanceConfig {
	return host.InstanceConfig{
		Clock: &guestClock{now: time.Now().UnixNano()}, Random: rand.Reader, Stdout: io.Discard, Stderr: io.Discard,
		MemoryLimit: host.DefaultLimits.MemoryBytes, CPULimit: time.Minute, Ops: ops,
	}
}

// StepCommits is figure 4: durable steps per second (steps/s). Each
// iteration is a live run of n steps on a store with its real sync policy
// (store.Open with default options: fsync on every commit), the instance
// parked between steps. PlainGo's floor commits each step's result to the
// same store, one fsynced transaction per step, with no sandbox or kernel.
// A live JavaScript run replays at every activation, so its steps/s falls
// as n grows.
func StepCommits(rt Runtime, n int) func(*testing.B) {
	return func(b *testing.B) {
		if rt == PlainGo {
			plainCommits(b, n)
		} else {
			s := openTB(b, hostConfig{sync: true, runtimes: []Runtime{rt}})
			v := registerTB(b, s, rt)
			if _, err := s.call(Input{Mode: Steps, N: 1}, v); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := s.call(Input{Mode: Steps, N: n}, v); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	}
}

// StepCommitsParallel is StepCommits for a host with many runs moving at
// once: parallelRuns runs of n steps each, started together, fsync on;
// steps/s counts the steps of all of them. Their commits share syncs (the
// store's group commit).
func StepCommitsParallel(rt Runtime, n int) func(*testing.B) {
	return func(b *testing.B) {
		s := openTB(b, hostConfig{sync: true, runtimes: []Runtime{rt}})
		v := registerTB(b, s, rt)
		if _, err := s.call(Input{Mode: Steps, N: 1}, v); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			errs := make(chan error, parallelRuns)
			var wg sync.WaitGroup
			for range parallelRuns {
				wg.Go(func() {
					_, err := s.call(Input{Mode: Steps, N: n}, v)
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				need(b, err)
			}
		}
		b.ReportMetric(float64(parallelRuns*n)*float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	}
}

func plainCommits(b *testing.B, n int) {
	st, err := store.Open(filepath.Join(b.TempDir(), "db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	runs := 0
	for b.Loop() {
		runs++
		now := time.Now().UTC()
		rec := store.Run{ID: "run_floor" + strconv.Itoa(runs), Tool: ToolName, Plugin: ToolName, Version: 1,
			Status: store.StatusRunning, CreatedAt: now, UpdatedAt: now, LastSeq: 1}
		created := store.Event{Seq: 1, Time: now, Kind: host.EvRunCreated, Data: Input{Mode: Steps, N: n}.json()}
		if err := st.CreateRun(ctx, rec, store.Batch{Events: []store.Event{created}}); err != nil {
			b.Fatal(err)
		}
		ops := LiveOps()
		ops.Step = func(v int) (int, error) {
			v++
			seq := rec.LastSeq + 1
			data, _ := json.Marshal(map[string]any{"op": seq - 1, "result": v})
			r := rec
			r.LastSeq, r.UpdatedAt = seq, time.Now().UTC()
			err := st.Append(ctx, rec.ID, rec.LastSeq, store.Batch{Events: []store.Event{{Seq: seq, Time: r.UpdatedAt, Kind: host.EvStepCompleted, Data: data}}, Run: &r})
			rec = r
			return v, err
		}
		if v, err := Plain(Input{Mode: Steps, N: n}, ops); err != nil || v != n {
			b.Fatal(v, err)
		}
	}
}

// SuspendedMemory is figure 5 for runs that hold nothing while they wait:
// runs of the runtime each wait on a question (their first op) on a host
// that parks no instance (MaxWarm -1). It reports, per waiting run, the
// growth of the host's Go heap after a GC plus a starting stack for each
// new goroutine (B/run), of its goroutines (goroutines/run), and of its
// resident memory (rss-B/run, Linux only: it also sees memory outside the
// Go heap, such as wasmtime's, but also memory the Go runtime has not
// returned, so small values are noise). PlainGo's runs are goroutines
// waiting on a channel.
func SuspendedMemory(rt Runtime, runs int) func(*testing.B) { return memory(rt, runs, false) }

// ParkedMemory is SuspendedMemory with every waiting run's instance
// parked (MaxWarm above runs). jsprogram parks no worker. On Linux a
// wazero guest's linear memory is mapped outside the Go heap (only its
// touched pages are resident), so for parked runs rss-B/run is the figure
// that counts it; B/run does not.
func ParkedMemory(rt Runtime, runs int) func(*testing.B) { return memory(rt, runs, true) }

type memSample struct {
	heap, goroutines, rss float64
}

func sampleMemory() memSample {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memSample{float64(m.HeapAlloc), float64(runtime.NumGoroutine()), float64(rssBytes())}
}

// stackBytes is the size a goroutine's stack starts at. Stacks are counted
// from it, not from MemStats.StackInuse, which keeps the stacks of exited
// goroutines for reuse and so depends on what ran before.
func stackBytes() float64 {
	s := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		return float64(s[0].Value.Uint64())
	}
	return 2048
}

// rssBytes is the process's resident memory, or 0 where it is unknown.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func memory(rt Runtime, runs int, parked bool) func(*testing.B) {
	return func(b *testing.B) {
		in := Input{Mode: StepsAsk, N: 0, Asks: 1}
		var start func() (end func())
		// settle is called before each sample: the store's pending writes,
		// which it holds until its next checkpoint, are not the runs'.
		settle := func() {}
		if rt == PlainGo {
			start = func() func() {
				release := make(chan struct{})
				done := make(chan error, runs)
				ops := LiveOps()
				ops.Ask = func() (abi.AskAnswer, error) {
					<-release
					return abi.AskAnswer{Status: abi.AnswerAnswered}, nil
				}
				for range runs {
					go func() {
						_, err := Plain(in, ops)
						done <- err
					}()
				}
				return func() {
					close(release)
					for range runs {
						if err := <-done; err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		} else {
			maxWarm := -1
			if parked {
				maxWarm = runs + 1
			}
			s := openTB(b, hostConfig{maxWarm: maxWarm, runtimes: []Runtime{rt}})
			settle = func() { need(b, s.st.Checkpoint()) }
			v := registerTB(b, s, rt)
			// One run first, so that the plugin is loaded and compiled.
			if _, err := s.call(in, v); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			start = func() func() {
				// Nothing of the runs is kept here, so that the sample is
				// what the host keeps; they are found in the store after.
				for range runs {
					ri, err := s.h.Call(ctx, ToolName, in.json(), &host.CallOptions{Version: v})
					if err == nil {
						_, err = askOf(ri)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				return func() {
					waiting, err := s.h.Runs(ctx, store.RunFilter{Status: store.StatusWaiting})
					need(b, err)
					if len(waiting) != runs {
						b.Fatalf("%d runs waiting, want %d", len(waiting), runs)
					}
					for _, r := range waiting {
						ri, err := s.h.Run(ctx, r.ID)
						if err == nil {
							_, err = s.finish(ri)
						}
						need(b, err)
					}
				}
			}
		}
		var sum memSample
		for b.Loop() {
			b.StopTimer()
			settle()
			before := sampleMemory()
			b.StartTimer()
			end := start()
			b.StopTimer()
			settle()
			after := sampleMemory()
			end()
			b.StartTimer()
			sum.heap += after.heap - before.heap
			sum.goroutines += after.goroutines - before.goroutines
			sum.rss += after.rss - before.rss
		}
		per := float64(b.N) * float64(runs)
		b.ReportMetric((sum.heap+sum.goroutines*stackBytes())/per, "B/run")
		b.ReportMetric(sum.goroutines/per, "goroutines/run")
		if runtime.GOOS == "linux" {
			b.ReportMetric(sum.rss/per, "rss-B/run")
		}
	}
}

// UploadToFirstCall is figure 6: what a user waits for after uploading a
// tool: the upload pipeline (checks, compilation with an empty cache, the
// probe instantiation) and the first call of the tool, to its first wait.
// The tool is the deploy example: examples/deploy for the Go runtimes,
// examples/c-deploy for C, examples/js/deploy.js for JavaScript (on the
// process's jsprogram engine, its workers running; each upload's source
// differs by a comment, so no worker has it compiled). PlainGo has nothing
// to upload: skipped.
func UploadToFirstCall(rt Runtime) func(*testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		var mod []byte
		var m host.Manifest
		var err error
		readManifest := func(rel string) {
			p, err := repoFile(rel)
			need(b, err)
			raw, err := os.ReadFile(p)
			need(b, err)
			m, err = host.ParseManifest(raw)
			need(b, err)
		}
		switch rt {
		case PlainGo:
			b.Skip("plain Go has nothing to upload")
		case GoWazero, GoWasmtime:
			mod, err = guest("examples/deploy", guestbuild.Build)
			readManifest("examples/deploy/manifest.json")
		case CWazero, CWasmtime:
			mod, err = guest("examples/c-deploy", guestbuild.BuildC)
			readManifest("examples/c-deploy/manifest.json")
		case JS:
			var p string
			if p, err = repoFile("examples/js/deploy.js"); err == nil {
				mod, err = os.ReadFile(p)
			}
		}
		need(b, err)
		var js host.Engine
		if rt == JS {
			js, err = Engine(jsprogram.EngineName)
			need(b, err)
		}
		wz, err := Engine(host.EngineWazero)
		need(b, err)
		// Iteration -1, not timed, takes what only the process's first
		// upload pays.
		for i := -1; i < b.N; i++ {
			b.StopTimer()
			dir := b.TempDir()
			opts := &host.Options{Engine: wz, Engines: map[string]host.Engine{}, NoFetch: true}
			var fresh host.Engine
			if rt == JS {
				opts.Engines[jsprogram.EngineName] = js
			} else {
				// A new engine: nothing compiled yet.
				if fresh, err = host.NewEngine(ctx, rt.engine(), filepath.Join(dir, "cache")); err != nil {
					if rt.engine() == host.EngineWasmtime {
						b.Skip(err)
					}
					b.Fatal(err)
				}
				opts.Engine = fresh
			}
			st, err := store.Open(filepath.Join(dir, "db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			h, err := host.Open(ctx, st, opts)
			if err != nil {
				b.Fatal(err)
			}
			tool := m.Name
			b.StartTimer()
			if rt == JS {
				tool = "deploy"
				src := append([]byte(fmt.Sprintf("// upload %d\n", i)), mod...)
				_, err = jsprogram.RegisterTool(ctx, h, tool, src)
			} else {
				_, err = h.AddPlugin(ctx, mod, m)
			}
			if err != nil {
				b.Fatal(err)
			}
			ri, err := h.Call(ctx, tool, json.RawMessage(`{"service":"api"}`), nil)
			if err != nil || ri.Status != store.StatusWaiting {
				b.Fatalf("first call: %+v %v", ri, err)
			}
			b.StopTimer()
			h.Close(ctx)
			st.Close()
			if fresh != nil {
				fresh.Close(ctx)
			}
			if i < 0 {
				b.ResetTimer()
			}
			b.StartTimer()
		}
	}
}

// Live times a whole live run of a workload (start to result, each
// question answered as soon as it is asked), with fsync off, so that the
// time is the runtime's and the kernel's, not the disk's; instances are
// parked between activations (jsprogram replays at each one). PlainGo runs
// Plain with LiveOps.
func Live(rt Runtime, w Workload, n int) func(*testing.B) {
	return func(b *testing.B) {
		in := Input{Mode: w, N: n}
		if rt == PlainGo {
			for b.Loop() {
				if v, err := Plain(in, LiveOps()); err != nil || v != n {
					b.Fatal(v, err)
				}
			}
			return
		}
		s := openTB(b, hostConfig{runtimes: []Runtime{rt}})
		v := registerTB(b, s, rt)
		if _, err := s.call(Input{Mode: w, N: 1}, v); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := s.call(in, v); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// ToolCall times one call of a trivial tool, the greet workload, from
// Host.Call to its result: the input checked against the tool's schema,
// the run recorded, an instance taken from the pool (the host keeps
// PreInit 2 and, on wazero, reuses the instances of finished runs), the
// guest's JSON decode and encode, and the run's completion recorded, with
// the store's real policy (fsync on). PlainGo is PlainGreet, the floor.
// Extism's Plugin.Call of the same guest work (bench/peers) is in the same
// group.
func ToolCall(rt Runtime) func(*testing.B) { return toolCall(rt, true) }

// ToolCallNoSync is ToolCall on a store that does not fsync: the host's
// and the runtime's part of a call.
func ToolCallNoSync(rt Runtime) func(*testing.B) { return toolCall(rt, false) }

func toolCall(rt Runtime, sync bool) func(*testing.B) {
	return func(b *testing.B) {
		input := json.RawMessage(GreetInput)
		if rt == PlainGo {
			for b.Loop() {
				if out, err := PlainGreet(input); err != nil || string(out) != GreetResult {
					b.Fatal(string(out), err)
				}
			}
			return
		}
		s := openTB(b, hostConfig{runtimes: []Runtime{rt}, sync: sync, preInit: 2})
		v := registerTB(b, s, rt)
		ctx := context.Background()
		call := func() error {
			ri, err := s.h.Call(ctx, ToolName, input, &host.CallOptions{Version: v})
			if err != nil {
				return err
			}
			if ri.Status != store.StatusCompleted || string(ri.Result) != GreetResult {
				return fmt.Errorf("greet: run %s %s, result %s, want %s (%v)", ri.ID, ri.Status, ri.Result, GreetResult, ri.Error)
			}
			return nil
		}
		need(b, call())
		need(b, s.h.WaitPreInit(ctx))
		for b.Loop() {
			need(b, call())
		}
	}
}
