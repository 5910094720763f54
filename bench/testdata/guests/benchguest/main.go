// Command benchguest is the guest of the engine benchmarks (bench/). It
// speaks the ABI directly, without the SDK, so that what is timed is the
// engine: bench_ops issues OpsPerCall ops and bench_spin loops
// SpinIterations times doing arithmetic. sandflow_run and sandflow_step
// exist only to make it a well-formed guest.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o benchguest.wasm .
package main

import "unsafe"

//go:wasmimport sandflow op
func hostOp(kind, namePtr, nameLen, payloadPtr, payloadLen, respPtr, respCap uint32) uint32

const (
	// OpsPerCall is how many ops one bench_ops call issues.
	OpsPerCall = 10_000
	// SpinIterations is how many iterations one bench_spin call loops.
	SpinIterations = 50_000_000

	opMetadata = 2 // not recorded, answered at once
)

var resp [256]byte

//go:wasmexport sandflow_abi_version
func abiVersion() int32 { return 1 }

//go:wasmexport sandflow_run
func run() int32 { return 0 }

//go:wasmexport sandflow_step
func step() int32 { return 0 }

// benchOps issues OpsPerCall metadata ops and returns the sum of the body
// lengths, so that the calls cannot be dropped.
//
//go:wasmexport bench_ops
func benchOps() int32 {
	p := uint32(uintptr(unsafe.Pointer(&resp[0])))
	var sum uint32
	for range OpsPerCall {
		sum += hostOp(opMetadata, 0, 0, 0, 0, p, uint32(len(resp)))
	}
	return int32(sum)
}

// benchSpin loops SpinIterations times: a multiply and two adds per
// iteration, and the loop's own compare and branch.
//
//go:wasmexport bench_spin
func benchSpin() int32 {
	var acc uint32
	for i := uint32(0); i < SpinIterations; i++ {
		acc = acc*31 + i
	}
	return int32(acc)
}

func main() {}
