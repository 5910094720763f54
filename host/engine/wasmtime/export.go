//go:build cgo

package wasmtime

// #include <stddef.h>
// #include <stdint.h>
import "C"

import (
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// The Go functions wasmtime calls back, through the C shims in
// capi.go. (A file with //export may only declare in its preamble,
// so the shims live there.)

// sandflowWasmtimeEpoch is called on the guest's thread each time a
// running store passes its epoch deadline, once per engine tick. It
// returns 1 to stop the guest (its budget is spent or its context is done)
// and 0 to let it run one more tick. h is the cgo.Handle of the
// *wtInstance.
//
//export sandflowWasmtimeEpoch
func sandflowWasmtimeEpoch(h C.uintptr_t) C.int {
	i, ok := cgo.Handle(h).Value().(*wtInstance)
	if !ok || i.checkCPU() {
		return 1
	}
	return 0
}

// sandflowWasmtimeHostCall runs host function fn (see wtHostFuncs) for
// the store whose context is ctx. mem is the caller's exported memory (nil
// when it has none), args its wasmtime_val_raw_t parameters, 16 bytes each,
// where the result goes too. It returns 1 to trap: the reason is then in
// the instance (abort or exit).
//
//export sandflowWasmtimeHostCall
func sandflowWasmtimeHostCall(fn, ctx C.uintptr_t, mem *C.uint8_t, memLen C.size_t, args unsafe.Pointer, n C.size_t) (trap C.int) {
	i := wtInstanceOf(uintptr(ctx))
	if i == nil {
		return 1
	}
	defer func() {
		// A panic must not unwind through wasmtime's frames.
		if r := recover(); r != nil {
			i.fail(fmt.Errorf("host function panicked: %v", r))
			trap = 1
		}
	}()
	var m []byte
	if mem != nil {
		m = unsafe.Slice((*byte)(unsafe.Pointer(mem)), int(memLen))
	}
	var raw []wtRaw
	if n > 0 {
		raw = unsafe.Slice((*wtRaw)(args), int(n))
	}
	if !i.hostCall(int(fn), m, raw) {
		return 1
	}
	return 0
}
