package wazero

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/cpumeter"
	"github.com/sandflow/sandflow/internal/linmem"
	"github.com/sandflow/sandflow/internal/wasip1"
)

// wzInstance is one wazero module instance and what its host calls need.
type wzInstance struct {
	mod    api.Module
	ops    engine.OpHandler
	cpu    time.Duration
	memHit atomic.Bool
	memMax uint64
	held   []byte // a response body too big for the guest's buffer
	abort  error  // why an OpHandler ended the instance
	fns    map[string]api.Function
	closed bool
	gmem   linmem.Memory // the linear memory, as the allocator made it
	meter  cpumeter.Meter
	globs  []api.MutableGlobal // see mutableGlobals
	sys    wasip1.System
	wmem   wzMemory
}

// moduleConfig is every instance's: the guest's clocks, random bytes and
// output are the WASI module's (defineWASI), which reads them from the
// instance, so nothing in it differs between instances, and it is made
// once. wazero's own random source is set, to one that is never read:
// left unset, wazero seeds a math/rand source for every instance, which
// was a sixth of instantiating a small guest.
var moduleConfig = wazero.NewModuleConfig().
	WithName("").
	WithStartFunctions(). // _initialize runs in Instantiate, under the CPU limit
	WithRandSource(unusedRandom{})

// unusedRandom is wazero's random source, which no guest reaches: the
// guest's random_get is internal/wasip1's.
type unusedRandom struct{}

func (unusedRandom) Read([]byte) (int, error) {
	return 0, errors.New("wazero's random source is not the guest's: random_get is served by wasip1")
}

func (m *wzModule) Instantiate(ctx context.Context, cfg engine.InstanceConfig) (_ engine.Instance, err error) {
	inst := &wzInstance{
		ops: cfg.Ops, cpu: cfg.CPULimit, memMax: cfg.MemoryLimit, fns: map[string]api.Function{},
		sys: wasip1.System{Clock: cfg.Clock, Random: cfg.Random, Stdout: cfg.Stdout, Stderr: cfg.Stderr},
	}
	ictx := experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(capBytes, maxBytes uint64) experimental.LinearMemory {
		inst.gmem = linmem.New(capBytes, min(maxBytes, inst.memMax), &inst.memHit)
		return inst.gmem
	}))
	ictx = engine.WithCaller(ictx, inst)
	// A start function runs during instantiation, under the budget too.
	inst.meter.Start(ctx, inst.cpu)
	defer func() {
		// wazero indexes the buffer the allocator gave for the initial
		// memory; a refused one (over the limit) panics there.
		if r := recover(); r != nil {
			if !inst.memHit.Load() {
				panic(r)
			}
			err = &engine.LimitError{Limit: "memory", Max: int64(inst.memMax), What: "instantiating guest"}
		}
	}()
	mod, err := m.e.rt.InstantiateModule(ictx, m.cm, moduleConfig)
	if err != nil {
		if inst.memHit.Load() {
			return nil, &engine.LimitError{Limit: "memory", Max: int64(inst.memMax), What: "instantiating guest"}
		}
		return nil, &engine.GuestError{Message: "instantiate: " + err.Error()}
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

// Call implements engine.Instance.
func (i *wzInstance) Call(ctx context.Context, export string) (int32, error) {
	if i.closed {
		return 0, &engine.GuestError{Message: "instance is closed"}
	}
	var res int32
	err := i.callResult(ctx, export, &res)
	return res, err
}

func (i *wzInstance) callResult(ctx context.Context, export string, res *int32) error {
	f := i.fn(export)
	if f == nil {
		i.Close(ctx)
		return &engine.GuestError{Message: "module does not export " + export}
	}
	cctx := engine.WithCaller(ctx, i)
	i.held = nil
	i.meter.Start(ctx, i.cpu)
	out, err := f.Call(cctx)
	if err != nil {
		i.closed = true
		return i.classify(ctx, err)
	}
	if res != nil {
		if len(out) != 1 {
			i.Close(ctx)
			return &engine.GuestError{Message: export + " must return one i32"}
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
		return &engine.LimitError{Limit: "memory", Max: int64(i.memMax), What: "guest"}
	}
	var ee *sys.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		return &engine.GuestError{ExitCode: &code, Message: "proc_exit"}
	}
	return &engine.GuestError{Message: err.Error()}
}

// Close implements engine.Instance.
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

// checkCPU returns why the running call must end, or nil: its context is
// done, or its CPU budget spent.
func (i *wzInstance) checkCPU() error {
	if err := i.meter.Context().Err(); err != nil {
		return err
	}
	if i.meter.Spent() {
		return &engine.LimitError{Limit: "cpu", Max: i.cpu.Milliseconds(), What: "guest"}
	}
	return nil
}

// RestartCPU implements engine.CPUBudget.
func (i *wzInstance) RestartCPU() { i.meter.Restart() }

// RenewCPU implements engine.CPUBudget.
func (i *wzInstance) RenewCPU() { i.meter.Renew() }

// PauseCPU implements engine.CPUBudget.
func (i *wzInstance) PauseCPU() func() { return i.meter.Pause() }
