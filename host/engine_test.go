package host_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/wasmtest"
)

// The engines' conformance suite (host/engine/enginetest) runs in each
// engine's package. Here, on every test engine of the host, the host's own
// names for the CPU budget of a guest's host call: PauseCPU and
// RestartCPU, which find the engine's budget in the op's context.

// stillClock stands still but for sleeps. It must not read 0: the Go
// runtime refuses to start on a clock that does.
type stillClock struct{ now int64 }

func (c *stillClock) Now() int64     { return c.now }
func (c *stillClock) Sleep(ns int64) { c.now += max(ns, 1) }

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// opFunc is an OpHandler; nil answers every op with an ok body.
type opFunc func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error)

func (f opFunc) Op(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
	if f == nil {
		return make([]byte, 8), nil
	}
	return f(ctx, kind, name, payload)
}

type engineCase struct {
	t   *testing.T
	eng host.Engine
	cfg host.InstanceConfig
}

func eachTestEngine(t *testing.T, fn func(t *testing.T, e *engineCase)) {
	for _, te := range testEngines {
		t.Run(te.name, func(t *testing.T) {
			fn(t, &engineCase{t: t, eng: te.get(t), cfg: host.InstanceConfig{
				Clock: &stillClock{now: 1.7e18}, Random: zeros{}, Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{},
				MemoryLimit: 16 << 20, CPULimit: 10 * time.Second, Ops: opFunc(nil),
			}})
		})
	}
}

func (e *engineCase) instantiate(wasm []byte) (host.Instance, error) {
	e.t.Helper()
	cm, err := e.eng.Compile(context.Background(), wasm)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cm.Close(context.Background()) })
	return cm.Instantiate(context.Background(), e.cfg)
}

func (e *engineCase) run(ctx context.Context, wasm []byte) (int32, host.Instance, error) {
	e.t.Helper()
	inst, err := e.instantiate(wasm)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { inst.Close(context.Background()) })
	res, err := inst.Call(ctx, abi.RunExport)
	return res, inst, err
}

// Time a guest spends waiting in a host call under PauseCPU does not count
// against its CPU limit; without PauseCPU it does.
func TestEnginePauseCPU(t *testing.T) {
	eachTestEngine(t, func(t *testing.T, e *engineCase) {
		for _, pause := range []bool{true, false} {
			e.cfg.CPULimit = 100 * time.Millisecond
			e.cfg.Ops = opFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
				if pause {
					defer host.PauseCPU(ctx)()
				}
				time.Sleep(300 * time.Millisecond)
				return make([]byte, 8), nil
			})
			body := append(append(wasmtest.CallOp(2, 0, 0), wasmtest.CountTo(1<<20)...), wasmtest.ReturnOne...)
			res, _, err := e.run(context.Background(), wasmtest.Guest(body, wasmtest.OpImport))
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
	eachTestEngine(t, func(t *testing.T, e *engineCase) {
		e.cfg.CPULimit = 150 * time.Millisecond
		e.cfg.Ops = opFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
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
		if res, _, err := e.run(context.Background(), wasmtest.Guest(body, wasmtest.OpImport)); err != nil || res != 1 {
			t.Errorf("%d %v", res, err)
		}
	})
}
