package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/wasmtest"
	"github.com/sandflow/sandflow/store"
)

// TestReviewOutOfBoundsPointerFailsTheRun: abi/README.md ("Memory and who
// allocates"): a pointer/length pair outside the memory is an ABI
// violation that ends the instance and fails the run with a TrapError.
// (abi/README.md once said the run was not failed; it was changed to
// match, since a deterministic guest would repeat the violation
// on every replay.)
func TestReviewOutOfBoundsPointerFailsTheRun(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := context.Background()
		i32 := wasmtest.I32
		op := wasmtest.Import{Module: "sandflow", Name: "op", Params: []byte{i32, i32, i32, i32, i32, i32, i32}, Results: []byte{i32}}
		run := []byte{
			0x41, 0x04, // kind: progress
			0x41, 0x00, 0x41, 0x00, // no name
			0x41, 0x80, 0x80, 0x04, // payload_ptr 65536: one past the single page
			0x41, 0x0a, // payload_len 10
			0x41, 0x00, 0x41, 0x00, // no response buffer
			0x10, 0x00, // call sandflow.op
		}
		wasm := wasmtest.Guest(run, op)
		if _, err := f.h.AddPlugin(ctx, wasm, host.Manifest{Name: "oob", Entry: "execute", InputSchema: json.RawMessage(`{"type":"object"}`)}); err != nil {
			t.Fatal(err)
		}
		ri, err := f.h.Call(ctx, "oob", json.RawMessage(`{}`), nil)
		if err != nil || ri.Status != store.StatusFailed || !errors.Is(ri.Err(), host.ErrGuest) {
			t.Errorf("an out-of-bounds pointer should fail the run with a TrapError: %+v (%v)", ri, err)
		}
	})
}
