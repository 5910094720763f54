package wazero_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/host/engine/enginetest"
	"github.com/sandflow/sandflow/host/engine/wazero"
)

var (
	once   sync.Once
	shared *wazero.Engine
	err    error
)

// sharedEngine is one engine for the package's tests.
func sharedEngine(t testing.TB) engine.Engine {
	once.Do(func() { shared, err = wazero.New(context.Background(), "") })
	if err != nil {
		t.Fatal(err)
	}
	return shared
}

func TestConformance(t *testing.T) {
	enginetest.Suite{Engine: sharedEngine, WASM: true, Snapshots: true}.Run(t)
}
