// Command extismguest is the Extism plugin of the peer benchmarks. Its
// greet export does the guest work of sandflow's trivial tool, the greet
// mode of bench/workload's Go guest: decode the same input into the same
// struct, check the mode, and encode the same greeting. It is written
// against Extism's host ABI (the "extism:host/env" imports) directly, with
// no PDK.
//
// The peers package embeds this file and builds it at benchmark setup:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o extismguest.wasm .
package main

import (
	"encoding/binary"
	"encoding/json"
)

// Offsets are into the host's Extism memory, not the guest's.

//go:wasmimport extism:host/env input_length
func inputLength() uint64

//go:wasmimport extism:host/env input_load_u8
func inputLoadU8(off uint64) uint32

//go:wasmimport extism:host/env input_load_u64
func inputLoadU64(off uint64) uint64

//go:wasmimport extism:host/env alloc
func alloc(n uint64) uint64

//go:wasmimport extism:host/env store_u8
func storeU8(off uint64, v uint32)

//go:wasmimport extism:host/env store_u64
func storeU64(off, v uint64)

//go:wasmimport extism:host/env output_set
func outputSet(off, n uint64)

//go:wasmimport extism:host/env error_set
func errorSet(off uint64)

// request is the workload guest's input type, field for field.
type request struct {
	Mode string `json:"mode"`
	N    int    `json:"n"`
	Asks int    `json:"asks"`
	Name string `json:"name"`
}

type response struct {
	Greeting string `json:"greeting"`
}

// greet answers {"mode":"greet","name":N} with {"greeting":"hello N"}. It
// returns 0, or 1 with the error message set when the input is not such
// an object.
//
//go:wasmexport greet
func greet() int32 {
	var req request
	if err := json.Unmarshal(input(), &req); err != nil {
		errorSet(store([]byte(err.Error())))
		return 1
	}
	if req.Mode != "greet" {
		errorSet(store([]byte("unknown mode " + req.Mode)))
		return 1
	}
	// Encoded from an interface value, as the workload guest's result is.
	var res any = response{Greeting: "hello " + req.Name}
	out, err := json.Marshal(res)
	if err != nil {
		errorSet(store([]byte(err.Error())))
		return 1
	}
	outputSet(store(out), uint64(len(out)))
	return 0
}

// input copies the call's input into guest memory, eight bytes per host
// call and then byte by byte.
func input() []byte {
	n := inputLength()
	buf := make([]byte, n)
	i := uint64(0)
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], inputLoadU64(i))
	}
	for ; i < n; i++ {
		buf[i] = byte(inputLoadU8(i))
	}
	return buf
}

// store copies b into a new block of Extism memory and returns its offset.
func store(b []byte) uint64 {
	off := alloc(uint64(len(b)))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		storeU64(off+uint64(i), binary.LittleEndian.Uint64(b[i:]))
	}
	for ; i < len(b); i++ {
		storeU8(off+uint64(i), uint32(b[i]))
	}
	return off
}

func main() {}
