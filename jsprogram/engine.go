// Package jsprogram runs JavaScript workflow programs on the sandflow kernel
// with goja: the runtime-generated `workflow` tool, whose input is the body
// of an async function a model wrote.
//
// A program runs like a WebAssembly guest: its ctx.agent calls are recorded
// ops. A program that suspends stays live in its worker (parked, within a
// budget: see Options.MaxParked), so its resume runs only what is new; a
// start, or a resume whose program is no longer parked, runs it again from
// the top against the run's log (replay, which stays the truth; the worker
// answers it from the log, sent once: see internal/replay). What the
// program can observe comes from the host and is the same on replay:
// Math.random is seeded per run, Date reads the run's logical clock in UTC, and values reach it as JSON parsed inside the VM.
// It has no timers, no imports, no eval, and no console but the run's log.
//
// goja is an engine, not a sandbox: it cannot interrupt its own built-ins
// and has no memory limit. So each start or resume runs in a worker
// process (this binary, re-executed; see MaybeWorker) with a heap and
// address-space cap, and the host kills it at the time limits. A dead
// worker fails its run with a typed error, and the pool starts another.
//
// This package is the host's side: the Engine and its instances
// (engine.go), the host's side of an activation (serve.go), the pool of
// worker processes (pool.go), the lot of parked programs (park.go), and
// the authored and workflow tools' registration (tool.go, workflow.go).
// The worker process is internal/worker; what the two say to each other
// over the pipe, and the Limits and errors in it, internal/proto; fast
// replay's log and its check, internal/replay.
package jsprogram

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/plugins"
)

// EngineName is the engine a JavaScript tool's manifest names.
const EngineName = "goja"

// Options configure an Engine. The zero value means defaults.
type Options struct {
	// Limits bound every program; zero fields take DefaultLimits. A
	// workflow tool's maxSubagents overrides MaxSubagents.
	Limits Limits
	// WorkerPath is the binary started as a worker; it must call
	// MaybeWorker first thing. Empty means this process's executable.
	WorkerPath string
	// MaxWorkers bounds the programs that start at once: max(4, 2 ×
	// CPUs) by default; more wait. (sandflow serve --js-workers.)
	MaxWorkers int
	// LongWorkers bounds the programs that have run longer than
	// LongAfter and moved to the long lane, where they no longer hold
	// one of MaxWorkers (MaxWorkers by default).
	LongWorkers int
	// LongAfter is how long an activation computes before it moves to the
	// long lane (1 s).
	LongAfter time.Duration
	// IdleWorkers is how many started workers are kept ready (2).
	IdleWorkers int
	// KillGrace is how long past a time limit a worker that has not
	// stopped by itself is given before it is killed (1 s).
	KillGrace time.Duration
	// MaxParked bounds the suspended workflow programs kept live in
	// their workers, one worker each, so that a resume runs only what is
	// new: DefaultMaxParked (32) when 0, none when negative. Past it the
	// least recently parked is evicted, and replays when it resumes.
	// (sandflow serve --js-parked.)
	MaxParked int
	// MaxParkedBytes bounds the memory the parked programs' workers hold
	// together (as each reported it when its program parked):
	// DefaultMaxParkedBytes (1 GiB) when 0, no bound but MaxParked when
	// negative.
	MaxParkedBytes int64
	// RoundTripReplay replays every recorded op by a round trip to the
	// host, as before the log was sent to workers: for comparison and
	// tests; a replay answered from the log is the same to the program.
	RoundTripReplay bool
}

// Engine implements host.Engine (and host.SourceEngine) for JavaScript
// programs. It is safe for concurrent use.
type Engine struct {
	lim       Limits
	grace     time.Duration
	longAfter time.Duration
	pool      *pool
	lot       *lot
	// slowReplay: a worker's replay once answered otherwise than the
	// host; replays go by round trips from then on (internal/replay).
	slowReplay atomic.Bool
	// logReplayed counts the ops workers answered from logs.
	logReplayed atomic.Int64
}

var _ host.SourceEngine = (*Engine)(nil)

// NewEngine makes an engine; Close stops its workers.
func NewEngine(opts *Options) (*Engine, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Limits = proto.WithDefaults(o.Limits, DefaultLimits)
	if o.WorkerPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("jsprogram: finding this executable to start workers: %w", err)
		}
		o.WorkerPath = exe
	}
	if o.MaxWorkers <= 0 {
		o.MaxWorkers = DefaultMaxWorkers()
	}
	if o.LongWorkers <= 0 {
		o.LongWorkers = o.MaxWorkers
	}
	if o.LongAfter <= 0 {
		o.LongAfter = time.Second
	}
	if o.IdleWorkers <= 0 {
		o.IdleWorkers = 2
	}
	if o.KillGrace <= 0 {
		o.KillGrace = time.Second
	}
	e := &Engine{lim: o.Limits, grace: o.KillGrace, longAfter: o.LongAfter,
		pool: newPool(o.WorkerPath, o.Limits.MemoryBytes, o.MaxWorkers, o.LongWorkers, o.IdleWorkers),
		lot:  newLot(o.MaxParked, o.MaxParkedBytes)}
	e.slowReplay.Store(o.RoundTripReplay)
	return e, nil
}

// DefaultMaxWorkers is Options.MaxWorkers when it is 0: max(4, 2 × the
// CPUs this process may use).
func DefaultMaxWorkers() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// Stats reports the engine's workers.
func (e *Engine) Stats() Stats {
	st := e.pool.stats()
	e.lot.stats(&st)
	st.LogReplayedOps = e.logReplayed.Load()
	return st
}

// Name implements host.Engine.
func (e *Engine) Name() string { return EngineName + "/1" }

// Close implements host.Engine.
func (e *Engine) Close(context.Context) error {
	e.pool.close()
	killAll(e.lot.all())
	return nil
}

// toolConfig is the module of a workflow tool: which program kind it runs,
// with what budget.
type toolConfig = plugins.WorkflowToolConfig

// toolKind is toolConfig.Sandflow for the workflow tool.
const toolKind = "workflow-tool"

// Compile implements host.Engine. A module is either a workflow tool's
// configuration, {"sandflow": "workflow-tool", "maxSubagents": n}, or an
// authored tool's script (no JSON object with a "sandflow" member is also
// a script that runs). A script is only checked for size and encoding
// here: parsing and running it is for workers (see Check).
func (e *Engine) Compile(_ context.Context, module []byte) (host.CompiledModule, error) {
	c, ok := plugins.ParseWorkflowToolConfig(module)
	if !ok {
		return e.compileScript(module)
	}
	if c.Sandflow != toolKind {
		return nil, &host.PluginError{Reason: "bad_program", Detail: fmt.Sprintf("a goja tool configuration's \"sandflow\" must be %q, not %q", toolKind, c.Sandflow)}
	}
	lim := e.lim
	if c.MaxSubagents != nil {
		if n := *c.MaxSubagents; n < 1 || n > MaxSubagentsCap {
			return nil, &host.PluginError{Reason: "bad_program", Detail: fmt.Sprintf("maxSubagents must be an integer from 1 through %d, not %d", MaxSubagentsCap, n)}
		}
		lim.MaxSubagents = *c.MaxSubagents
	}
	return &compiled{e: e, lim: lim}, nil
}

// Check implements host.SourceEngine. A workflow tool was checked by
// Compile. A script is run in a worker as far as its definition, which
// must be the tool the manifest describes.
func (e *Engine) Check(ctx context.Context, cm host.CompiledModule, m host.Manifest, _ host.Limits) error {
	c, ok := cm.(*compiled)
	if !ok || c.source == "" {
		return nil
	}
	def, err := e.define(ctx, c.source)
	if err != nil {
		return err
	}
	return def.matches(m)
}

type compiled struct {
	e   *Engine
	lim Limits
	// source is an authored tool's script; empty for the workflow tool.
	source string
}

func (c *compiled) Close(context.Context) error { return nil }

func (c *compiled) Instantiate(_ context.Context, cfg host.InstanceConfig) (host.Instance, error) {
	seed := make([]byte, 32)
	if _, err := io.ReadFull(cfg.Random, seed); err != nil {
		return nil, fmt.Errorf("jsprogram: seeding: %w", err)
	}
	return &instance{c: c, cfg: cfg, seed: seed}, nil
}

// instance is one run's program. Between calls it holds no worker, or, for
// a workflow program that suspended, the worker its program is parked in
// (vm, guarded by the engine's lot): a start takes a worker from the pool,
// and a resume the parked one, or a new one to replay.
type instance struct {
	c    *compiled
	cfg  host.InstanceConfig
	seed []byte
	ran  bool // the program has run: a resume needs it parked
	vm   *parkedVM
	// carried is what the parked program's activations so far carried
	// between it and the host, as a replay through them would carry it
	// (Limits.InFlightBytes counts that).
	carried int64
	// logActs is how many activations the log sent to the worker holds
	// (0: none was sent).
	logActs int
	// failed: a call returned an error, after which the instance is
	// closed (host.Instance): later calls fail.
	failed bool
}

func (i *instance) Close(context.Context) error {
	if w := i.c.e.lot.take(i); w != nil {
		w.kill()
	}
	return nil
}

func (i *instance) Call(ctx context.Context, export string) (int32, error) {
	if i.failed {
		return 0, &host.GuestError{Message: "jsprogram: the instance is closed: an earlier call failed"}
	}
	res, err := i.call(ctx, export)
	if err != nil {
		i.failed = true
		i.Close(ctx)
	}
	return res, err
}

func (i *instance) call(ctx context.Context, export string) (int32, error) {
	switch export {
	case abi.VersionExport:
		return abi.Version, nil
	case abi.RunExport:
		if i.c.source != "" {
			return i.run(ctx, proto.KindTool)
		}
		return i.run(ctx, proto.KindProgram)
	case abi.StepExport:
		if i.c.source != "" {
			return i.run(ctx, proto.KindStep)
		}
	}
	return 0, &host.GuestError{Message: fmt.Sprintf("a JavaScript tool has no export %s", export)}
}

func (i *instance) run(ctx context.Context, kind string) (int32, error) {
	e := i.c.e
	if kind == proto.KindProgram && i.ran {
		return i.resume(ctx)
	}
	i.ran = true
	w, err := e.pool.get(ctx)
	if err != nil {
		return 0, err
	}
	lim := i.c.lim
	if kind != proto.KindProgram && i.cfg.CPULimit > 0 {
		// An authored tool's JavaScript time is its plugin's CPU limit.
		lim.JSTime = min(lim.JSTime, i.cfg.CPULimit)
	}
	if kind == proto.KindStep {
		// A step attempt draws fresh randomness, as a WebAssembly step
		// instance does.
		if _, err := io.ReadFull(i.cfg.Random, i.seed); err != nil {
			e.pool.put(w, true)
			return 0, fmt.Errorf("jsprogram: seeding: %w", err)
		}
	}
	park := kind == proto.KindProgram && e.lot.max > 0
	log := i.replayLog(kind, lim)
	raw, _ := json.Marshal(proto.Activation{Kind: kind, Source: i.c.source, Name: i.cfg.Name, Seed: i.seed, Now: i.cfg.Clock.Now(), Limits: lim, Park: park, Log: log != nil})
	err = w.send(proto.FrameActivate, raw)
	if err == nil && log != nil {
		err = w.send(proto.FrameLog, log)
	}
	if err != nil {
		e.pool.put(w, false)
		return 0, fmt.Errorf("jsprogram: starting an activation: %w", err)
	}
	return i.serve(ctx, w, kind, lim, false)
}

// resume runs the next activation of a parked program: it is told to go
// on, and asks the host again for what it waits on. A program no longer
// parked (evicted), or whose worker dies during the activation, is lost:
// the host runs the activation again on an instance that replays, since
// nothing of it was committed.
func (i *instance) resume(ctx context.Context) (int32, error) {
	e := i.c.e
	w := e.lot.take(i)
	if w == nil {
		e.lot.lost.Add(1)
		return 0, instanceLost("evicted")
	}
	if err := e.pool.acquire(ctx); err != nil {
		w.kill()
		return 0, err
	}
	if !w.alive() {
		e.pool.put(w, false)
		e.lot.lost.Add(1)
		return 0, instanceLost("its worker died")
	}
	w.stderr.reset()
	if err := w.send(proto.FrameContinue); err != nil {
		e.pool.put(w, false)
		e.lot.lost.Add(1)
		return 0, instanceLost("its worker does not read: " + err.Error())
	}
	e.lot.resumed.Add(1)
	return i.serve(ctx, w, proto.KindProgram, i.c.lim, true)
}
