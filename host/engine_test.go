package host_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/host/engine/enginetest"
	"github.com/sandflow/sandflow/internal/wasmtest"
)

// The engines' conformance suite (host/engine/enginetest) runs in each
// engine's package. Here, on every test engine of the host, the host's own
// names for the CPU budget of a guest's host call: PauseCPU and
// RestartCPU, which find the engine's budget in the op's context.

func eachTestEngine(t *testing.T, fn func(t *testing.T, c *enginetest.Case)) {
	for _, te := range testEngines {
		t.Run(te.name, func(t *testing.T) { fn(t, enginetest.NewCase(t, te.get(t))) })
	}
}

// Time a guest spends waiting in a host call under PauseCPU does not count
// against its CPU limit; without PauseCPU it does.
func TestEnginePauseCPU(t *testing.T) {
	eachTestEngine(t, func(t *testing.T, e *enginetest.Case) {
		for _, pause := range []bool{true, false} {
			e.Config.CPULimit = 100 * time.Millisecond
			e.Config.Ops = enginetest.OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
				if pause {
					defer host.PauseCPU(ctx)()
				}
				time.Sleep(300 * time.Millisecond)
				return make([]byte, 8), nil
			})
			body := append(append(wasmtest.CallOp(2, 0, 0), wasmtest.CountTo(1<<20)...), wasmtest.ReturnOne...)
			res, _, err := e.Run(context.Background(), wasmtest.Guest(body, wasmtest.OpImport))
			if pause && (err != nil || res != 1) {
				t.Errorf("paused: %d %v", res, err)
			}
			if !pause && !errors.Is(err, host.ErrCPULimit) {
				t.Errorf("not paused: want the CPU limit, got %d %v", res, err)
			}
		}
	})
}

// RestartCPU gives the call a fresh budget.
func TestEngineRestartCPU(t *testing.T) {
	eachTestEngine(t, func(t *testing.T, e *enginetest.Case) {
		e.Config.CPULimit = 150 * time.Millisecond
		e.Config.Ops = enginetest.OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
			time.Sleep(100 * time.Millisecond)
			host.RestartCPU(ctx)
			return make([]byte, 8), nil
		})
		// Three ops of 100ms each: 300ms in all, but never 150ms since the
		// last restart.
		var body []byte
		for range 3 {
			body = append(append(body, wasmtest.CallOp(2, 0, 0)...), wasmtest.CountTo(1<<16)...)
		}
		body = append(body, wasmtest.ReturnOne...)
		if res, _, err := e.Run(context.Background(), wasmtest.Guest(body, wasmtest.OpImport)); err != nil || res != 1 {
			t.Errorf("%d %v", res, err)
		}
	})
}
