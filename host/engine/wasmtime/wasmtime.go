//go:build cgo

package wasmtime

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/cgo"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/compilecache"
	"github.com/sandflow/sandflow/internal/cpumeter"
	"github.com/sandflow/sandflow/internal/wasip1"
)

// epochTick is how often a wasmtime engine advances its epoch while a
// guest runs; at each tick a running guest's CPU budget and context are
// checked (sandflowWasmtimeEpoch).
const epochTick = time.Millisecond

// wasmtimeCodegen names the wasmtime configuration that affects the code
// it generates; it keys the compiled-artifact cache with the version.
const wasmtimeCodegen = "epoch-interruption,cranelift-speed,no-threads,no-memory64"

// Engine runs guests on wasmtime, through wasmtime-go (cgo). It
// implements engine.Engine.
//
// Guests are not rewritten as on wazero (internal/meter): wasmtime's epoch
// interruption stops them. A goroutine advances the engine's epoch every
// millisecond while any guest runs, and each running store calls back into
// the host at every tick, where its CPU budget and context are checked.
// WASI is the host's own (internal/wasip1), so that clocks, random bytes
// and sleeps are the InstanceConfig's, as on wazero.
type Engine struct {
	eng      *wasmtime.Engine
	linker   *wasmtime.Linker
	name     string
	cacheDir string

	running atomic.Int64 // calls in guest code; the epoch advances while > 0
	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once

	cacheHits, cacheMisses, cacheCorrupt atomic.Int64
}

// New makes a wasmtime engine. cacheDir, when not empty,
// holds compiled artifacts across processes, keyed by module, wasmtime
// version and configuration. The artifacts are native code that is loaded
// without verification, so cacheDir must be writable only by the host.
func New(ctx context.Context, cacheDir string) (*Engine, error) {
	if cacheDir != "" {
		if err := os.MkdirAll(cacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("wasmtime compilation cache: %w", err)
		}
	}
	cfg := wasmtime.NewConfig()
	cfg.SetEpochInterruption(true)
	// Shared and 64-bit memories would escape the store's memory limit as
	// it is set here; wazero has neither.
	cfg.SetWasmThreads(false)
	cfg.SetWasmMemory64(false)
	eng := wasmtime.NewEngineWithConfig(cfg)
	e := &Engine{
		eng: eng, linker: wasmtime.NewLinker(eng), name: "wasmtime/" + wasmtimeVersion(), cacheDir: cacheDir,
		wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{}),
	}
	if err := e.define(); err != nil {
		e.linker.Close()
		eng.Close()
		return nil, err
	}
	go e.tick()
	return e, nil
}

func wasmtimeVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/bytecodealliance/wasmtime-go/v39" {
				return d.Version
			}
		}
	}
	return "v39" // a test binary has no module versions
}

// define puts the host functions in the engine's linker: sandflow.op,
// sandflow.read and WASI preview1 (see wtInstance.hostCall).
func (e *Engine) define() error {
	i32 := []wasip1.ValType{wasip1.I32}
	op := []wasip1.ValType{wasip1.I32, wasip1.I32, wasip1.I32, wasip1.I32, wasip1.I32, wasip1.I32, wasip1.I32}
	if err := defineHostFunc(e.linker, abi.ImportModule, abi.FuncOp, op, i32, wtFnOp); err != nil {
		return err
	}
	if err := defineHostFunc(e.linker, abi.ImportModule, abi.FuncRead, op[:2], i32, wtFnRead); err != nil {
		return err
	}
	for k, f := range wasip1.Funcs {
		if err := defineHostFunc(e.linker, wasip1.ModuleName, f.Name, f.Params, f.Results, wtFnWASI+k); err != nil {
			return err
		}
	}
	return checkLinker(e.eng, e.linker, abi.ImportModule, abi.FuncOp)
}

// tick advances the epoch every epochTick while a guest runs, and sleeps
// otherwise.
func (e *Engine) tick() {
	defer close(e.stopped)
	t := time.NewTicker(epochTick)
	defer t.Stop()
	for {
		if e.running.Load() == 0 {
			t.Stop()
			select {
			case <-e.wake:
			case <-e.done:
				return
			}
			t.Reset(epochTick)
			continue
		}
		select {
		case <-t.C:
			e.eng.IncrementEpoch()
		case <-e.done:
			return
		}
	}
}

func (e *Engine) enter() {
	if e.running.Add(1) == 1 {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

func (e *Engine) leave() { e.running.Add(-1) }

// Name implements engine.Engine.
func (e *Engine) Name() string { return e.name }

// Close implements engine.Engine.
func (e *Engine) Close(ctx context.Context) error {
	e.once.Do(func() {
		close(e.done)
		<-e.stopped
		// wasmtime keeps what modules and stores still use alive.
		e.linker.Close()
		e.eng.Close()
	})
	return nil
}

// cachePath is where the compiled artifact of wasm is kept.
func (e *Engine) cachePath(wasm []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s/%s\x00", e.name, wasmtimeCodegen, runtime.GOOS, runtime.GOARCH)
	mod := sha256.Sum256(wasm)
	h.Write(mod[:])
	return filepath.Join(e.cacheDir, hex.EncodeToString(h.Sum(nil))+".cwasm")
}

// Compile implements engine.Engine. With a cache directory, a compiled artifact
// is loaded from there when it is and checks out against its checksum
// (internal/compilecache); one that does not (damaged, truncated, unsealed, from
// another build) is discarded with a log line, and the module is compiled
// again and its artifact written in its place.
func (e *Engine) Compile(ctx context.Context, wasm []byte) (engine.CompiledModule, error) {
	var path string
	if e.cacheDir != "" {
		path = e.cachePath(wasm)
		if _, err := os.Stat(path); err == nil {
			b, err := compilecache.CheckEntry(path)
			var m *wasmtime.Module
			if err == nil {
				m, err = wasmtime.NewModuleDeserialize(e.eng, b)
			}
			if err == nil {
				e.cacheHits.Add(1)
				return newWtModule(e, m), nil
			}
			e.cacheCorrupt.Add(1)
			compilecache.Discard(path, err)
		}
		e.cacheMisses.Add(1)
	}
	m, err := wasmtime.NewModule(e.eng, wasm)
	if err != nil {
		return nil, &engine.PluginError{Reason: "compile", Detail: wasmtimeCause(err)}
	}
	if path != "" {
		// The cache is best effort: a module that cannot be cached still runs.
		_ = writeArtifact(path, m)
	}
	return newWtModule(e, m), nil
}

// writeArtifact writes m's serialized form to path atomically (a reader
// sees the whole artifact or none), then its checksum beside it.
func writeArtifact(path string, m *wasmtime.Module) error {
	b, err := m.Serialize()
	if err != nil {
		return err
	}
	os.Remove(path + compilecache.SumSuffix) // a sidecar is written only for a whole entry
	if err := compilecache.WriteFileAtomic(path, b); err != nil {
		return err
	}
	return compilecache.WriteFileAtomic(path+compilecache.SumSuffix, compilecache.Sum(b))
}

type wtModule struct {
	e *Engine
	m *wasmtime.Module
	// minMemory is the initial size in bytes of the module's memory, to
	// tell a memory too big to instantiate from other failures.
	minMemory uint64
}

func newWtModule(e *Engine, m *wasmtime.Module) *wtModule {
	wm := &wtModule{e: e, m: m}
	for _, ex := range m.Exports() {
		if mt := ex.Type().MemoryType(); mt != nil {
			wm.minMemory = max(wm.minMemory, mt.Minimum()*65536)
		}
	}
	for _, im := range m.Imports() {
		if mt := im.Type().MemoryType(); mt != nil {
			wm.minMemory = max(wm.minMemory, mt.Minimum()*65536)
		}
	}
	return wm
}

func (m *wtModule) Close(ctx context.Context) error {
	m.m.Close()
	return nil
}

// wtInstance is one wasmtime instance in its own store, and what its host
// calls need.
type wtInstance struct {
	e      *Engine
	store  *wasmtime.Store
	key    uintptr // the store's context pointer, in wtStores
	inst   *wasmtime.Instance
	mem    *wasmtime.Memory
	handle cgo.Handle
	ops    engine.OpHandler
	sys    wasip1.System
	wmem   wtMemory
	cpu    time.Duration
	memMax uint64
	fns    map[string]*wasmtime.Func
	closed bool

	// During a call:
	ctx   context.Context // the call's, with the instance as its engine.Caller
	meter cpumeter.Meter
	held  []byte // a response body too big for the guest's buffer
	abort error  // why the host ended the guest: an OpHandler's error, an ABI violation, the CPU limit, ctx
	exit  *uint32
}

// Poolable implements engine.Poolable.
func (*wtModule) Poolable() {}

// Instantiate implements engine.CompiledModule.
func (m *wtModule) Instantiate(ctx context.Context, cfg engine.InstanceConfig) (engine.Instance, error) {
	i := &wtInstance{
		e: m.e, ops: cfg.Ops, cpu: cfg.CPULimit, memMax: cfg.MemoryLimit, fns: map[string]*wasmtime.Func{},
		sys: wasip1.System{Clock: cfg.Clock, Random: cfg.Random, Stdout: cfg.Stdout, Stderr: cfg.Stderr},
	}
	i.store = wasmtime.NewStore(m.e.eng)
	i.key = storeContext(i.store)
	wtStores.Store(i.key, i)
	// One memory (the limit is per memory), and tables bounded too: they
	// live outside the linear memory.
	i.store.Limiter(int64(min(i.memMax, 1<<62)), 1<<20, -1, -1, 1)
	i.handle = cgo.NewHandle(i)
	if err := watchEpochs(i.store, i.handle); err != nil {
		i.Close(ctx)
		return nil, err
	}
	// A start function runs during instantiation, under the budget too.
	var inst *wasmtime.Instance
	err := i.run(ctx, func() (err error) {
		inst, err = m.e.linker.Instantiate(i.store, m.m)
		return err
	})
	if err != nil {
		defer i.Close(ctx)
		if i.abort != nil || i.exit != nil {
			return nil, i.classify(err)
		}
		if m.minMemory > i.memMax {
			return nil, &engine.LimitError{Limit: "memory", Max: int64(i.memMax), What: "instantiating guest"}
		}
		return nil, &engine.GuestError{Message: "instantiate: " + i.message(err)}
	}
	i.inst = inst
	if ex := inst.GetExport(i.store, "memory"); ex != nil {
		i.mem = ex.Memory()
	}
	for _, name := range engine.InitExports() {
		if i.fn(name) != nil {
			if err := i.callResult(ctx, name, nil); err != nil {
				return nil, err
			}
		}
	}
	return i, nil
}

func (i *wtInstance) fn(name string) *wasmtime.Func {
	f, ok := i.fns[name]
	if !ok {
		f = i.inst.GetFunc(i.store, name)
		i.fns[name] = f
	}
	return f
}

// Call implements engine.Instance.
func (i *wtInstance) Call(ctx context.Context, export string) (int32, error) {
	if i.closed {
		return 0, &engine.GuestError{Message: "instance is closed"}
	}
	var res int32
	err := i.callResult(ctx, export, &res)
	return res, err
}

// run runs guest code (fn) within the CPU budget: the epoch deadline is
// one tick away, and at each tick sandflowWasmtimeEpoch checks the budget
// and ctx. A Go panic in a host function is recovered there and ends the
// guest as an error (as on wazero); one in wasmtime-go itself is recovered
// here.
func (i *wtInstance) run(ctx context.Context, fn func() error) (err error) {
	i.ctx = engine.WithCaller(ctx, i)
	i.held, i.abort, i.exit = nil, nil, nil
	i.meter.Start(ctx, i.cpu)
	i.store.SetEpochDeadline(1)
	i.e.enter()
	defer func() {
		i.e.leave()
		i.ctx = nil
		if r := recover(); r != nil {
			err = fmt.Errorf("host function panicked: %v", r)
		}
	}()
	return fn()
}

func (i *wtInstance) callResult(ctx context.Context, export string, res *int32) error {
	f := i.fn(export)
	if f == nil {
		i.Close(ctx)
		return &engine.GuestError{Message: "module does not export " + export}
	}
	var out any
	err := i.run(ctx, func() (err error) {
		out, err = f.Call(i.store)
		return err
	})
	if err != nil {
		err = i.classify(err)
		i.Close(ctx)
		return err
	}
	if res != nil {
		v, ok := out.(int32)
		if !ok {
			i.Close(ctx)
			return &engine.GuestError{Message: export + " must return one i32"}
		}
		*res = v
	}
	return nil
}

// checkCPU is called at every epoch tick while the guest runs; it returns
// true, with the reason in abort, when the guest must stop.
func (i *wtInstance) checkCPU() bool {
	m := &i.meter
	if err := m.Context().Err(); err != nil {
		i.fail(err)
		return true
	}
	if m.Spent() {
		i.fail(&engine.LimitError{Limit: "cpu", Max: i.cpu.Milliseconds(), What: "guest"})
		return true
	}
	return false
}

// RestartCPU implements engine.CPUBudget.
func (i *wtInstance) RestartCPU() { i.meter.Restart() }

// RenewCPU implements engine.CPUBudget.
func (i *wtInstance) RenewCPU() { i.meter.Renew() }

// PauseCPU implements engine.CPUBudget.
func (i *wtInstance) PauseCPU() func() { return i.meter.Pause() }

// memSlack is how close to the memory limit a failed guest's memory must
// be for the failure to count as the memory limit; see memoryHit.
const memSlack = 4<<20 + 64<<10

// memoryHit tells whether a failed call probably failed for the memory
// limit. wasmtime's store limiter makes memory.grow return -1 past the
// limit, as on wazero, but does not tell the host it did; the guest then
// traps or exits (the Go runtime: "out of memory", exit 2). So a failure
// counts as the memory limit when the memory is within one growth step of
// the limit: a page for a module growing by pages, a 4 MiB heap arena for
// the Go runtime (slack at most an eighth of the limit, so that a small
// limit does not count every trap). A guest that asks for one huge block
// far below the limit fails as a trap or exit instead.
func (i *wtInstance) memoryHit() bool {
	if i.mem == nil || i.store == nil || (i.exit != nil && *i.exit == 0) {
		return false
	}
	size := uint64(i.mem.DataSize(i.store))
	slack := min(uint64(memSlack), i.memMax/8)
	return size+max(slack, 65536) > i.memMax
}

func (i *wtInstance) classify(err error) error {
	if i.abort != nil {
		return i.abort
	}
	if i.memoryHit() {
		return &engine.LimitError{Limit: "memory", Max: int64(i.memMax), What: "guest"}
	}
	if i.exit != nil {
		code := *i.exit
		return &engine.GuestError{ExitCode: &code, Message: "proc_exit"}
	}
	return &engine.GuestError{Message: i.message(err)}
}

// wasmtimeCause is the cause of a wasmtime error: without the guest's
// backtrace that leads it ("error while executing at wasm backtrace: ...
// Caused by:") and without the host's native one that ends it when
// RUST_BACKTRACE is set ("Stack backtrace:").
func wasmtimeCause(err error) string {
	cause := err.Error()
	if k := strings.Index(cause, "Caused by:"); k >= 0 {
		cause = cause[k+len("Caused by:"):]
	}
	if k := strings.Index(cause, "Stack backtrace:"); k >= 0 {
		cause = cause[:k]
	}
	return strings.TrimSpace(cause)
}

// message is the cause of a trap or error, then the guest's stack (as
// wazero reports it).
func (i *wtInstance) message(err error) string {
	cause := wasmtimeCause(err)
	var t *wasmtime.Trap
	if !errors.As(err, &t) {
		return cause
	}
	var b strings.Builder
	b.WriteString(cause)
	for n, f := range t.Frames() {
		if n == 0 {
			b.WriteString("\nwasm stack trace:")
		}
		if n == 32 {
			b.WriteString("\n\t...")
			break
		}
		if name := f.FuncName(); name != nil {
			fmt.Fprintf(&b, "\n\t%s", *name)
		} else {
			fmt.Fprintf(&b, "\n\tfunc[%d]", f.FuncIndex())
		}
	}
	return b.String()
}

// Close implements engine.Instance.
func (i *wtInstance) Close(ctx context.Context) error {
	if i.closed {
		return nil
	}
	i.closed = true
	wtStores.Delete(i.key)
	i.store.Close()
	i.handle.Delete()
	i.fns, i.inst, i.mem = nil, nil, nil
	return nil
}

// fail notes why the host ends the running guest; the host function then
// traps, which unwinds the guest, and Call returns err.
func (i *wtInstance) fail(err error) {
	if i.abort == nil {
		i.abort = err
	}
}

// span returns mem[ptr:ptr+n], or false when it is outside mem.
func span(mem []byte, ptr, n uint32) ([]byte, bool) {
	end := uint64(ptr) + uint64(n)
	if end > uint64(len(mem)) {
		return nil, false
	}
	return mem[ptr:end], true
}

func (r *wtRaw) u32() uint32     { return binary.LittleEndian.Uint32(r[:]) }
func (r *wtRaw) u64() uint64     { return binary.LittleEndian.Uint64(r[:]) }
func (r *wtRaw) setI32(v uint32) { binary.LittleEndian.PutUint64(r[:], uint64(v)) }

// hostCall runs host function fn (wtFnOp, wtFnRead, or a WASI function)
// for the guest, whose memory is mem; args holds the parameters, and the
// result goes to args[0]. It returns false when the guest must stop: the
// reason is in abort or exit.
func (i *wtInstance) hostCall(fn int, mem []byte, args []wtRaw) bool {
	switch fn {
	case wtFnOp:
		return i.op(mem, args)
	case wtFnRead:
		return i.read(mem, args)
	}
	f := &wasip1.Funcs[fn-wtFnWASI]
	var raw [16]uint64
	for k, t := range f.Params {
		if t == wasip1.I64 {
			raw[k] = args[k].u64()
		} else {
			raw[k] = uint64(args[k].u32())
		}
	}
	i.wmem.b = mem
	errno, err := f.Call(&i.sys, &i.wmem, raw[:len(f.Params)])
	i.wmem.b = nil
	if err != nil {
		var ee *wasip1.ExitError
		if errors.As(err, &ee) {
			code := ee.Code
			i.exit = &code
		} else {
			i.fail(err)
		}
		return false
	}
	if len(f.Results) > 0 {
		args[0].setI32(uint32(errno))
	}
	return true
}

// op is sandflow.op, as wzOp is on wazero.
func (i *wtInstance) op(mem []byte, args []wtRaw) bool {
	if i.ctx == nil {
		i.fail(&engine.GuestError{Message: "op outside a call"})
		return false
	}
	kind := abi.OpKind(args[0].u32())
	name, ok1 := span(mem, args[1].u32(), args[2].u32())
	payload, ok2 := span(mem, args[3].u32(), args[4].u32())
	respPtr, respCap := args[5].u32(), args[6].u32()
	if !ok1 || !ok2 {
		i.fail(&engine.GuestError{Message: fmt.Sprintf("ABI violation: %s op request outside guest memory", kind)})
		return false
	}
	i.held = nil
	body, err := i.ops.Op(i.ctx, kind, name, payload)
	if err != nil {
		i.fail(err)
		return false
	}
	if uint32(len(body)) <= respCap {
		// No guest code ran since mem was read, so it has not moved.
		dst, ok := span(mem, respPtr, uint32(len(body)))
		if !ok {
			i.fail(&engine.GuestError{Message: fmt.Sprintf("ABI violation: %s response buffer outside guest memory", kind)})
			return false
		}
		copy(dst, body)
	} else {
		i.held = body
	}
	args[0].setI32(uint32(len(body)))
	return true
}

// read is sandflow.read, as wzRead is on wazero.
func (i *wtInstance) read(mem []byte, args []wtRaw) bool {
	ptr, n := args[0].u32(), args[1].u32()
	if i.held == nil || n < uint32(len(i.held)) {
		args[0].setI32(0xffffffff) // -1
		return true
	}
	dst, ok := span(mem, ptr, uint32(len(i.held)))
	if !ok {
		i.fail(&engine.GuestError{Message: "ABI violation: read buffer outside guest memory"})
		return false
	}
	copy(dst, i.held)
	args[0].setI32(uint32(len(i.held)))
	return true
}

// wtMemory is the guest memory as internal/wasip1 sees it during one host
// call.
type wtMemory struct{ b []byte }

func (m *wtMemory) Bytes() []byte { return m.b }

// MemorySize implements engine.MemorySizer.
func (i *wtInstance) MemorySize() uint64 {
	if i.closed || i.mem == nil || i.store == nil {
		return 0
	}
	return uint64(i.mem.DataSize(i.store))
}

// CacheStats reports how often Compile loaded an artifact from the cache
// directory (hits), compiled because there was none (misses), and found
// one that did not load, and replaced it (corrupt).
func (e *Engine) CacheStats() (hits, misses, corrupt int64) {
	return e.cacheHits.Load(), e.cacheMisses.Load(), e.cacheCorrupt.Load()
}

var (
	_ engine.Engine      = (*Engine)(nil)
	_ engine.Poolable    = (*wtModule)(nil)
	_ engine.MemorySizer = (*wtInstance)(nil)
	_ engine.CPUBudget   = (*wtInstance)(nil)
)
