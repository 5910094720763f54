//go:build cgo

package wasmtime_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/host/engine/enginetest"
	"github.com/sandflow/sandflow/host/engine/wasmtime"
)

var (
	once   sync.Once
	shared *wasmtime.Engine
	err    error
)

// sharedEngine is one engine for the package's tests.
func sharedEngine(t testing.TB) engine.Engine {
	once.Do(func() { shared, err = wasmtime.New(context.Background(), "") })
	if err != nil {
		t.Fatal(err)
	}
	return shared
}

func TestConformance(t *testing.T) {
	enginetest.Suite{Engine: sharedEngine, WASM: true}.Run(t)
}
