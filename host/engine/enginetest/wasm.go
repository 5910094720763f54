package enginetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/wasmtest"
)

// The cases on hand-assembled WebAssembly guests.

func cpuLimit(t *testing.T, c *Case) {
	{
		c.Config.CPULimit = 100 * time.Millisecond
		start := time.Now()
		_, inst, err := c.Run(context.Background(), wasmtest.Guest(wasmtest.Loop))
		var le *engine.LimitError
		if !errors.Is(err, engine.ErrCPULimit) || !errors.As(err, &le) || le.Limit != "cpu" || le.Max != 100 {
			t.Fatalf("want the CPU limit, got %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("stopped after %s", d)
		}
		expectClosed(t, inst)
	}
}

func memoryLimit(t *testing.T, c *Case) {
	{
		c.Config.MemoryLimit = 2 << 20
		_, inst, err := c.Run(context.Background(), wasmtest.Guest(wasmtest.GrowLoop))
		var le *engine.LimitError
		if !errors.Is(err, engine.ErrMemoryLimit) || !errors.As(err, &le) || le.Max != 2<<20 {
			t.Fatalf("want the memory limit, got %v", err)
		}
		expectClosed(t, inst)
	}
}

func initialMemory(t *testing.T, c *Case) {
	{
		c.Config.MemoryLimit = 1 << 20
		wasm := wasmtest.Module{
			Funcs:   []wasmtest.Func{{Results: []byte{wasmtest.I32}, Body: wasmtest.ReturnOne}},
			Exports: map[string]uint32{"sandflow_abi_version": 0, "sandflow_run": 0, "sandflow_step": 0},
			Memory:  64, // 4 MiB
		}.Bytes()
		if _, err := c.Instantiate(wasm); !errors.Is(err, engine.ErrMemoryLimit) {
			t.Fatalf("want the memory limit, got %v", err)
		}
	}
}

// A trap that is not the memory limit, in a guest whose limit is small.
func trap(t *testing.T, c *Case) {
	{
		c.Config.MemoryLimit = 2 << 20
		_, inst, err := c.Run(context.Background(), wasmtest.Guest([]byte{0x00})) // unreachable
		var ge *engine.GuestError
		if !errors.As(err, &ge) || ge.ExitCode != nil || errors.Is(err, engine.ErrLimit) {
			t.Fatalf("want a trap *GuestError, got %v", err)
		}
		expectClosed(t, inst)
	}
}

func contextCancel(t *testing.T, c *Case) {
	{
		c.Config.CPULimit = time.Minute
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, inst, err := c.Run(ctx, wasmtest.Guest(wasmtest.Loop))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("stopped after %s", d)
		}
		expectClosed(t, inst)
	}
}

func opHandlerError(t *testing.T, c *Case) {
	{
		boom := errors.New("the handler gives up")
		ops := 0
		c.Config.Ops = OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
			ops++
			return nil, boom
		})
		// Two ops then a loop: the first op must end the guest at once.
		body := append(append(wasmtest.CallOp(2, 0, 0), wasmtest.CallOp(2, 0, 0)...), wasmtest.Loop...)
		_, inst, err := c.Run(context.Background(), wasmtest.Guest(body, wasmtest.OpImport))
		if err != boom {
			t.Fatalf("Call returned %v, want the handler's error itself", err)
		}
		if ops != 1 {
			t.Errorf("%d ops ran", ops)
		}
		expectClosed(t, inst)
	}
}

func opOutsideMemory(t *testing.T, c *Case) {
	{
		called := false
		c.Config.Ops = OpFunc(func(context.Context, abi.OpKind, []byte, []byte) ([]byte, error) {
			called = true
			return make([]byte, 8), nil
		})
		body := append(wasmtest.CallOp(2, 65536-2, 4), wasmtest.ReturnOne...) // name runs past the one page
		_, inst, err := c.Run(context.Background(), wasmtest.Guest(body, wasmtest.OpImport))
		var ge *engine.GuestError
		if !errors.As(err, &ge) || called {
			t.Fatalf("want a *GuestError and no op, got %v (op called: %v)", err, called)
		}
		expectClosed(t, inst)
	}
}

func opAnswer(t *testing.T, c *Case) {
	{
		var gotName string
		c.Config.Ops = OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
			gotName = string(name)
			return []byte("12345678abc"), nil
		})
		// Call op with an empty name and return its result, the length of
		// the body (which fits the 64-byte buffer).
		var b []byte
		for _, v := range []int32{2, 0, 0, 0, 0, 0, 64} {
			b = append(b, wasmtest.I32Const(v)...)
		}
		b = append(b, 0x10, 0x00) // call 0: the length is the result
		res, _, err := c.Run(context.Background(), wasmtest.Guest(b, wasmtest.OpImport))
		if err != nil || res != 11 || gotName != "" {
			t.Fatalf("op answered %d, %v (name %q)", res, err, gotName)
		}
	}
}

// Time a guest spends waiting in a host call under the PauseCPU of the
// budget BudgetOf finds in the op's context does not count against its
// CPU limit; without PauseCPU it does.
func pauseCPU(t *testing.T, c *Case) {
	{
		for _, pause := range []bool{true, false} {
			c.Config.CPULimit = 100 * time.Millisecond
			c.Config.Ops = OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
				if pause {
					defer engine.BudgetOf(ctx).PauseCPU()()
				}
				time.Sleep(300 * time.Millisecond)
				return make([]byte, 8), nil
			})
			body := append(append(wasmtest.CallOp(2, 0, 0), wasmtest.CountTo(1<<20)...), wasmtest.ReturnOne...)
			res, _, err := c.Run(context.Background(), wasmtest.Guest(body, wasmtest.OpImport))
			if pause && (err != nil || res != 1) {
				t.Errorf("paused: %d %v", res, err)
			}
			if !pause && !errors.Is(err, engine.ErrCPULimit) {
				t.Errorf("not paused: want the CPU limit, got %d %v", res, err)
			}
		}
	}
}

// The budget BudgetOf finds in an op's context restarts: RestartCPU gives
// the call a fresh budget.
func restartCPU(t *testing.T, c *Case) {
	{
		c.Config.CPULimit = 150 * time.Millisecond
		c.Config.Ops = OpFunc(func(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
			time.Sleep(100 * time.Millisecond)
			engine.BudgetOf(ctx).RestartCPU()
			return make([]byte, 8), nil
		})
		// Three ops of 100ms each: 300ms in all, but never 150ms since the
		// last restart.
		var body []byte
		for range 3 {
			body = append(append(body, wasmtest.CallOp(2, 0, 0)...), wasmtest.CountTo(1<<16)...)
		}
		body = append(body, wasmtest.ReturnOne...)
		if res, _, err := c.Run(context.Background(), wasmtest.Guest(body, wasmtest.OpImport)); err != nil || res != 1 {
			t.Errorf("%d %v", res, err)
		}
	}
}

func procExit(t *testing.T, c *Case) {
	{
		exit := wasmtest.Import{Module: "wasi_snapshot_preview1", Name: "proc_exit", Params: []byte{wasmtest.I32}}
		body := append(append(wasmtest.I32Const(7), 0x10, 0x00), wasmtest.ReturnOne...) // proc_exit(7)
		_, inst, err := c.Run(context.Background(), wasmtest.Guest(body, exit))
		var ge *engine.GuestError
		if !errors.As(err, &ge) || ge.ExitCode == nil || *ge.ExitCode != 7 {
			t.Fatalf("want a *GuestError with exit code 7, got %v", err)
		}
		expectClosed(t, inst)
	}
}

// fd_write to stdout and stderr reaches the configured writers.
func stdout(t *testing.T, c *Case) {
	{
		fdWrite := wasmtest.Import{Module: "wasi_snapshot_preview1", Name: "fd_write",
			Params: []byte{wasmtest.I32, wasmtest.I32, wasmtest.I32, wasmtest.I32}, Results: []byte{wasmtest.I32}}
		// Store an iovec {ptr 100, len 2} at 16 and "hi" at 100, then
		// fd_write(fd, 16, 1, 32) for fd 1 and 2, and return the sum of the
		// errnos and nwritten.
		var b []byte
		store := func(addr, v int32) {
			b = append(append(append(b, wasmtest.I32Const(addr)...), wasmtest.I32Const(v)...), 0x36, 0x02, 0x00)
		}
		store(16, 100)
		store(20, 2)
		store(100, 'h'|'i'<<8)
		for _, fd := range []int32{1, 2} {
			for _, v := range []int32{fd, 16, 1, 32} {
				b = append(b, wasmtest.I32Const(v)...)
			}
			b = append(b, 0x10, 0x00) // call fd_write: errno on the stack
		}
		b = append(b, 0x6a) // add the errnos
		b = append(b, wasmtest.I32Const(32)...)
		b = append(b, 0x28, 0x02, 0x00, 0x6a) // + nwritten
		res, _, err := c.Run(context.Background(), wasmtest.Guest(b, fdWrite))
		if err != nil || res != 2 {
			t.Fatalf("%d %v", res, err)
		}
		if out, errOut := c.Config.Stdout.(*bytes.Buffer).String(), c.Config.Stderr.(*bytes.Buffer).String(); out != "hi" || errOut != "hi" {
			t.Errorf("stdout %q stderr %q", out, errOut)
		}
	}
}

// An engine calls sandflow_prepare once, after _initialize, before the
// instance is handed out; a trap there fails the instantiation.
func prepare(t *testing.T, c *Case) {
	// _initialize stores 1 at address 0; sandflow_prepare turns the byte
	// b there into 10b+2; sandflow_run returns it. 12 means both ran, in
	// that order, once each.
	initBody := append(append(wasmtest.I32Const(0), wasmtest.I32Const(1)...), 0x3a, 0x00, 0x00) // i32.store8
	prepare := append(wasmtest.I32Const(0), wasmtest.I32Const(0)...)
	prepare = append(prepare, 0x2d, 0x00, 0x00) // i32.load8_u
	prepare = append(append(prepare, wasmtest.I32Const(10)...), 0x6c)
	prepare = append(append(prepare, wasmtest.I32Const(2)...), 0x6a)
	prepare = append(prepare, 0x3a, 0x00, 0x00)
	load := append(wasmtest.I32Const(0), 0x2d, 0x00, 0x00)
	module := func(prepareBody []byte, exportPrepare bool) []byte {
		m := wasmtest.Module{
			Funcs: []wasmtest.Func{
				{Results: []byte{wasmtest.I32}, Body: wasmtest.ReturnOne},
				{Results: []byte{wasmtest.I32}, Body: load},
				{Body: initBody},
				{Body: prepareBody},
			},
			Exports: map[string]uint32{"sandflow_abi_version": 0, "sandflow_run": 1, "sandflow_step": 0, "_initialize": 2},
			Memory:  1,
		}
		if exportPrepare {
			m.Exports["sandflow_prepare"] = 3
		}
		return m.Bytes()
	}
	{
		for _, tc := range []struct {
			name    string
			prepare bool
			want    int32
		}{{"exported", true, 12}, {"not exported", false, 1}} {
			res, _, err := c.Run(context.Background(), module(prepare, tc.prepare))
			if err != nil || res != tc.want {
				t.Errorf("%s: sandflow_run returned %d, %v; want %d", tc.name, res, err, tc.want)
			}
		}
		if _, err := c.Instantiate(module([]byte{0x00}, true)); !errors.Is(err, engine.ErrGuest) {
			t.Errorf("a trap in sandflow_prepare: %v, want a guest error", err)
		}
	}
}
