package host

import (
	"context"
	"io"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// Engine runs WebAssembly modules for the kernel. The kernel is the same on
// every engine: an engine only compiles, instantiates, calls exports, and
// routes the guest's sandflow.op calls to an OpHandler.
//
// An Engine and its CompiledModules are safe for concurrent use; an
// Instance is used by one goroutine at a time (it may move between
// goroutines between calls).
type Engine interface {
	// Name identifies the engine and its version, such as "wazero/v1.12.0";
	// it keys compiled-artifact caches.
	Name() string
	// Compile validates and compiles module bytes.
	Compile(ctx context.Context, wasm []byte) (CompiledModule, error)
	Close(ctx context.Context) error
}

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

// initExports are the exports an engine's Instantiate calls, in order,
// those the module has.
var initExports = [...]string{abi.InitializeExport, abi.PrepareExport}

// CompiledModule is an immutable compiled module that spawns instances.
type CompiledModule interface {
	// Instantiate makes a new instance and runs its _initialize and then
	// its sandflow_prepare export, those it has, within cfg.CPULimit.
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

// InstanceConfig is what an instance sees of the world.
type InstanceConfig struct {
	Clock  GuestClock
	Random io.Reader
	// Stdout and Stderr receive the guest's fd_write to 1 and 2.
	Stdout, Stderr io.Writer
	// MemoryLimit bounds the linear memory in bytes.
	MemoryLimit uint64
	// CPULimit bounds each Call and the initialisation.
	CPULimit time.Duration
	Ops      OpHandler
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
	// A non-nil error ends the instance: Call returns that error.
	Op(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error)
}
