//go:build wasip1

package sandflow

import (
	"encoding/binary"
	"unsafe"

	"github.com/sandflow/sandflow/abi"
)

//go:wasmimport sandflow op
func hostOp(kind, namePtr, nameLen, payloadPtr, payloadLen, respPtr, respCap uint32) uint32

//go:wasmimport sandflow read
func hostRead(ptr, n uint32) int32

// respBuf receives op responses. Go's collector does not move objects, so
// its address stays valid for the host to write to.
var respBuf = make([]byte, 64<<10)

func bytesPtr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

func strPtr(s string) uint32 {
	if len(s) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s))))
}

// doOp performs an op and returns the host's response, whose payload
// aliases a buffer the next op overwrites. It calls the host and splits
// the response itself (parseResponse does the same off wasm) rather than
// through other functions: in WebAssembly a Go call costs tens of
// nanoseconds, and a replayed step is little more than one op.
func doOp(kind abi.OpKind, name string, payload []byte) response {
	n := hostOp(uint32(kind), strPtr(name), uint32(len(name)), bytesPtr(payload), uint32(len(payload)),
		bytesPtr(respBuf), uint32(len(respBuf)))
	if int(n) > len(respBuf) {
		heldResponse(n)
	}
	b := respBuf[:n]
	if len(b) < abi.BodyHeaderSize {
		shortResponse(kind, len(b))
	}
	return response{abi.Status(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint32(b[4:]), b[abi.BodyHeaderSize:]}
}

// heldResponse takes a response of n bytes that did not fit respBuf,
// which the host holds for the next read, into a new respBuf.
//
//go:noinline
func heldResponse(n uint32) {
	respBuf = make([]byte, n)
	if hostRead(bytesPtr(respBuf), n) < 0 {
		panic("sandflow: host refused to hand over a held response")
	}
}

//go:wasmexport sandflow_abi_version
func abiVersion() int32 { return abi.Version }

//go:wasmexport sandflow_run
func sandflowRun() int32 { return run() }

//go:wasmexport sandflow_step
func sandflowStep() int32 { return runStep() }

//go:wasmexport sandflow_prepare
func sandflowPrepare() { prepare() }

//go:wasmexport sandflow_describe
func sandflowDescribe() int32 { return describe() }
