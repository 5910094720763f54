// Package enginetest is the conformance suite of the host's engines: what
// the kernel relies on of every engine.Engine, checked through the
// interfaces of package engine alone. Each engine's package runs it from
// its tests:
//
//	func TestConformance(t *testing.T) {
//		enginetest.Suite{Engine: newEngine, WASM: true, Snapshots: true}.Run(t)
//	}
//
// Most cases run a guest that shows one named Behaviour (a tight loop, an
// op whose answer it reports, ...). On an engine of WebAssembly
// (Suite.WASM) the guests are hand-assembled (internal/wasmtest); an
// engine of another language supplies its own (Suite.Language), and the
// same case checks it the same way. A case whose behaviour only
// WebAssembly has (WASI's errnos, a module's initial memory, snapshots of
// linear memory) says why in the case table and runs on WebAssembly
// engines alone. The snapshot case checks what an engine's modules and
// instances offer of engine.SnapshotModule, engine.Snapshotter and
// engine.BaseMapped, and fails without them when Suite.Snapshots says the
// engine snapshots.
//
// The package imports no more of the host than package engine, so that an
// engine whose own package imports host can use it without a cycle.
package enginetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/wasmtest"
)

// Suite is the conformance suite for one engine.
type Suite struct {
	// Engine returns the engine under test. It may return the same engine
	// every time; the suite does not close it.
	Engine func(t testing.TB) engine.Engine
	// WASM says the engine runs WebAssembly: the cases run the
	// hand-assembled guests, the WebAssembly-only cases among them.
	WASM bool
	// Language is the engine's own guest language when it is not
	// WebAssembly: the cases whose behaviour it can show run on its
	// guests. Nil (and WASM false): only the cases that need no guest of
	// the engine's language run, on Module.
	Language *Language
	// Module is a module of the engine's own, for the cases every engine
	// runs; nil means a WebAssembly guest whose sandflow_abi_version
	// returns Version.
	Module []byte
	// Version is what Module's sandflow_abi_version export returns.
	Version int32
	// Snapshots says the engine's modules are engine.SnapshotModules that
	// can snapshot: the Snapshot case fails if they cannot. Without it,
	// the case checks whatever the engine's modules and instances offer.
	Snapshots bool
}

// Language is what the suite needs of an engine's own guest language.
type Language struct {
	// Guest returns the module that shows b. Every Behaviour of a case
	// that is not WebAssembly-only must have one: a nil module fails the
	// case.
	Guest func(b Behaviour) []byte
	// Serve wraps an instance's op handler: it answers the ops the
	// language's guests make of their own (a JavaScript tool reads its
	// input and reports its result by ops), passes the behaviour's ops to
	// next, and returns what the guest reported once its call returned
	// without an error: the int32 a WebAssembly guest's sandflow_run
	// returns, or the guest's failure as a *engine.GuestError.
	Serve func(next engine.OpHandler) (engine.OpHandler, func() (int32, error))
	// LimitNames are the names the engine gives the limits "cpu" and
	// "memory" when it reports them as a *engine.GuestError with Limit
	// set (the JavaScript engine's "js_time" and "memory") rather than
	// as a *engine.LimitError.
	LimitNames map[string]string
	// OpTimeFree says the time an op spends in the host never counts
	// against the CPU limit, paused or not (the JavaScript engine's
	// clock stops for every op): the half of PauseCPU that expects the
	// limit, and RestartCPU, which spends the budget inside ops, do not
	// apply.
	OpTimeFree bool
}

// Behaviour names what a case's guest does; a Language's Guest returns a
// module that does it. "Returns n" is what a WebAssembly guest's
// sandflow_run returns; a guest of another language reports n as its
// result (Language.Serve).
type Behaviour string

// The behaviours of the suite's guests.
const (
	// TightLoop computes forever.
	TightLoop Behaviour = "tight loop"
	// GrowLoop allocates memory forever and keeps it.
	GrowLoop Behaviour = "grow loop"
	// Fail fails at once: a trap, or an exception nothing catches.
	Fail Behaviour = "fail"
	// TwoOpsThenLoop makes two ops, then computes forever.
	TwoOpsThenLoop Behaviour = "two ops then a loop"
	// AnswerLength makes one op, with an empty name, and returns the
	// length of its answer, the 8-byte header included.
	AnswerLength Behaviour = "answer length"
	// RoundTrips makes eleven ops with the name "ping" and a payload
	// holding "abc", all alike; it returns the sum of the answers'
	// lengths, headers included, plus the byte before the last of the
	// last answer.
	RoundTrips Behaviour = "round trips"
	// OpThenCount makes one op, counts to about a million, and returns 1.
	OpThenCount Behaviour = "op then count"
	// ThreeOps makes three ops, counting a little after each, and
	// returns 1.
	ThreeOps Behaviour = "three ops"
	// WriteHi writes "hi\n" to stdout and "ho\n" to stderr, and returns
	// 1 when both writes took.
	WriteHi Behaviour = "write hi"
	// ClockAndRandom returns a number made of the time it reads and of
	// random bytes it draws, so that another clock or generator changes
	// it.
	ClockAndRandom Behaviour = "clock and random"
)

// Run runs the suite's cases as subtests of t.
func (s Suite) Run(t *testing.T) {
	// wasmOnly is why a case applies to WebAssembly engines alone; empty
	// when every engine runs it (on its own guests, or on Module).
	// opTime: the case spends the CPU budget inside ops, which does not
	// apply where op time is free (Language.OpTimeFree).
	cases := []struct {
		name     string
		fn       func(*testing.T, *Case)
		guests   bool // the case runs guests of the engine's language
		wasmOnly string
		opTime   bool
	}{
		{"Version", s.version, false, "", false},
		{"CompiledTwiceClosedOnce", s.compiledTwice, false, "", false},
		{"MissingExportIsAGuestError", missingExport, false, "", false},
		{"CPULimitStopsATightLoop", cpuLimit, true, "", false},
		{"MemoryLimitStopsAGrowLoop", memoryLimit, true, "", false},
		{"InitialMemoryOverTheLimit", initialMemory, true, "a module's initial memory is WebAssembly's", false},
		{"FailureIsAGuestError", failure, true, "", false},
		{"ContextCancelStopsALoop", contextCancel, true, "", false},
		{"OpHandlerErrorEndsTheGuest", opHandlerError, true, "", false},
		{"OpOutsideMemoryIsAGuestError", opOutsideMemory, true, "only a guest with linear memory can point outside it", false},
		{"OpAnswer", opAnswer, true, "", false},
		{"OpsRoundTrip", opsRoundTrip, true, "", false},
		{"PauseCPU", pauseCPU, true, "", false},
		{"RestartCPU", restartCPU, true, "", true},
		{"ProcExit", procExit, true, "exit codes are WASI's proc_exit", false},
		{"Stdout", stdout, true, "", false},
		{"ClockAndRandomFromConfig", clockAndRandom, true, "", false},
		{"WASIErrnos", wasiErrnos, true, "the errnos are WASI's", false},
		{"Prepare", prepare, true, "_initialize and sandflow_prepare are a WebAssembly module's exports", false},
		{"Snapshot", s.snapshot, true, "snapshots are of linear memory and globals", false},
	}
	for _, c := range cases {
		if c.guests && !s.WASM && (s.Language == nil || c.wasmOnly != "" || c.opTime && s.Language.OpTimeFree) {
			continue // no guest of this engine's language shows it
		}
		t.Run(c.name, func(t *testing.T) { c.fn(t, s.newCase(t)) })
	}
}

// StillClock stands still but for sleeps. It must not read 0: the Go
// runtime refuses to start on a clock that does.
type StillClock struct{ Nanos int64 }

// Now implements engine.GuestClock.
func (c *StillClock) Now() int64 { return c.Nanos }

// Sleep implements engine.GuestClock.
func (c *StillClock) Sleep(ns int64) { c.Nanos += max(ns, 1) }

// fill is a random source of one repeated byte.
type fill byte

func (f fill) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(f)
	}
	return len(b), nil
}

// OpFunc is an engine.OpHandler; nil answers every op with an ok body.
type OpFunc func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error)

// Op implements engine.OpHandler.
func (f OpFunc) Op(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
	if f == nil {
		return make([]byte, 8), nil
	}
	return f(ctx, kind, name, payload)
}

// Case is one case's engine and the configuration its instances get.
type Case struct {
	t      *testing.T
	Engine engine.Engine
	Config engine.InstanceConfig
	module []byte
	lang   *Language // nil: WebAssembly guests
}

// the clock and random byte every case's instances start with.
const (
	startClock = int64(1.7e18)
	randomByte = 0x5a
)

func (s Suite) newCase(t *testing.T) *Case {
	c := NewCase(t, s.Engine(t))
	c.module = s.Module
	if !s.WASM {
		c.lang = s.Language
	}
	return c
}

// NewCase is a case on eng with the configuration every case starts
// with: a still clock, fixed random bytes, buffered stdout and stderr,
// 16 MiB of memory, 10 s of CPU and ops answered ok. Tests outside the
// suite use it to run their own cases the same way.
func NewCase(t *testing.T, eng engine.Engine) *Case {
	return &Case{t: t, Engine: eng, Config: engine.InstanceConfig{
		Clock: &StillClock{Nanos: startClock}, Random: fill(randomByte), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{},
		MemoryLimit: 16 << 20, CPULimit: 10 * time.Second, Ops: OpFunc(nil),
	}}
}

// Instantiate compiles wasm and makes an instance of it with the case's
// configuration.
func (c *Case) Instantiate(wasm []byte) (engine.Instance, error) {
	c.t.Helper()
	cm, err := c.Engine.Compile(context.Background(), wasm)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cm.Close(context.Background()) })
	return cm.Instantiate(context.Background(), c.Config)
}

// Run instantiates wasm and calls its sandflow_run.
func (c *Case) Run(ctx context.Context, wasm []byte) (int32, engine.Instance, error) {
	c.t.Helper()
	inst, err := c.Instantiate(wasm)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { inst.Close(context.Background()) })
	res, err := inst.Call(ctx, abi.RunExport)
	return res, inst, err
}

// reported says the failure a case's guest ended with was reported by the
// guest (Language.Serve) rather than returned by the engine's Call: the
// instance did not fail, and stays usable.
type reported struct{ error }

func (r reported) Unwrap() error { return r.error }

// runGuest runs the guest that shows b, in the engine's language, and
// returns what it returned or reported.
func (c *Case) runGuest(ctx context.Context, b Behaviour) (int32, engine.Instance, error) {
	c.t.Helper()
	if c.lang == nil {
		return c.Run(ctx, wasmGuest(b))
	}
	module := c.lang.Guest(b)
	if module == nil {
		c.t.Fatalf("the engine's language has no guest that shows %q", b)
	}
	ops := c.Config.Ops
	defer func() { c.Config.Ops = ops }()
	served, result := c.lang.Serve(ops)
	c.Config.Ops = served
	res, inst, err := c.Run(ctx, module)
	if err != nil {
		return res, inst, err
	}
	res, err = result()
	if err != nil {
		err = reported{err}
	}
	return res, inst, err
}

// expectLimit fails t unless err is the limit named (cpu or memory) of
// max (ms or bytes; 0: any), as the engine reports its limits.
func (c *Case) expectLimit(t *testing.T, err error, limit string, max int64) {
	t.Helper()
	if c.lang != nil && c.lang.LimitNames[limit] != "" {
		var ge *engine.GuestError
		if !errors.As(err, &ge) || ge.Limit != c.lang.LimitNames[limit] || ge.ExitCode != nil {
			t.Fatalf("want the %s limit (a *GuestError with Limit %q), got %v", limit, c.lang.LimitNames[limit], err)
		}
		return
	}
	sentinel := map[string]error{"cpu": engine.ErrCPULimit, "memory": engine.ErrMemoryLimit}[limit]
	var le *engine.LimitError
	if !errors.Is(err, sentinel) || !errors.As(err, &le) || le.Limit != limit || (max != 0 && le.Max != max) {
		t.Fatalf("want the %s limit of %d, got %v", limit, max, err)
	}
}

func expectClosed(t *testing.T, inst engine.Instance) {
	t.Helper()
	if _, err := inst.Call(context.Background(), abi.VersionExport); !errors.Is(err, engine.ErrGuest) {
		t.Errorf("the instance is still usable after an error: %v", err)
	}
}

// own is the case's module: the engine's own, or a WebAssembly guest.
func (c *Case) own() []byte {
	if c.module != nil {
		return c.module
	}
	return wasmtest.Guest(wasmtest.ReturnOne)
}

// compiledTwice: a module compiled twice gives two handles, and closing
// one leaves the other working (an engine that shares the code between
// them must not free it with the first).
func (s Suite) compiledTwice(t *testing.T, c *Case) {
	ctx := context.Background()
	a, err := c.Engine.Compile(ctx, c.own())
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Engine.Compile(ctx, c.own())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close(ctx) // a second close changes nothing
	inst, err := b.Instantiate(ctx, c.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if _, err := inst.Call(ctx, abi.VersionExport); err != nil {
		t.Errorf("after the other handle closed: %v", err)
	}
}

func (s Suite) version(t *testing.T, c *Case) {
	want := s.Version
	if s.Module == nil {
		want = 1 // wasmtest.Guest's sandflow_abi_version
	}
	inst, err := c.Instantiate(c.own())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	if v, err := inst.Call(context.Background(), abi.VersionExport); err != nil || v != want {
		t.Fatalf("%s returned %d, %v; want %d", abi.VersionExport, v, err, want)
	}
}

func missingExport(t *testing.T, c *Case) {
	inst, err := c.Instantiate(c.own())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	_, err = inst.Call(context.Background(), "sandflow_no_such_export")
	var ge *engine.GuestError
	if !errors.Is(err, engine.ErrGuest) || !errors.As(err, &ge) {
		t.Fatalf("calling a missing export: %v, want a *GuestError", err)
	}
}
