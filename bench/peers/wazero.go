package peers

import (
	"context"
	"fmt"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// HostCallsPerExport is how many host calls one call of the loop guest's
// export makes in WazeroHostCall.
const HostCallsPerExport = 10_000

// loopGuest is a hand-assembled WebAssembly module, the least a guest can
// be that calls the host:
//
//	(module
//	  (type $t (func (param i32) (result i32)))
//	  (import "env" "inc" (func $inc (type $t)))
//	  (func (export "loop") (type $t) (local $acc i32)
//	    (block (loop
//	      (br_if 1 (i32.eqz (local.get 0)))
//	      (local.set $acc (call $inc (local.get $acc)))
//	      (local.set 0 (i32.sub (local.get 0) (i32.const 1)))
//	      (br 0)))
//	    (local.get $acc)))
//
// loop(k) calls env.inc k times, feeding each result to the next call, and
// returns the last result.
var loopGuest = wasmModule(
	section(1, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f), // types: (i32) -> i32
	section(2, 0x01, // imports: 1
		0x03, 'e', 'n', 'v', 0x03, 'i', 'n', 'c', 0x00, 0x00), // env.inc, func of type 0
	section(3, 0x01, 0x00), // functions: 1, of type 0
	section(7, 0x01, // exports: 1
		0x04, 'l', 'o', 'o', 'p', 0x00, 0x01), // "loop" is func 1
	section(10, append([]byte{0x01}, loopBody...)...), // code: 1 body
)

var loopBody = body(
	0x01, 0x01, 0x7f, // locals: one group of one i32 ($acc is local 1)
	0x02, 0x40, // block
	0x03, 0x40, // loop
	0x20, 0x00, 0x45, 0x0d, 0x01, // local.get 0; i32.eqz; br_if 1
	0x20, 0x01, 0x10, 0x00, 0x21, 0x01, // local.get 1; call 0; local.set 1
	0x20, 0x00, 0x41, 0x01, 0x6b, 0x21, 0x00, // local.get 0; i32.const 1; i32.sub; local.set 0
	0x0c, 0x00, // br 0
	0x0b, 0x0b, // end loop; end block
	0x20, 0x01, // local.get 1
	0x0b, // end
)

func wasmModule(sections ...[]byte) []byte {
	m := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	for _, s := range sections {
		m = append(m, s...)
	}
	return m
}

// section prefixes content with the section id and its length. Every
// length here is below 128, so its LEB128 encoding is one byte.
func section(id byte, content ...byte) []byte {
	return append([]byte{id, byte(len(content))}, content...)
}

func body(code ...byte) []byte { return append([]byte{byte(len(code))}, code...) }

// WazeroLoop is the loop guest instantiated in a wazero runtime, with
// env.inc registered as an api.GoModuleFunc that adds one to its argument.
type WazeroLoop struct {
	rt    wazero.Runtime
	fn    api.Function
	stack []uint64
}

// NewWazeroLoop compiles and instantiates the loop guest with wazero's
// default configuration (its compiler where the platform has one).
func NewWazeroLoop(ctx context.Context) (*WazeroLoop, error) {
	rt := wazero.NewRuntime(ctx)
	_, err := rt.NewHostModuleBuilder("env").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
			stack[0] = uint64(uint32(stack[0]) + 1)
		}), []api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("inc").
		Instantiate(ctx)
	if err != nil {
		rt.Close(ctx)
		return nil, err
	}
	mod, err := rt.Instantiate(ctx, loopGuest)
	if err != nil {
		rt.Close(ctx)
		return nil, err
	}
	return &WazeroLoop{rt: rt, fn: mod.ExportedFunction("loop"), stack: make([]uint64, 1)}, nil
}

// Run makes k host calls through one call of the guest's export, and
// checks that the guest saw every one.
func (w *WazeroLoop) Run(ctx context.Context, k int) error {
	w.stack[0] = uint64(k)
	if err := w.fn.CallWithStack(ctx, w.stack); err != nil {
		return err
	}
	if got := uint32(w.stack[0]); got != uint32(k) {
		return fmt.Errorf("loop(%d) returned %d", k, got)
	}
	return nil
}

// Close releases the runtime.
func (w *WazeroLoop) Close(ctx context.Context) error { return w.rt.Close(ctx) }

// WazeroHostCall benchmarks the floor of one op: a guest calling one host
// function registered with api.GoModuleFunc in wazero. ns/op is per host
// call: b.N host calls are made HostCallsPerExport per call of the guest's
// export, so the export call's own cost is spread over them.
func WazeroHostCall() func(b *testing.B) {
	return func(b *testing.B) {
		ctx := context.Background()
		w, err := NewWazeroLoop(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close(ctx)
		if err := w.Run(ctx, HostCallsPerExport); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for left := b.N; left > 0; left -= HostCallsPerExport {
			if err := w.Run(ctx, min(left, HostCallsPerExport)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/call")
	}
}
