package host

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/linmem"
	"github.com/sandflow/sandflow/internal/meter"
	"github.com/sandflow/sandflow/internal/wasip1"
)

// exitAbort is the exit code the host closes an instance with when an
// OpHandler ends it; the handler's error is reported instead.
const exitAbort = 0xabad

// WazeroEngine runs guests on wazero, a WebAssembly runtime in pure Go.
type WazeroEngine struct {
	rt       wazero.Runtime
	name     string
	cacheDir string // "" without a compile cache
}

// NewWazeroEngine makes a wazero engine. cacheDir, when not empty, holds
// compiled artifacts across processes, keyed by module and wazero version;
// its entries are checked against their checksums first, and damaged ones
// discarded (compilecache.go).
func NewWazeroEngine(ctx context.Context, cacheDir string) (*WazeroEngine, error) {
	// No WithCloseOnContextDone: its check at every loop head is an
	// indirect call that slows guest code several times over. Modules are
	// metered instead (internal/meter), and a watchdog stops them.
	cfg := wazero.NewRuntimeConfig()
	if cacheDir != "" {
		if _, _, err := scanCache(cacheDir, true); err != nil {
			return nil, fmt.Errorf("wazero compilation cache: %w", err)
		}
		cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			return nil, fmt.Errorf("wazero compilation cache: %w", err)
		}
		cfg = cfg.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if err := defineWASI(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	i32 := api.ValueTypeI32
	_, err := rt.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(wzOp), []api.ValueType{i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}).
		WithParameterNames("kind", "name_ptr", "name_len", "payload_ptr", "payload_len", "resp_ptr", "resp_cap").Export(abi.FuncOp).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(wzRead), []api.ValueType{i32, i32}, []api.ValueType{i32}).
		WithParameterNames("ptr", "len").Export(abi.FuncRead).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(wzTick), nil, nil).Export(meter.TickName).
		Instantiate(ctx)
	if err != nil {
		rt.Close(ctx)
		return nil, err
	}
	return &WazeroEngine{rt: rt, name: "wazero/" + wazeroVersion(), cacheDir: cacheDir}, nil
}

func wazeroVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// Name implements Engine.
func (e *WazeroEngine) Name() string { return e.name }

// Close implements Engine.
func (e *WazeroEngine) Close(ctx context.Context) error { return e.rt.Close(ctx) }

// Compile implements Engine.
func (e *WazeroEngine) Compile(ctx context.Context, wasm []byte) (CompiledModule, error) {
	metered, err := meter.InstrumentModule(wasm)
	if err != nil {
		return nil, &PluginError{Reason: "compile", Detail: err.Error()}
	}
	cm, err := e.rt.CompileModule(ctx, metered.Wasm)
	if err != nil && e.cacheDir != "" && strings.Contains(err.Error(), "compilationcache") {
		// An entry damaged since the engine checked the cache: checked
		// again, it is discarded, and the module compiled anew.
		if _, _, serr := scanCache(e.cacheDir, true); serr == nil {
			cm, err = e.rt.CompileModule(ctx, metered.Wasm)
		}
	}
	if err != nil {
		return nil, &PluginError{Reason: "compile", Detail: err.Error()}
	}
	if e.cacheDir != "" {
		// The cache is best effort: an entry left unsealed is discarded
		// and compiled again by the next process.
		_ = sealCache(e.cacheDir)
	}
	return &wzModule{e: e, cm: cm, snapshots: metered.OutsideState == ""}, nil
}

type wzModule struct {
	e  *WazeroEngine
	cm wazero.CompiledModule
	// snapshots: memory and globals are an instance's whole state between
	// calls (no code changes a table or drops a segment).
	snapshots bool
}

// CanSnapshot implements engine.SnapshotModule.
func (m *wzModule) CanSnapshot() bool { return m.snapshots }

// Poolable implements engine.Poolable.
func (*wzModule) Poolable() {}

func (m *wzModule) Close(ctx context.Context) error { return m.cm.Close(ctx) }

// wzInstance is one wazero module instance and what its host calls need.
type wzInstance struct {
	mod    api.Module
	ops    OpHandler
	cpu    time.Duration
	memHit atomic.Bool
	memMax uint64
	held   []byte // a response body too big for the guest's buffer
	abort  error  // why an OpHandler ended the instance
	fns    map[string]api.Function
	closed bool
	gmem   linmem.Memory // the linear memory, as the allocator made it
	meter  cpuMeter
	globs  []api.MutableGlobal // see mutableGlobals
	sys    wasip1.System
	wmem   wzMemory
}

func (m *wzModule) Instantiate(ctx context.Context, cfg InstanceConfig) (_ Instance, err error) {
	inst := &wzInstance{
		ops: cfg.Ops, cpu: cfg.CPULimit, memMax: cfg.MemoryLimit, fns: map[string]api.Function{},
		sys: wasip1.System{Clock: cfg.Clock, Random: cfg.Random, Stdout: cfg.Stdout, Stderr: cfg.Stderr},
	}
	// The guest's clocks, random bytes and output are the WASI module's
	// (defineWASI), which reads them from the instance: wazero's own
	// sources are left unset.
	mc := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions() // _initialize runs below, under the CPU limit
	ictx := experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(capBytes, maxBytes uint64) experimental.LinearMemory {
		inst.gmem = linmem.New(capBytes, min(maxBytes, inst.memMax), &inst.memHit)
		return inst.gmem
	}))
	ictx = engine.WithCaller(ictx, inst)
	// A start function runs during instantiation, under the budget too.
	inst.meter.start(ctx, inst.cpu)
	defer func() {
		// wazero indexes the buffer the allocator gave for the initial
		// memory; a refused one (over the limit) panics there.
		if r := recover(); r != nil {
			if !inst.memHit.Load() {
				panic(r)
			}
			err = &LimitError{Limit: "memory", Max: int64(inst.memMax), What: "instantiating guest"}
		}
	}()
	mod, err := m.e.rt.InstantiateModule(ictx, m.cm, mc)
	if err != nil {
		if inst.memHit.Load() {
			return nil, &LimitError{Limit: "memory", Max: int64(inst.memMax), What: "instantiating guest"}
		}
		return nil, &GuestError{Message: "instantiate: " + err.Error()}
	}
	inst.mod = mod
	for _, name := range engine.InitExports() {
		if mod.ExportedFunction(name) != nil {
			if err := inst.callResult(ctx, name, nil); err != nil {
				return nil, err
			}
		}
	}
	return inst, nil
}

func (i *wzInstance) fn(name string) api.Function {
	f, ok := i.fns[name]
	if !ok {
		f = i.mod.ExportedFunction(name)
		i.fns[name] = f
	}
	return f
}

// Call implements Instance.
func (i *wzInstance) Call(ctx context.Context, export string) (int32, error) {
	if i.closed {
		return 0, &GuestError{Message: "instance is closed"}
	}
	var res int32
	err := i.callResult(ctx, export, &res)
	return res, err
}

func (i *wzInstance) callResult(ctx context.Context, export string, res *int32) error {
	f := i.fn(export)
	if f == nil {
		i.Close(ctx)
		return &GuestError{Message: "module does not export " + export}
	}
	cctx := engine.WithCaller(ctx, i)
	i.held = nil
	i.meter.start(ctx, i.cpu)
	out, err := f.Call(cctx)
	if err != nil {
		i.closed = true
		return i.classify(ctx, err)
	}
	if res != nil {
		if len(out) != 1 {
			i.Close(ctx)
			return &GuestError{Message: export + " must return one i32"}
		}
		*res = int32(uint32(out[0]))
	}
	return nil
}

func (i *wzInstance) classify(ctx context.Context, err error) error {
	if i.abort != nil {
		return i.abort
	}
	if i.memHit.Load() {
		return &LimitError{Limit: "memory", Max: int64(i.memMax), What: "guest"}
	}
	var ee *sys.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		return &GuestError{ExitCode: &code, Message: "proc_exit"}
	}
	return &GuestError{Message: err.Error()}
}

// Close implements Instance.
func (i *wzInstance) Close(ctx context.Context) error {
	i.closed = true
	if i.mod == nil {
		return nil
	}
	return i.mod.Close(ctx)
}

// abortWith ends the running guest from inside a host call: close the
// module, then unwind with an exit error so Call returns at once.
func (i *wzInstance) abortWith(ctx context.Context, mod api.Module, err error) {
	i.abort = err
	_ = mod.CloseWithExitCode(ctx, exitAbort)
	panic(sys.NewExitError(exitAbort))
}

func wzOp(ctx context.Context, mod api.Module, stack []uint64) {
	i, _ := engine.Caller(ctx).(*wzInstance)
	if i == nil {
		panic(sys.NewExitError(exitAbort))
	}
	mem := mod.Memory()
	kind := abi.OpKind(uint32(stack[0]))
	name, ok1 := mem.Read(uint32(stack[1]), uint32(stack[2]))
	payload, ok2 := mem.Read(uint32(stack[3]), uint32(stack[4]))
	respPtr, respCap := uint32(stack[5]), uint32(stack[6])
	if !ok1 || !ok2 {
		i.abortWith(ctx, mod, &GuestError{Message: fmt.Sprintf("ABI violation: %s op request outside guest memory", kind)})
	}
	i.held = nil
	body, err := i.ops.Op(ctx, kind, name, payload)
	if err != nil {
		i.abortWith(ctx, mod, err)
	}
	if uint32(len(body)) <= respCap {
		if !mem.Write(respPtr, body) {
			i.abortWith(ctx, mod, &GuestError{Message: fmt.Sprintf("ABI violation: %s response buffer outside guest memory", kind)})
		}
	} else {
		i.held = body
	}
	stack[0] = uint64(uint32(len(body)))
}

// defineWASI defines internal/wasip1's functions as the host module
// wasi_snapshot_preview1, so that a guest sees the same WASI here as on
// wasmtime: the clocks, random bytes and output of its InstanceConfig, no
// files, arguments or environment, and the same errno for everything
// else.
func defineWASI(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(wasip1.ModuleName)
	vt := func(ts []wasip1.ValType) []api.ValueType {
		out := make([]api.ValueType, len(ts))
		for k, t := range ts {
			out[k] = api.ValueType(t) // both are the binary format's codes
		}
		return out
	}
	for k := range wasip1.Funcs {
		f := &wasip1.Funcs[k]
		b = b.NewFunctionBuilder().
			WithGoModuleFunction(wzWASI(f), vt(f.Params), vt(f.Results)).
			Export(f.Name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// wzWASI is the host function of WASI function f.
func wzWASI(f *wasip1.Func) api.GoModuleFunc {
	n := len(f.Params)
	results := len(f.Results)
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		i, _ := engine.Caller(ctx).(*wzInstance)
		if i == nil {
			panic(sys.NewExitError(exitAbort))
		}
		i.wmem.mem = mod.Memory()
		errno, err := f.Call(&i.sys, &i.wmem, stack[:n])
		i.wmem.mem = nil
		if err != nil {
			var ee *wasip1.ExitError
			if errors.As(err, &ee) {
				// As wazero's own proc_exit: close the module with the
				// code and unwind; classify reports the exit.
				_ = mod.CloseWithExitCode(ctx, ee.Code)
				panic(sys.NewExitError(ee.Code))
			}
			i.abortWith(ctx, mod, err)
		}
		if results > 0 {
			stack[0] = uint64(errno)
		}
	}
}

// wzMemory is the guest memory as internal/wasip1 sees it during one host
// call.
type wzMemory struct{ mem api.Memory }

func (m *wzMemory) Bytes() []byte {
	if m.mem == nil {
		return nil
	}
	b, _ := m.mem.Read(0, m.mem.Size())
	return b
}

func wzRead(ctx context.Context, mod api.Module, stack []uint64) {
	i, _ := engine.Caller(ctx).(*wzInstance)
	ptr, n := uint32(stack[0]), uint32(stack[1])
	if i == nil || i.held == nil || n < uint32(len(i.held)) {
		stack[0] = uint64(uint32(0xffffffff)) // -1
		return
	}
	if !mod.Memory().Write(ptr, i.held) {
		i.abortWith(ctx, mod, &GuestError{Message: "ABI violation: read buffer outside guest memory"})
	}
	stack[0] = uint64(uint32(len(i.held)))
}

// cpuMeter keeps a call's CPU budget. The metered guest calls back into
// the host every meter.Interval loop iterations (wzTick), and the call ends
// there once the budget is spent or its context is done. Only the guest's
// goroutine touches it.
//
// A replay renews the budget at every recorded activation, thousands of
// times for a long history, so a renewal reads no clock: the budget runs
// from the meter's next reading (the next tick, or a pause), which comes
// within one tick's interval of guest work, the host calls in between
// being answered from the log. Times are kept as durations since a fixed
// epoch, so that each reading is one monotonic clock read (time.Since)
// rather than time.Now's wall and monotonic pair.
type cpuMeter struct {
	epoch    time.Time
	budget   time.Duration
	fresh    bool          // started, and the deadline not set since
	deadline time.Duration // since epoch
	pausedAt time.Duration // since epoch, while paused
	paused   bool
	ctx      context.Context
}

func (m *cpuMeter) now() time.Duration {
	if m.epoch.IsZero() {
		m.epoch = time.Now()
	}
	return time.Since(m.epoch)
}

func (m *cpuMeter) start(ctx context.Context, budget time.Duration) {
	m.ctx, m.budget, m.fresh, m.paused = ctx, budget, false, false
	m.deadline = m.now() + budget
}

// renew starts a fresh budget from the next reading.
func (m *cpuMeter) renew() {
	m.fresh, m.paused = true, false
}

// read returns the time, setting the deadline of a fresh budget from it.
func (m *cpuMeter) read() time.Duration {
	now := m.now()
	if m.fresh {
		m.deadline, m.fresh = now+m.budget, false
	}
	return now
}

// check returns why the call must end, or nil.
func (m *cpuMeter) check(i *wzInstance) error {
	if err := m.ctx.Err(); err != nil {
		return err
	}
	if m.spent() {
		return &LimitError{Limit: "cpu", Max: i.cpu.Milliseconds(), What: "guest"}
	}
	return nil
}

// spent reports whether the budget is used up.
func (m *cpuMeter) spent() bool { return !m.paused && m.read() > m.deadline }

// pause stops the budget's clock and returns the function that restarts it.
func (m *cpuMeter) pause() func() {
	if m.paused {
		return func() {}
	}
	m.paused, m.pausedAt = true, m.read()
	return func() {
		m.deadline += m.now() - m.pausedAt
		m.paused = false
	}
}

// RestartCPU implements engine.CPUBudget.
func (i *wzInstance) RestartCPU() { i.meter.start(i.meter.ctx, i.cpu) }

// RenewCPU implements engine.CPUBudget.
func (i *wzInstance) RenewCPU() { i.meter.renew() }

// PauseCPU implements engine.CPUBudget.
func (i *wzInstance) PauseCPU() func() { return i.meter.pause() }

// wzTick is the host function metered modules call every meter.Interval
// loop iterations: a safe point for the Go runtime, and where a guest over
// its budget is stopped.
func wzTick(ctx context.Context, mod api.Module, _ []uint64) {
	i, _ := engine.Caller(ctx).(*wzInstance)
	if i == nil {
		panic(sys.NewExitError(exitAbort))
	}
	if err := i.meter.check(i); err != nil {
		i.abortWith(ctx, mod, err)
	}
}

// MemorySize is the instance's linear memory in bytes (what parking it
// holds).
func (i *wzInstance) MemorySize() uint64 {
	if i.closed || i.mod == nil || i.mod.Memory() == nil {
		return 0
	}
	return uint64(i.mod.Memory().Size())
}

// The instance's state between export calls, for the host's snapshots and
// resets (engine.Snapshotter, engine.BaseMapped).

// Memory implements engine.Snapshotter.
func (i *wzInstance) Memory() []byte {
	m := i.mod.Memory()
	if m == nil {
		return nil
	}
	b, _ := m.Read(0, m.Size())
	return b
}

// GrowMemory implements engine.Snapshotter.
func (i *wzInstance) GrowMemory(size uint64) error {
	m := i.mod.Memory()
	if m == nil {
		return fmt.Errorf("%w: the instance has no memory", engine.ErrSnapshot)
	}
	cur := uint64(m.Size())
	const page = 1 << 16
	if size < cur || size%page != 0 {
		return fmt.Errorf("%w: memory of %d bytes cannot become %d", engine.ErrSnapshot, cur, size)
	}
	if size > cur {
		if _, ok := m.Grow(uint32((size - cur) / page)); !ok {
			return fmt.Errorf("%w: memory cannot grow to %d bytes", engine.ErrSnapshot, size)
		}
	}
	return nil
}

// mutableGlobals are the module's mutable globals, as the metering
// rewrite exports them.
func (i *wzInstance) mutableGlobals() []api.MutableGlobal {
	if i.globs == nil {
		i.globs = []api.MutableGlobal{}
		for k := 0; ; k++ {
			g, ok := i.mod.ExportedGlobal(meter.GlobalPrefix + strconv.Itoa(k)).(api.MutableGlobal)
			if !ok {
				break
			}
			i.globs = append(i.globs, g)
		}
	}
	return i.globs
}

// Globals implements engine.Snapshotter.
func (i *wzInstance) Globals() []uint64 {
	gs := i.mutableGlobals()
	v := make([]uint64, len(gs))
	for k, g := range gs {
		v[k] = g.Get()
	}
	return v
}

// Restorable implements engine.Snapshotter: memory and globals are the
// instance's whole state until it is closed. (The guest cannot change its
// file descriptors, which would live outside them: internal/wasip1 keeps
// no descriptor table.)
func (i *wzInstance) Restorable() bool { return !i.closed }

// OwnChunks implements engine.BaseMapped.
func (i *wzInstance) OwnChunks(b *engine.BaseImage) ([]uint32, bool) {
	return linmem.OwnChunks(i.gmem, b.File(), engine.ChunkSize)
}

// ResetToBase implements engine.BaseMapped.
func (i *wzInstance) ResetToBase(b *engine.BaseImage) bool {
	return linmem.Reset(i.gmem, b.File(), b.Bytes())
}

// SetGlobals implements engine.Snapshotter.
func (i *wzInstance) SetGlobals(v []uint64) error {
	gs := i.mutableGlobals()
	if len(v) != len(gs) {
		return fmt.Errorf("%w: %d globals, the module has %d", engine.ErrSnapshot, len(v), len(gs))
	}
	for k, g := range gs {
		g.Set(v[k])
	}
	return nil
}
