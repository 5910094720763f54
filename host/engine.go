package host

import (
	"context"

	"github.com/sandflow/sandflow/host/engine"
)

// The engine interfaces live in package host/engine; these names stay for
// the programs written against them.
type (
	// Engine runs modules for the kernel.
	//
	// Deprecated: use engine.Engine.
	Engine = engine.Engine
	// CompiledModule is an immutable compiled module that spawns instances.
	//
	// Deprecated: use engine.CompiledModule.
	CompiledModule = engine.CompiledModule
	// Instance is one instantiated guest.
	//
	// Deprecated: use engine.Instance.
	Instance = engine.Instance
	// InstanceConfig is what an instance sees of the world.
	//
	// Deprecated: use engine.InstanceConfig.
	InstanceConfig = engine.InstanceConfig
	// GuestClock supplies the time a guest sees through WASI.
	//
	// Deprecated: use engine.GuestClock.
	GuestClock = engine.GuestClock
	// OpHandler serves a guest's sandflow.op calls.
	//
	// Deprecated: use engine.OpHandler.
	OpHandler = engine.OpHandler
)

// SourceEngine is an engine whose modules are programs in another form
// than WebAssembly (JavaScript source, say). The host skips its wasm checks
// for them and asks the engine to check a module at upload instead of
// probing an instance.
type SourceEngine interface {
	Engine
	// Check refuses, with a *PluginError, a compiled module a run could
	// not start, or one that does not provide the tool its manifest
	// describes.
	Check(ctx context.Context, cm CompiledModule, m Manifest, l Limits) error
}

// cpuClock is the CPU budget of an instance on any engine, as the kernel
// uses it; clockOf finds it in a host call's context.
type cpuClock = engine.CPUBudget

// clockOf is the CPU budget in ctx, or nil.
func clockOf(ctx context.Context) cpuClock { return engine.BudgetOf(ctx) }

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

// WithCPUClock returns ctx carrying c for RestartCPU and PauseCPU. (An
// engine may instead implement engine.CPUBudget and use engine.WithCaller.)
func WithCPUClock(ctx context.Context, c CPUClock) context.Context {
	return engine.WithCaller(ctx, engineClock(c))
}

type engineClock CPUClock

func (c engineClock) RestartCPU() {
	if c.Restart != nil {
		c.Restart()
	}
}

func (c engineClock) RenewCPU() { c.RestartCPU() }

func (c engineClock) PauseCPU() func() {
	if c.Pause != nil {
		return c.Pause()
	}
	return func() {}
}

// RestartCPU gives the guest whose host call ctx belongs to a fresh CPU
// budget for the rest of its call.
func RestartCPU(ctx context.Context) {
	if b := engine.BudgetOf(ctx); b != nil {
		b.RestartCPU()
	}
}

// PauseCPU stops the CPU-time clock of the guest whose host call ctx
// belongs to, while the call waits on something slow outside the guest (a
// capability, say). It returns the function that restarts the clock.
func PauseCPU(ctx context.Context) (resume func()) {
	if b := engine.BudgetOf(ctx); b != nil {
		return b.PauseCPU()
	}
	return func() {}
}
