// Package engine defines what the host asks of a WebAssembly engine (or
// of any engine that runs guests for it, such as the JavaScript one): the
// Engine, CompiledModule and Instance interfaces, what an instance sees of
// the world (InstanceConfig), the errors an engine reports, and the small
// optional interfaces through which the host pools, resets and snapshots
// instances.
//
// The engines are in subpackages: wazero (pure Go, the default) and
// wasmtime (cgo). enginetest is the conformance suite every engine runs.
//
// An Engine and its CompiledModules are safe for concurrent use; an
// Instance is used by one goroutine at a time (it may move between
// goroutines between calls).
package engine

import (
	"context"
	"io"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// Engine runs modules for the kernel. The kernel is the same on every
// engine: an engine only compiles, instantiates, calls exports, and
// routes the guest's sandflow.op calls to an OpHandler.
type Engine interface {
	// Name identifies the engine and its version, such as "wazero/v1.12.0";
	// it keys compiled-artifact caches.
	Name() string
	// Compile validates and compiles module bytes. A module it refuses
	// is a *PluginError.
	Compile(ctx context.Context, wasm []byte) (CompiledModule, error)
	Close(ctx context.Context) error
}

// CompiledModule is an immutable compiled module that spawns instances.
type CompiledModule interface {
	// Instantiate makes a new instance and runs its InitExports, those it
	// has, in order, within cfg.CPULimit.
	Instantiate(ctx context.Context, cfg InstanceConfig) (Instance, error)
	Close(ctx context.Context) error
}

// Instance is one instantiated guest.
type Instance interface {
	// Call calls an exported () -> i32 function within the CPU limit.
	// Errors: a *LimitError (cpu or memory), a *GuestError (trap, exit, ABI
	// violation), an error an OpHandler aborted the instance with, or ctx's
	// error. After an error the instance is closed and must not be reused.
	Call(ctx context.Context, export string) (int32, error)
	Close(ctx context.Context) error
}

// InitExports are the exports Instantiate calls, in order, those the
// module has: the WASI reactor's _initialize, then sandflow_prepare.
func InitExports() [2]string { return [...]string{abi.InitializeExport, abi.PrepareExport} }

// InstanceConfig is what an instance sees of the world.
type InstanceConfig struct {
	Clock  GuestClock
	Random io.Reader
	// Stdout and Stderr receive the guest's fd_write to 1 and 2; nil
	// drops it.
	Stdout, Stderr io.Writer
	// MemoryLimit bounds the linear memory in bytes.
	MemoryLimit uint64
	// CPULimit bounds each Call and the initialisation.
	CPULimit time.Duration
	Ops      OpHandler
	// Name is the tool the instance runs, for the engine's diagnostics
	// (a JavaScript tool's script is named NAME.js in its stacks); "" when
	// unknown. The guest does not see it.
	Name string
}

// GuestClock supplies the time a guest sees through WASI.
type GuestClock interface {
	// Now returns the current time in unix nanoseconds; both the wall and
	// the monotonic WASI clocks read it.
	Now() int64
	// Sleep is poll_oneoff's clock wait: it must return at once, advancing
	// the clock by ns. Nothing in a sandbox really sleeps.
	Sleep(ns int64)
}

// OpHandler serves a guest's sandflow.op calls.
type OpHandler interface {
	// Op performs one op. name and payload alias guest memory and are valid
	// only during the call. The returned body is valid until the next call.
	// A non-nil error ends the instance: Call returns that error. ctx
	// carries the instance's CPU budget (BudgetOf).
	Op(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error)
}
