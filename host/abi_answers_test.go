package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/wasmbin"
	"github.com/sandflow/sandflow/internal/wasmtest"
	"github.com/sandflow/sandflow/store"
)

// Guests written byte by byte for what abi/README.md promises about
// sleep payloads, proc_exit and how sandflow_run may return. (Issue 27:
// a guest author had to guess each.)

func pushI32(b []byte, v int64) []byte { return wasmbin.AppendSLEB(append(b, 0x41), v) }

// storeBytes writes s into memory at addr, a byte at a time.
func storeBytes(b []byte, addr int64, s string) []byte {
	for i := 0; i < len(s); i++ {
		b = pushI32(b, addr+int64(i))
		b = pushI32(b, int64(s[i]))
		b = append(b, 0x3a, 0x00, 0x00) // i32.store8
	}
	return b
}

// issueOp issues op kind with the payload at addr and no response buffer,
// dropping the result. op is function 0.
func issueOp(b []byte, kind abi.OpKind, addr int64, payload string) []byte {
	b = storeBytes(b, addr, payload)
	b = pushI32(b, int64(kind))
	b = pushI32(b, 0)
	b = pushI32(b, 0)
	b = pushI32(b, addr)
	b = pushI32(b, int64(len(payload)))
	b = pushI32(b, 0)
	b = pushI32(b, 0)
	return append(b, 0x10, 0x00, 0x1a) // call 0; drop
}

func addGuest(t *testing.T, f *fixture, name string, wasm []byte) {
	t.Helper()
	m := host.Manifest{Name: name, Entry: "execute", InputSchema: json.RawMessage(`{"type":"object"}`)}
	if _, err := f.h.AddPlugin(context.Background(), wasm, m); err != nil {
		t.Fatal(err)
	}
}

// Sleep times are JSON integers: a fraction or an exponent is refused
// (bad_request, recorded at the op's position), an integer is taken.
func TestSleepTimesAreIntegers(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		for i, c := range []struct {
			payload string
			refused bool
		}{
			{`{"ms":1.5}`, true},
			{`{"ms":1.0}`, true},
			{`{"ms":1e3}`, true},
			{`{"until":1.5}`, true},
			{`{"ms":1000}`, false},
		} {
			var run []byte
			run = issueOp(run, abi.OpSleep, 1024, c.payload)
			run = issueOp(run, abi.OpComplete, 2048, `{"result":1}`)
			run = pushI32(run, 0)
			name := "sleep" + string(rune('a'+i))
			addGuest(t, f, name, wasmtest.Guest(run, wasmtest.OpImport))
			ri := f.call(name, `{}`)
			if ri.Status != store.StatusCompleted {
				t.Fatalf("%s: %+v", c.payload, ri)
			}
			refused := eventsOf(t, f.h, ri.ID, host.EvOpRefused)
			timers := eventsOf(t, f.h, ri.ID, host.EvTimerSet)
			switch {
			case c.refused && (len(refused) != 1 || refused[0]["status"] != float64(abi.StatusBadRequest) || refused[0]["op"] != float64(1) || len(timers) != 0):
				t.Errorf("%s should be refused at op 1: refusals %v, timers %v", c.payload, refused, timers)
			case !c.refused && (len(refused) != 0 || len(timers) != 1):
				t.Errorf("%s should set a timer: refusals %v, timers %v", c.payload, refused, timers)
			}
		}
	})
}

// proc_exit in the workflow body fails the run with a TrapError, whatever
// the exit code, 0 included; so does returning without the op the return
// value claims.
func TestBodyEndsOtherThanByComplete(t *testing.T) {
	exit := wasmtest.Import{Module: "wasi_snapshot_preview1", Name: "proc_exit", Params: []byte{wasmtest.I32}}
	cases := []struct {
		name string
		wasm []byte
	}{
		// op is import 0 and proc_exit import 1.
		{"proc_exit 0", wasmtest.Guest(append(pushI32(pushI32(nil, 0), 0), 0x10, 0x01, 0x1a, 0x41, 0x00), wasmtest.OpImport, exit)},
		{"proc_exit 3", wasmtest.Guest(append(pushI32(pushI32(nil, 0), 3), 0x10, 0x01, 0x1a, 0x41, 0x00), wasmtest.OpImport, exit)},
		{"0 without complete", wasmtest.Guest(pushI32(nil, 0))},
		{"1 without suspend", wasmtest.Guest(pushI32(nil, 1))},
		{"2", wasmtest.Guest(pushI32(nil, 2))},
	}
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		for i, c := range cases {
			name := "end" + string(rune('a'+i))
			addGuest(t, f, name, c.wasm)
			ri := f.call(name, `{}`)
			var re *host.RunError
			if ri.Status != store.StatusFailed || !errors.As(ri.Err(), &re) || re.Type != abi.ErrTypeTrap || !errors.Is(ri.Err(), host.ErrGuest) {
				t.Errorf("%s: want a run failed with %s, got %+v", c.name, abi.ErrTypeTrap, ri)
			}
		}
	})
}

// A pointer/length pair outside the guest's memory is an ABI violation
// (abi/README.md, "Memory and who allocates"): it ends the instance and
// fails the run with a TrapError, since a deterministic guest would repeat
// the violation on every replay.
func TestOutOfBoundsPointerFailsTheRun(t *testing.T) {
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
