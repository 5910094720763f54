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

func (m *wzModule) canSnapshot() bool { return m.snapshots }

func (m *wzModule) Close(ctx context.Context) error { return m.cm.Close(ctx) }

type instKey struct{}

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
	gmem   guestMemory // the linear memory, as the allocator made it
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
		inst.gmem = newGuestMemory(capBytes, min(maxBytes, inst.memMax), &inst.memHit)
		return inst.gmem
	}))
	ictx = context.WithValue(ictx, instKey{}, inst)
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
	for _, name := range initExports {
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
	cctx := context.WithValue(ctx, instKey{}, i)
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
	i, _ := ctx.Value(instKey{}).(*wzInstance)
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
		i, _ := ctx.Value(instKey{}).(*wzInstance)
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
	i, _ := ctx.Value(instKey{}).(*wzInstance)
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

// cpuClock is the CPU budget of an instance on any engine, which
// PauseCPU and RestartCPU find under instKey in a host call's context.
type cpuClock interface {
	restartCPU()
	// renewCPU is restartCPU for the replay of a recorded activation,
	// whose host calls are answered from the log: the budget may start
	// at the next reading of its clock (cpuMeter).
	renewCPU()
	pauseCPU() (resume func())
}

func (i *wzInstance) restartCPU()      { i.meter.start(i.meter.ctx, i.cpu) }
func (i *wzInstance) renewCPU()        { i.meter.renew() }
func (i *wzInstance) pauseCPU() func() { return i.meter.pause() }

// CPUClock is the CPU budget of an instance whose engine keeps its own
// clock (a source engine's worker, say). An engine puts it in the context
// it passes to its OpHandler with WithCPUClock, and the host restarts and
// pauses it as it does a WebAssembly guest's: a replay gives each
// recorded activation a fresh budget, and so does the live work after it.
type CPUClock struct {
	Restart func()
	// Pause, if set, stops the clock and returns what starts it again.
	Pause func() (resume func())
}

// WithCPUClock returns ctx carrying c for RestartCPU and PauseCPU.
func WithCPUClock(ctx context.Context, c CPUClock) context.Context {
	return context.WithValue(ctx, instKey{}, engineClock(c))
}

type engineClock CPUClock

func (c engineClock) restartCPU() {
	if c.Restart != nil {
		c.Restart()
	}
}

func (c engineClock) renewCPU() { c.restartCPU() }

func (c engineClock) pauseCPU() func() {
	if c.Pause != nil {
		return c.Pause()
	}
	return func() {}
}

// RestartCPU gives the guest whose host call ctx belongs to a fresh CPU
// budget for the rest of its call.
func RestartCPU(ctx context.Context) {
	if c := clockOf(ctx); c != nil {
		c.restartCPU()
	}
}

// clockOf is the CPU budget in ctx, or nil.
func clockOf(ctx context.Context) cpuClock {
	if ctx == nil {
		return nil
	}
	c, _ := ctx.Value(instKey{}).(cpuClock)
	return c
}

// PauseCPU stops the CPU-time clock of the guest whose host call ctx
// belongs to, while the call waits on something slow outside the guest (a
// capability, say). It returns the function that restarts the clock.
func PauseCPU(ctx context.Context) (resume func()) {
	if c, _ := ctx.Value(instKey{}).(cpuClock); c != nil {
		return c.pauseCPU()
	}
	return func() {}
}

// wzTick is the host function metered modules call every meter.Interval
// loop iterations: a safe point for the Go runtime, and where a guest over
// its budget is stopped.
func wzTick(ctx context.Context, mod api.Module, _ []uint64) {
	i, _ := ctx.Value(instKey{}).(*wzInstance)
	if i == nil {
		panic(sys.NewExitError(exitAbort))
	}
	if err := i.meter.check(i); err != nil {
		i.abortWith(ctx, mod, err)
	}
}

// guestMemory is a guest's linear memory: mapped (memory_linux.go) or
// Go-allocated (limitedMemory).
type guestMemory = experimental.LinearMemory

// limitedMemory backs a linear memory and refuses to grow past a limit,
// noting that it did so the failure can be reported as the memory limit
// rather than as whatever the guest does when memory.grow fails.
type limitedMemory struct {
	buf   []byte
	limit uint64
	hit   *atomic.Bool
}

// newLimitedMemory reserves only what wazero asks for: reserving more up
// front (to spare copies when the guest grows) measured slower, since Go
// zeroes a large allocation it reuses (BenchmarkInstantiate: 16 MiB +6%,
// 64 MiB +70%).
func newLimitedMemory(capBytes, limit uint64, hit *atomic.Bool) *limitedMemory {
	return &limitedMemory{buf: make([]byte, 0, min(capBytes, limit)), limit: limit, hit: hit}
}

func (m *limitedMemory) Reallocate(size uint64) []byte {
	if size > m.limit {
		m.hit.Store(true)
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	c := min(max(size, 2*uint64(cap(m.buf))), m.limit)
	nb := make([]byte, size, c)
	copy(nb, m.buf)
	m.buf = nb
	return nb
}

func (m *limitedMemory) Free() { m.buf = nil }

// MemorySize is the instance's linear memory in bytes (what parking it
// holds).
func (i *wzInstance) MemorySize() uint64 {
	if i.closed || i.mod == nil || i.mod.Memory() == nil {
		return 0
	}
	return uint64(i.mod.Memory().Size())
}

// The instance's state between export calls, for snapshots (snapshot.go).

func (i *wzInstance) memory() []byte {
	m := i.mod.Memory()
	if m == nil {
		return nil
	}
	b, _ := m.Read(0, m.Size())
	return b
}

func (i *wzInstance) growMemory(size uint64) error {
	m := i.mod.Memory()
	if m == nil {
		return fmt.Errorf("%w: the instance has no memory", errSnapshot)
	}
	cur := uint64(m.Size())
	const page = 1 << 16
	if size < cur || size%page != 0 {
		return fmt.Errorf("%w: memory of %d bytes cannot become %d", errSnapshot, cur, size)
	}
	if size > cur {
		if _, ok := m.Grow(uint32((size - cur) / page)); !ok {
			return fmt.Errorf("%w: memory cannot grow to %d bytes", errSnapshot, size)
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

func (i *wzInstance) globals() []uint64 {
	gs := i.mutableGlobals()
	v := make([]uint64, len(gs))
	for k, g := range gs {
		v[k] = g.Get()
	}
	return v
}

// outsideChanged reports whether the instance can no longer be restored
// from memory and globals alone: it is closed. (The guest cannot change
// its file descriptors, which would live outside them: internal/wasip1
// refuses fd_close and fd_renumber.)
func (i *wzInstance) outsideChanged() bool { return i.closed }

// ownChunks implements baseMapped.
func (i *wzInstance) ownChunks(b *baseImage) ([]uint32, bool) { return ownChunks(i.gmem, b.file) }

// resetMapped implements baseMapped.
func (i *wzInstance) resetMapped(b *baseImage) bool { return resetMapped(i.gmem, b.file, b.mem) }

func (i *wzInstance) setGlobals(v []uint64) error {
	gs := i.mutableGlobals()
	if len(v) != len(gs) {
		return fmt.Errorf("%w: %d globals, the module has %d", errSnapshot, len(v), len(gs))
	}
	for k, g := range gs {
		g.Set(v[k])
	}
	return nil
}
