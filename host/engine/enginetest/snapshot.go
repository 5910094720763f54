package enginetest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/wasmtest"
)

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
