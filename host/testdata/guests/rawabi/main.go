// Command rawabi is a guest written from abi/README.md alone, without the
// SDK, the way another language would: straight-line code that calls
// sandflow.op and awaits with the block flag, so it never has to unwind.
// Each activation replays the run from the start in a fresh instance.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rawabi.wasm .
package main

import (
	"encoding/binary"
	"encoding/json"
	"strconv"
	"unsafe"
)

//go:wasmimport sandflow op
func hostOp(kind, namePtr, nameLen, payloadPtr, payloadLen, respPtr, respCap uint32) uint32

//go:wasmimport sandflow read
func hostRead(ptr, n uint32) int32

const (
	opInput        = 1
	opComplete     = 3
	opStep         = 5
	opSleep        = 6
	opAwait        = 11
	opStepInput    = 12
	opStepComplete = 13

	statusOK      = 0
	statusPending = 1

	awaitAll   = 0
	awaitBlock = 0x100
)

// A small response buffer, so the held-response path (read) is used too.
var resp = make([]byte, 16)

func ptr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

// call performs an op and returns status, future and payload.
func call(kind uint32, name string, payload []byte) (uint32, uint32, []byte) {
	n := hostOp(kind, ptr([]byte(name)), uint32(len(name)), ptr(payload), uint32(len(payload)), ptr(resp), uint32(len(resp)))
	body := resp
	if int(n) > len(resp) {
		body = make([]byte, n)
		if hostRead(ptr(body), n) != int32(n) {
			panic("read failed")
		}
	}
	body = body[:n]
	return binary.LittleEndian.Uint32(body), binary.LittleEndian.Uint32(body[4:]), append([]byte(nil), body[8:]...)
}

// wait blocks until the future settles and returns its value. The host
// never returns from an unsatisfied blocking await: it ends the instance.
func wait(future uint32) []byte {
	req := binary.LittleEndian.AppendUint32(nil, awaitAll|awaitBlock)
	req = binary.LittleEndian.AppendUint32(req, future)
	st, _, p := call(opAwait, "", req)
	if st != statusOK || len(p) < 12 {
		panic("await answered " + strconv.Itoa(int(st)))
	}
	return p[12 : 12+binary.LittleEndian.Uint32(p[8:])]
}

// value returns an op's value: at once, or by a blocking wait.
func value(st, future uint32, p []byte) []byte {
	switch st {
	case statusOK:
		return p
	case statusPending:
		return wait(future)
	}
	panic("op answered " + strconv.Itoa(int(st)) + ": " + string(p))
}

func main() {}

//go:wasmexport sandflow_abi_version
func abiVersion() int32 { return 1 }

//go:wasmexport sandflow_run
func run() int32 {
	_, _, in := call(opInput, "", nil)
	var input struct{ N int }
	json.Unmarshal(in, &input)
	total := 0
	for i := 1; i <= input.N; i++ {
		v := value(call(opStep, "double", []byte(`{"input":`+strconv.Itoa(i)+`}`)))
		n, _ := strconv.Atoi(string(v))
		total += n
		value(call(opSleep, "", []byte(`{"ms":1}`)))
	}
	call(opComplete, "", []byte(`{"result":{"total":`+strconv.Itoa(total)+`}}`))
	return 0
}

//go:wasmexport sandflow_step
func step() int32 {
	_, _, p := call(opStepInput, "", nil)
	var in struct {
		Name  string
		Input int
	}
	json.Unmarshal(p, &in)
	call(opStepComplete, "", []byte(`{"result":`+strconv.Itoa(2*in.Input)+`}`))
	return 0
}
