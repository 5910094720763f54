// Package enginetest is the conformance suite of the host's engines: what
// the kernel relies on of every engine.Engine, checked through the
// interfaces of package engine alone. Each engine's package runs it from
// its tests:
//
//	func TestConformance(t *testing.T) {
//		enginetest.Suite{Engine: newEngine, WASM: true, Snapshots: true}.Run(t)
//	}
//
// The WebAssembly cases use hand-assembled guests (internal/wasmtest), so
// they run only on engines of WebAssembly (Suite.WASM); an engine of
// another language (the JavaScript one) runs the cases that need no guest
// code of its own, on a module it supplies (Suite.Module). The snapshot
// case checks what an engine's modules and instances offer of
// engine.SnapshotModule, engine.Snapshotter and engine.BaseMapped, and
// fails without them when Suite.Snapshots says the engine snapshots.
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
	// WASM says the engine runs WebAssembly: the cases on hand-assembled
	// guests apply.
	WASM bool
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

// Run runs the suite's cases as subtests of t.
func (s Suite) Run(t *testing.T) {
	cases := []struct {
		name string
		fn   func(*testing.T, *Case)
		wasm bool
	}{
		{"Version", s.version, false},
		{"CompiledTwiceClosedOnce", s.compiledTwice, false},
		{"MissingExportIsAGuestError", missingExport, false},
		{"CPULimitStopsATightLoop", cpuLimit, true},
		{"MemoryLimitStopsAGrowLoop", memoryLimit, true},
		{"InitialMemoryOverTheLimit", initialMemory, true},
		{"TrapIsAGuestError", trap, true},
		{"ContextCancelStopsALoop", contextCancel, true},
		{"OpHandlerErrorEndsTheGuest", opHandlerError, true},
		{"OpOutsideMemoryIsAGuestError", opOutsideMemory, true},
		{"OpAnswer", opAnswer, true},
		{"OpsRoundTrip", opsRoundTrip, true},
		{"PauseCPU", pauseCPU, true},
		{"RestartCPU", restartCPU, true},
		{"ProcExit", procExit, true},
		{"Stdout", stdout, true},
		{"ClockAndRandomFromConfig", clockAndRandom, true},
		{"WASIErrnos", wasiErrnos, true},
		{"Prepare", prepare, true},
		{"Snapshot", s.snapshot, true},
	}
	for _, c := range cases {
		if c.wasm && !s.WASM {
			continue // hand-assembled WebAssembly: not this engine's language
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
}

// the clock and random byte every case's instances start with.
const (
	startClock = int64(1.7e18)
	randomByte = 0x5a
)

func (s Suite) newCase(t *testing.T) *Case {
	c := NewCase(t, s.Engine(t))
	c.module = s.Module
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
