package host

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"github.com/sandflow/sandflow/host/history"
	"testing"

	"github.com/sandflow/sandflow/abi"
)

// A hook_next issued after hook_dispose rejects with HookDisposedError
// (abi/README.md, Hooks), even when the hook received a payload before it
// was disposed that no hook_next has taken.
func TestHookNextAfterDisposeIsRejected(t *testing.T) {
	env := newFuzzOpsEnv(t)
	ctx := context.Background()
	r := env.newRun(t, false)
	w, b := r.w, r.b
	op := func(kind abi.OpKind, payload string) (abi.Status, []byte) {
		t.Helper()
		body, err := w.Op(ctx, kind, nil, []byte(payload))
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		return abi.Status(binary.LittleEndian.Uint32(body)), append([]byte(nil), body[8:]...)
	}
	if st, _ := op(abi.OpHookCreate, `{"token":"drain-1"}`); st != abi.StatusOK {
		t.Fatalf("hook_create: %s", st)
	}
	// The activation ends (committed by hand), a payload arrives, and the
	// next activation disposes of the hook and asks for the next payload.
	rs := r.rs
	if _, err := b.push(EvHookReceived, &history.Data{Hook: 1, Payload: json.RawMessage(`{"late":true}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.push(EvRunResumed, &history.Data{Activation: 1}); err != nil {
		t.Fatal(err)
	}
	w.act = rs.Activation()
	if st, _ := op(abi.OpHookDispose, `{"hook":1}`); st != abi.StatusOK {
		t.Fatalf("hook_dispose: %s", st)
	}
	st, payload := op(abi.OpHookNext, `{"hook":1}`)
	if st == abi.StatusOK {
		t.Errorf("hook_next after hook_dispose fulfilled with %s, want a HookDisposedError", payload)
	}
}
