package wazero

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/wasip1"
)

func wzOp(ctx context.Context, mod api.Module, stack []uint64) {
	i, _ := engine.Caller(ctx).(*wzInstance)
	if i == nil {
		panic(sys.NewExitError(exitAbort))
	}
	mem := mod.Memory()
	kind := abi.OpKind(uint32(stack[0]))
	name, ok1 := mem.Read(uint32(stack[1]), uint32(stack[2]))
	payload, ok2 := mem.Read(uint32(stack[3]), uint32(stack[4]))
	respPtr, respCap := uint32(stack[5]), uint32(stack[6])
	if !ok1 || !ok2 {
		i.abortWith(ctx, mod, &engine.GuestError{Message: fmt.Sprintf("ABI violation: %s op request outside guest memory", kind)})
	}
	i.held = nil
	body, err := i.ops.Op(ctx, kind, name, payload)
	if err != nil {
		i.abortWith(ctx, mod, err)
	}
	if uint32(len(body)) <= respCap {
		if !mem.Write(respPtr, body) {
			i.abortWith(ctx, mod, &engine.GuestError{Message: fmt.Sprintf("ABI violation: %s response buffer outside guest memory", kind)})
		}
	} else {
		i.held = body
	}
	stack[0] = uint64(uint32(len(body)))
}

// defineWASI defines internal/wasip1's functions as the host module
// wasi_snapshot_preview1, so that a guest sees the same WASI here as on
// wasmtime: the clocks, random bytes and output of its InstanceConfig, no
// files, arguments or environment, and the same errno for everything
// else.
func defineWASI(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(wasip1.ModuleName)
	vt := func(ts []wasip1.ValType) []api.ValueType {
		out := make([]api.ValueType, len(ts))
		for k, t := range ts {
			out[k] = api.ValueType(t) // both are the binary format's codes
		}
		return out
	}
	for k := range wasip1.Funcs {
		f := &wasip1.Funcs[k]
		b = b.NewFunctionBuilder().
			WithGoModuleFunction(wzWASI(f), vt(f.Params), vt(f.Results)).
			Export(f.Name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// wzWASI is the host function of WASI function f.
func wzWASI(f *wasip1.Func) api.GoModuleFunc {
	n := len(f.Params)
	results := len(f.Results)
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		i, _ := engine.Caller(ctx).(*wzInstance)
		if i == nil {
			panic(sys.NewExitError(exitAbort))
		}
		i.wmem.mem = mod.Memory()
		errno, err := f.Call(&i.sys, &i.wmem, stack[:n])
		i.wmem.mem = nil
		if err != nil {
			var ee *wasip1.ExitError
			if errors.As(err, &ee) {
				// As wazero's own proc_exit: close the module with the
				// code and unwind; classify reports the exit.
				_ = mod.CloseWithExitCode(ctx, ee.Code)
				panic(sys.NewExitError(ee.Code))
			}
			i.abortWith(ctx, mod, err)
		}
		if results > 0 {
			stack[0] = uint64(errno)
		}
	}
}

// wzMemory is the guest memory as internal/wasip1 sees it during one host
// call.
type wzMemory struct{ mem api.Memory }

func (m *wzMemory) Bytes() []byte {
	if m.mem == nil {
		return nil
	}
	b, _ := m.mem.Read(0, m.mem.Size())
	return b
}

func wzRead(ctx context.Context, mod api.Module, stack []uint64) {
	i, _ := engine.Caller(ctx).(*wzInstance)
	ptr, n := uint32(stack[0]), uint32(stack[1])
	if i == nil || i.held == nil || n < uint32(len(i.held)) {
		stack[0] = uint64(uint32(0xffffffff)) // -1
		return
	}
	if !mod.Memory().Write(ptr, i.held) {
		i.abortWith(ctx, mod, &engine.GuestError{Message: "ABI violation: read buffer outside guest memory"})
	}
	stack[0] = uint64(uint32(len(i.held)))
}

// wzTick is the host function metered modules call every meter.Interval
// loop iterations: a safe point for the Go runtime, and where a guest over
// its budget is stopped.
func wzTick(ctx context.Context, mod api.Module, _ []uint64) {
	i, _ := engine.Caller(ctx).(*wzInstance)
	if i == nil {
		panic(sys.NewExitError(exitAbort))
	}
	if err := i.checkCPU(); err != nil {
		i.abortWith(ctx, mod, err)
	}
}
