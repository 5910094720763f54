package host

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/sandflow/sandflow/host/engine/wazero"
)

// WazeroEngine runs guests on wazero, a WebAssembly runtime in pure Go.
//
// Deprecated: use wazero.Engine, in package host/engine/wazero.
type WazeroEngine = wazero.Engine

// NewWazeroEngine makes a wazero engine. cacheDir, when not empty, holds
// compiled artifacts across processes, keyed by module and wazero version.
//
// Deprecated: use wazero.New, in package host/engine/wazero.
func NewWazeroEngine(ctx context.Context, cacheDir string) (*WazeroEngine, error) {
	return wazero.New(ctx, cacheDir)
}

// Engine names that NewEngine knows.
const (
	EngineWazero   = "wazero"
	EngineWasmtime = "wasmtime"
)

// ErrUnknownEngine is returned by NewEngine for a name it does not know.
var ErrUnknownEngine = errors.New("unknown engine")

// newWasmtimeEngine makes a wasmtime engine; it is set by wasmtime.go,
// which is built only with cgo.
var newWasmtimeEngine func(ctx context.Context, cacheDir string) (Engine, error)

// NewEngine makes the engine called name: "wazero" (or "", the default),
// a WebAssembly runtime in pure Go, or "wasmtime", which needs a build with
// cgo. cacheDir, when not empty, keeps compiled modules across processes;
// give each engine its own.
func NewEngine(ctx context.Context, name, cacheDir string) (Engine, error) {
	if name != "" && name != EngineWazero && name != EngineWasmtime {
		return nil, fmt.Errorf("%w %q: want %s or %s", ErrUnknownEngine, name, EngineWazero, EngineWasmtime)
	}
	if name == EngineWasmtime && newWasmtimeEngine == nil {
		return nil, fmt.Errorf("engine %s is not in this build: it needs cgo (build with CGO_ENABLED=1 and a C compiler)", EngineWasmtime)
	}
	if cacheDir != "" {
		if err := os.MkdirAll(cacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("host: cache dir: %w", err)
		}
	}
	if name == EngineWasmtime {
		return newWasmtimeEngine(ctx, cacheDir)
	}
	return NewWazeroEngine(ctx, cacheDir)
}
