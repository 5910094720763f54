//go:build cgo

package host

import (
	"context"

	"github.com/sandflow/sandflow/host/engine/wasmtime"
)

func init() {
	newWasmtimeEngine = func(ctx context.Context, cacheDir string) (Engine, error) {
		return wasmtime.New(ctx, cacheDir)
	}
}

// WasmtimeEngine runs guests on wasmtime, through wasmtime-go (cgo).
//
// Deprecated: use wasmtime.Engine, in package host/engine/wasmtime.
type WasmtimeEngine = wasmtime.Engine

// NewWasmtimeEngine makes a wasmtime engine. cacheDir, when not empty,
// holds compiled artifacts across processes; they are native code loaded
// without verification, so cacheDir must be writable only by the host.
//
// Deprecated: use wasmtime.New, in package host/engine/wasmtime.
func NewWasmtimeEngine(ctx context.Context, cacheDir string) (*WasmtimeEngine, error) {
	return wasmtime.New(ctx, cacheDir)
}
