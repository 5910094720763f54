package wazero

import (
	"fmt"
	"strconv"

	"github.com/tetratelabs/wazero/api"

	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/linmem"
	"github.com/sandflow/sandflow/internal/meter"
)

// MemorySize implements engine.MemorySizer.
func (i *wzInstance) MemorySize() uint64 {
	if i.closed || i.mod == nil || i.mod.Memory() == nil {
		return 0
	}
	return uint64(i.mod.Memory().Size())
}

// The instance's state between export calls, for the host's snapshots and
// resets (engine.Snapshotter, engine.BaseMapped).

// Memory implements engine.Snapshotter.
func (i *wzInstance) Memory() []byte {
	m := i.mod.Memory()
	if m == nil {
		return nil
	}
	b, _ := m.Read(0, m.Size())
	return b
}

// GrowMemory implements engine.Snapshotter.
func (i *wzInstance) GrowMemory(size uint64) error {
	m := i.mod.Memory()
	if m == nil {
		return fmt.Errorf("%w: the instance has no memory", engine.ErrSnapshot)
	}
	cur := uint64(m.Size())
	const page = 1 << 16
	if size < cur || size%page != 0 {
		return fmt.Errorf("%w: memory of %d bytes cannot become %d", engine.ErrSnapshot, cur, size)
	}
	if size > cur {
		if _, ok := m.Grow(uint32((size - cur) / page)); !ok {
			return fmt.Errorf("%w: memory cannot grow to %d bytes", engine.ErrSnapshot, size)
		}
	}
	return nil
}

// mutableGlobals are the module's mutable globals, as the metering
// rewrite exports them.
func (i *wzInstance) mutableGlobals() []api.MutableGlobal {
	if i.globs == nil {
		i.globs = []api.MutableGlobal{}
		for k := 0; ; k++ {
			g, ok := i.mod.ExportedGlobal(meter.GlobalPrefix + strconv.Itoa(k)).(api.MutableGlobal)
			if !ok {
				break
			}
			i.globs = append(i.globs, g)
		}
	}
	return i.globs
}

// Globals implements engine.Snapshotter.
func (i *wzInstance) Globals() []uint64 {
	gs := i.mutableGlobals()
	v := make([]uint64, len(gs))
	for k, g := range gs {
		v[k] = g.Get()
	}
	return v
}

// Restorable implements engine.Snapshotter: memory and globals are the
// instance's whole state until it is closed. (The guest cannot change its
// file descriptors, which would live outside them: internal/wasip1 keeps
// no descriptor table.)
func (i *wzInstance) Restorable() bool { return !i.closed }

// OwnChunks implements engine.BaseMapped.
func (i *wzInstance) OwnChunks(b *engine.BaseImage) ([]uint32, bool) {
	return linmem.OwnChunks(i.gmem, b.File(), engine.ChunkSize)
}

// ResetToBase implements engine.BaseMapped.
func (i *wzInstance) ResetToBase(b *engine.BaseImage) bool {
	return linmem.Reset(i.gmem, b.File(), b.Bytes())
}

// SetGlobals implements engine.Snapshotter.
func (i *wzInstance) SetGlobals(v []uint64) error {
	gs := i.mutableGlobals()
	if len(v) != len(gs) {
		return fmt.Errorf("%w: %d globals, the module has %d", engine.ErrSnapshot, len(v), len(gs))
	}
	for k, g := range gs {
		g.Set(v[k])
	}
	return nil
}
