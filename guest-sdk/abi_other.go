//go:build !wasip1

package sandflow

import "github.com/sandflow/sandflow/abi"

// doOp is only available in a guest: build with GOOS=wasip1 GOARCH=wasm.
// Off wasm, a test may set hostForTest to answer ops.
func doOp(kind abi.OpKind, name string, payload []byte) response {
	if hostForTest == nil {
		panic("sandflow guest SDK: ops are only available under GOOS=wasip1 GOARCH=wasm")
	}
	return parseResponse(kind, hostForTest(kind, name, payload))
}

// hostForTest answers ops in tests that run off wasm.
var hostForTest func(kind abi.OpKind, name string, payload []byte) []byte
