package enginetest

import (
	"context"
	"errors"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/wasmtest"
)

// The hand-assembled WebAssembly guests of the behaviours, and the cases
// that apply to WebAssembly alone.

// store is the code of i32.store of v at addr.
func store(addr, v int32) []byte {
	return append(append(wasmtest.I32Const(addr), wasmtest.I32Const(v)...), 0x36, 0x02, 0x00)
}

// load is the code of i32.load at addr.
func load(addr int32) []byte { return append(wasmtest.I32Const(addr), 0x28, 0x02, 0x00) }

// load8 is the code of i32.load8_u at addr.
func load8(addr int32) []byte { return append(wasmtest.I32Const(addr), 0x2d, 0x00, 0x00) }

func call(fn byte, args ...int32) []byte {
	var b []byte
	for _, v := range args {
		b = append(b, wasmtest.I32Const(v)...)
	}
	return append(b, 0x10, fn)
}

const (
	i32Add = 0x6a
	i32Eq  = 0x46
	drop   = 0x1a
)

var readImport = wasmtest.Import{Module: "sandflow", Name: "read",
	Params: []byte{wasmtest.I32, wasmtest.I32}, Results: []byte{wasmtest.I32}}

func wasiImport(name string, params ...byte) wasmtest.Import {
	return wasmtest.Import{Module: "wasi_snapshot_preview1", Name: name, Params: params, Results: []byte{wasmtest.I32}}
}

// wasmGuest is the guest that shows b.
func wasmGuest(b Behaviour) []byte {
	op := wasmtest.CallOp(2, 0, 0)
	switch b {
	case TightLoop:
		return wasmtest.Guest(wasmtest.Loop)
	case GrowLoop:
		return wasmtest.Guest(wasmtest.GrowLoop)
	case Fail:
		return wasmtest.Guest([]byte{0x00}) // unreachable
	case TwoOpsThenLoop:
		return wasmtest.Guest(append(append(op, op...), wasmtest.Loop...), wasmtest.OpImport)
	case AnswerLength:
		// op with an empty name into a 64-byte buffer: the length is the
		// result.
		return wasmtest.Guest(call(0, 2, 0, 0, 0, 0, 0, 64), wasmtest.OpImport)
	case RoundTrips:
		return wasmtest.Guest(roundTrips(), wasmtest.OpImport, readImport)
	case OpThenCount:
		return wasmtest.Guest(append(append(op, wasmtest.CountTo(1<<20)...), wasmtest.ReturnOne...), wasmtest.OpImport)
	case ThreeOps:
		var body []byte
		for range 3 {
			body = append(append(body, op...), wasmtest.CountTo(1<<16)...)
		}
		return wasmtest.Guest(append(body, wasmtest.ReturnOne...), wasmtest.OpImport)
	case WriteHi:
		return writeHi()
	case ClockAndRandom:
		return clockAndRandomGuest()
	}
	panic("enginetest: no WebAssembly guest shows " + string(b))
}

// roundTrips is RoundTrips: "ping" at 0 and "abc" at 8; ten ops whose
// answers fit the buffer at 64, their lengths summed; an eleventh whose
// answer does not, read to 200; and the byte before its last.
func roundTrips() []byte {
	b := append(store(0, 'p'|'i'<<8|'n'<<16|'g'<<24), store(8, 'a'|'b'<<8|'c'<<16)...)
	b = append(b, wasmtest.I32Const(0)...)
	ping := call(0, 2, 0, 4, 8, 3, 64, 64)
	for range 10 {
		b = append(append(b, ping...), i32Add)
	}
	b = append(append(b, ping...), drop)                // held: its length is over 64
	b = append(append(b, call(1, 200, 200)...), i32Add) // read it: the length copied
	return append(append(b, load8(200+106)...), i32Add) // the 108-byte answer's byte before its last
}

// writeHi is WriteHi: iovecs {ptr 100, len 3} at 16 and {104, 3} at 24,
// "hi\n" at 100 and "ho\n" at 104, then fd_write(1, 16, 1, 32) and
// fd_write(2, 24, 1, 32); it returns whether the errnos and the last
// nwritten add up to 3.
func writeHi() []byte {
	fdWrite := wasmtest.Import{Module: "wasi_snapshot_preview1", Name: "fd_write",
		Params: []byte{wasmtest.I32, wasmtest.I32, wasmtest.I32, wasmtest.I32}, Results: []byte{wasmtest.I32}}
	b := append(append(store(16, 100), store(20, 3)...), store(100, 'h'|'i'<<8|'\n'<<16)...)
	b = append(append(append(b, store(24, 104)...), store(28, 3)...), store(104, 'h'|'o'<<8|'\n'<<16)...)
	b = append(append(b, call(0, 1, 16, 1, 32)...), call(0, 2, 24, 1, 32)...) // errnos on the stack
	b = append(append(b, i32Add), load(32)...)
	b = append(append(append(b, i32Add), wasmtest.I32Const(3)...), i32Eq)
	return wasmtest.Guest(b, fdWrite)
}

// clockAndRandomGuest is ClockAndRandom: WASI's realtime and monotonic
// clocks, read to 300 and 308, and four bytes of random_get at 400,
// summed.
func clockAndRandomGuest() []byte {
	clockTimeGet := wasiImport("clock_time_get", wasmtest.I32, wasmtest.I64, wasmtest.I32)
	randomGet := wasiImport("random_get", wasmtest.I32, wasmtest.I32)
	var b []byte
	for _, id := range []int32{0, 1} { // realtime, monotonic
		b = append(b, wasmtest.I32Const(id)...)
		b = append(b, 0x42, 0x01) // i64.const 1: the precision
		b = append(b, wasmtest.I32Const(300+8*id)...)
		b = append(b, 0x10, 0x00, drop) // call clock_time_get, drop the errno
	}
	b = append(append(b, call(1, 400, 4)...), drop)
	for _, at := range []int32{300, 308} {
		b = append(b, wasmtest.I32Const(at)...)
		b = append(b, 0x29, 0x03, 0x00, 0xa7) // i64.load, i32.wrap_i64
	}
	b = append(append(b, i32Add), load(400)...)
	return wasmtest.Guest(append(b, i32Add), clockTimeGet, randomGet)
}

func initialMemory(t *testing.T, c *Case) {
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

func opOutsideMemory(t *testing.T, c *Case) {
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

func procExit(t *testing.T, c *Case) {
	exit := wasmtest.Import{Module: "wasi_snapshot_preview1", Name: "proc_exit", Params: []byte{wasmtest.I32}}
	body := append(append(wasmtest.I32Const(7), 0x10, 0x00), wasmtest.ReturnOne...) // proc_exit(7)
	_, inst, err := c.Run(context.Background(), wasmtest.Guest(body, exit))
	var ge *engine.GuestError
	if !errors.As(err, &ge) || ge.ExitCode == nil || *ge.ExitCode != 7 {
		t.Fatalf("want a *GuestError with exit code 7, got %v", err)
	}
	expectClosed(t, inst)
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

// The guest sees the host's WASI (internal/wasip1) on every engine: the
// standard streams cannot be closed (ENOTSUP), there is no other
// descriptor (EBADF), and there are no arguments.
func wasiErrnos(t *testing.T, c *Case) {
	fdClose := wasiImport("fd_close", wasmtest.I32)
	argsSizes := wasiImport("args_sizes_get", wasmtest.I32, wasmtest.I32)
	var b []byte
	b = append(b, call(0, 1)...)
	b = append(append(b, wasmtest.I32Const(100)...), 0x6c) // * 100
	b = append(append(b, call(0, 5)...), 0x6a)
	b = append(b, store(500, -1)...)
	b = append(b, store(504, -1)...)
	b = append(append(b, call(1, 500, 504)...), 0x6a)
	b = append(append(append(b, load(500)...), 0x6a), append(load(504), 0x6a)...)
	res, _, err := c.Run(context.Background(), wasmtest.Guest(b, fdClose, argsSizes))
	if want := int32(58*100 + 8); err != nil || res != want {
		t.Fatalf("fd_close(1)*100 + fd_close(5) + args_sizes_get and its counts: %d, %v; want %d", res, err, want)
	}
}
