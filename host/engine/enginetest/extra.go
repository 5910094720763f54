package enginetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/wasmtest"
)

// store is the code of i32.store of v at addr.
func store(addr, v int32) []byte {
	return append(append(wasmtest.I32Const(addr), wasmtest.I32Const(v)...), 0x36, 0x02, 0x00)
}

// load is the code of i32.load at addr.
func load(addr int32) []byte { return append(wasmtest.I32Const(addr), 0x28, 0x02, 0x00) }

func call(fn byte, args ...int32) []byte {
	var b []byte
	for _, v := range args {
		b = append(b, wasmtest.I32Const(v)...)
	}
	return append(b, 0x10, fn)
}

var readImport = wasmtest.Import{Module: "sandflow", Name: "read",
	Params: []byte{wasmtest.I32, wasmtest.I32}, Results: []byte{wasmtest.I32}}

func wasiImport(name string, params ...byte) wasmtest.Import {
	return wasmtest.Import{Module: "wasi_snapshot_preview1", Name: name, Params: params, Results: []byte{wasmtest.I32}}
}

// Ops reach the handler with their kind, name and payload as the guest
// laid them out; a body that fits the guest's buffer is written there, and
// one that does not is held for sandflow.read.
func opsRoundTrip(t *testing.T, c *Case) {
	const small = 10
	var ops int
	big := bytes.Repeat([]byte("0123456789"), 10)
	c.Config.Ops = OpFunc(func(_ context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
		ops++
		if string(name) != "ping" || string(payload) != "abc" {
			t.Errorf("op %d: %s name %q payload %q", ops, kind, name, payload)
		}
		if kind == 3 {
			return big, nil
		}
		return []byte("okay...."), nil
	})
	var b []byte
	b = append(b, store(0, 'p'|'i'<<8|'n'<<16|'g'<<24)...)
	b = append(b, store(8, 'a'|'b'<<8|'c'<<16)...)
	for range small {
		b = append(append(b, call(0, 2, 0, 4, 8, 3, 64, 64)...), 0x1a) // drop the length
	}
	b = append(append(b, call(0, 3, 0, 4, 8, 3, 64, 64)...), 0x1a) // 100 bytes: held
	b = append(append(b, call(1, 200, 100)...), 0x1a)              // read them
	b = append(append(append(b, load(64)...), load(296)...), 0x6a) // the small body's start + the big one's end
	res, _, err := c.Run(context.Background(), wasmtest.Guest(b, wasmtest.OpImport, readImport))
	want := int32(binary.LittleEndian.Uint32([]byte("okay")) + binary.LittleEndian.Uint32(big[96:]))
	if err != nil || res != want {
		t.Fatalf("sandflow_run returned %d, %v; want %d", res, err, want)
	}
	if ops != small+1 {
		t.Errorf("%d ops reached the handler, want %d", ops, small+1)
	}
}

// The WASI clocks and random_get read the InstanceConfig's clock and
// generator.
func clockAndRandom(t *testing.T, c *Case) {
	clockTimeGet := wasiImport("clock_time_get", wasmtest.I32, wasmtest.I64, wasmtest.I32)
	randomGet := wasiImport("random_get", wasmtest.I32, wasmtest.I32)
	var b []byte
	for _, id := range []int32{0, 1} { // realtime, monotonic
		b = append(b, wasmtest.I32Const(id)...)
		b = append(b, 0x42, 0x01) // i64.const 1: the precision
		b = append(b, wasmtest.I32Const(300+8*id)...)
		b = append(b, 0x10, 0x00, 0x1a) // call clock_time_get, drop the errno
	}
	b = append(append(b, call(1, 400, 4)...), 0x1a)
	for _, at := range []int32{300, 308} {
		b = append(b, wasmtest.I32Const(at)...)
		b = append(b, 0x29, 0x03, 0x00, 0xa7) // i64.load, i32.wrap_i64
	}
	b = append(b, 0x6a)
	b = append(append(b, load(400)...), 0x6a)
	res, _, err := c.Run(context.Background(), wasmtest.Guest(b, clockTimeGet, randomGet))
	now := startClock
	want := int32(2*uint32(now) + 0x5a5a5a5a)
	if err != nil || res != want {
		t.Fatalf("sandflow_run returned %d, %v; want %d (the clock twice and the generator's bytes)", res, err, want)
	}
}

// The guest sees the host's WASI (internal/wasip1) on every engine: the
// standard streams cannot be closed (ENOTSUP), there is no other
// descriptor (EBADF), and there are no arguments.
func wasiErrnos(t *testing.T, c *Case) {
	fdClose := wasiImport("fd_close", wasmtest.I32)
	argsSizes := wasiImport("args_sizes_get", wasmtest.I32, wasmtest.I32)
	var b []byte
	b = append(b, call(0, 1)...)
	b = append(append(b, wasmtest.I32Const(100)...), 0x6c) // * 100
	b = append(append(b, call(0, 5)...), 0x6a)
	b = append(b, store(500, -1)...)
	b = append(b, store(504, -1)...)
	b = append(append(b, call(1, 500, 504)...), 0x6a)
	b = append(append(append(b, load(500)...), 0x6a), append(load(504), 0x6a)...)
	res, _, err := c.Run(context.Background(), wasmtest.Guest(b, fdClose, argsSizes))
	if want := int32(58*100 + 8); err != nil || res != want {
		t.Fatalf("fd_close(1)*100 + fd_close(5) + args_sizes_get and its counts: %d, %v; want %d", res, err, want)
	}
}

// An instance that is an engine.Snapshotter can be copied into a fresh one
// through its memory and globals, and reset to a base image; bad
// snapshots are refused with engine.ErrSnapshot.
func (s Suite) snapshot(t *testing.T, c *Case) {
	// sandflow_run counts its calls at address 1024 and returns the count.
	body := append(append(append(wasmtest.I32Const(1024), load(1024)...), wasmtest.I32Const(1)...), 0x6a)
	body = append(append(body, 0x36, 0x02, 0x00), load(1024)...)
	wasm := wasmtest.Guest(body)
	ctx := context.Background()
	cm, err := c.Engine.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close(ctx)
	if sm, ok := cm.(engine.SnapshotModule); !ok || !sm.CanSnapshot() {
		if s.Snapshots {
			t.Fatalf("the engine snapshots, but its module %T cannot", cm)
		}
		return // the engine does not snapshot: nothing more to hold
	}
	mk := func() engine.Snapshotter {
		inst, err := cm.Instantiate(ctx, c.Config)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inst.Close(ctx) })
		s, ok := inst.(engine.Snapshotter)
		if !ok {
			t.Fatalf("the module can snapshot, but its instance %T is no engine.Snapshotter", inst)
		}
		return s
	}
	callRun := func(s engine.Snapshotter, want int32) {
		t.Helper()
		if n, err := s.Call(ctx, abi.RunExport); err != nil || n != want {
			t.Fatalf("sandflow_run: %d, %v; want %d", n, err, want)
		}
	}
	a := mk()
	base := engine.NewBaseImage(bytes.Clone(a.Memory()))
	callRun(a, 1)
	callRun(a, 2)
	mem, globals := bytes.Clone(a.Memory()), a.Globals()

	b := mk()
	if err := b.GrowMemory(uint64(len(mem))); err != nil {
		t.Fatal(err)
	}
	copy(b.Memory(), mem)
	if err := b.SetGlobals(globals); err != nil {
		t.Fatal(err)
	}
	callRun(b, 3)
	if err := b.SetGlobals(append(globals, 0)); !errors.Is(err, engine.ErrSnapshot) {
		t.Errorf("one global too many: %v, want engine.ErrSnapshot", err)
	}
	if err := b.GrowMemory(uint64(len(mem)) - 65536); !errors.Is(err, engine.ErrSnapshot) {
		t.Errorf("shrinking the memory: %v, want engine.ErrSnapshot", err)
	}

	if m, ok := a.(engine.BaseMapped); ok {
		// A reset through the image's file, where there is one, gives the
		// image back; the next run's writes are the instance's own.
		if m.ResetToBase(base) {
			if !bytes.Equal(a.Memory(), base.Bytes()) {
				t.Fatal("the memory is not the base image after ResetToBase")
			}
			callRun(a, 1)
			if own, ok := m.OwnChunks(base); ok && (len(own) == 0 || own[0] != 1024/engine.ChunkSize) {
				t.Errorf("own chunks after writing address 1024: %v", own)
			}
		}
	}

	if !a.Restorable() {
		t.Error("an open instance is not restorable")
	}
	a.Close(ctx)
	if a.Restorable() {
		t.Error("a closed instance is restorable")
	}
}
