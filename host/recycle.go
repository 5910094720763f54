package host

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"

	"github.com/sandflow/sandflow/host/engine"
)

// Reusing instances. Instantiating a Go guest costs milliseconds, most of
// it wazero copying the module's data into a new memory; a trivial tool
// call needs far less. So a workflow instance whose run is done with it (the
// run completed, or suspended without being parked, or its parked instance
// was evicted) goes back to its plugin's pool of pre-initialised instances
// instead of being closed, after its state is reset to the plugin's base
// image: the memory chunks that differ from it are written back, and the
// mutable globals set. The base image is the state of an instance
// initialised on the shared sources (preinit.go), so a reset instance is
// what instantiating would have made, and the guest cannot tell them
// apart; replay stays the truth either way.
//
// Only what a snapshot can restore is reset, so only instances a snapshot
// could be taken of are reused: a module whose code changes a table or
// drops a segment (canSnapshot), one that grew its memory past the base
// image's size (memory cannot shrink) or was closed by an error
// (engine.Snapshotter.Restorable), and instances not made on the shared sources, are
// closed as before. A guest's file descriptors are not such state: the
// host's WASI (internal/wasip1) keeps no descriptor table for it to
// change.

// InstanceStats counts how the host came by its WebAssembly workflow
// instances since it opened.
type InstanceStats struct {
	// Made: instances instantiated and initialised. Reused: instances of
	// finished activations reset to their plugin's base image and pooled.
	Made, Reused int64
}

type instCounters struct{ made, reused atomic.Int64 }

// InstanceStats returns the host's instance counts.
func (h *Host) InstanceStats() InstanceStats {
	return InstanceStats{Made: h.insts.made.Load(), Reused: h.insts.reused.Load()}
}

// recycle returns a workflow instance its run is done with to its
// plugin's pool, or closes it when it cannot be reused or the pool is
// full. The reset happens in the background, off the path of the call or
// resume that finished with the instance; refill counts the instances
// being reset as pooled, so it does not make new ones meanwhile. dirty
// lists the memory chunks known to differ from the base image (a snapshot
// just compared them); nil means compare them all.
func (h *Host) recycle(ctx context.Context, w *wfInstance, dirty []uint32) {
	inst, b, lp := w.inst, w.bind, w.plugin
	w.inst, w.bind = nil, nil
	if inst == nil {
		return
	}
	s, ok := inst.(engine.Snapshotter)
	if !ok || b == nil || !canSnapshot(lp) || !s.Restorable() || !h.reserveReset(lp) {
		inst.Close(ctx)
		return
	}
	go func() {
		defer h.drivers.Done()
		base, err := h.base(h.life, lp)
		if err == nil {
			err = resetToBase(s, base, dirty)
		}
		lp.mu.Lock()
		lp.resetFinished()
		if err != nil || lp.closed || len(lp.fresh) >= h.poolCap() {
			lp.mu.Unlock()
			inst.Close(context.Background())
			return
		}
		b.unbind()
		lp.fresh = append(lp.fresh, freshInstance{inst, b})
		lp.mu.Unlock()
		h.insts.reused.Add(1)
	}()
}

// reserveReset counts an instance as being reset for the plugin's pool,
// if the pool has room for it and the host is open.
func (h *Host) reserveReset(lp *loadedPlugin) bool {
	if _, ok := lp.cm.(engine.Poolable); !ok {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.closed || len(lp.fresh)+lp.resetting >= h.poolCap() {
		return false
	}
	lp.resetting++
	h.drivers.Add(1)
	return true
}

// poolCap is how many instances a plugin's pool holds with the reused
// ones: twice what refill tops it up to, since a run that took an
// instance has usually had it replaced by the time it returns it.
func (h *Host) poolCap() int { return 2 * h.preInit() }

// resetToBase makes an instance's memory and globals the base image's
// again. Its memory must be the base image's size.
func resetToBase(s engine.Snapshotter, base *baseImage, dirty []uint32) error {
	mem := s.Memory()

	if len(mem) != len(base.mem) {
		return fmt.Errorf("%w: memory of %d bytes, the base image has %d", errSnapshot, len(mem), len(base.mem))
	}
	if m, ok := s.(engine.BaseMapped); ok && m.ResetToBase(base.img) {
		// Reset through the image's file (internal/linmem).
	} else if dirty == nil {
		for off := 0; off < len(mem); off += snapChunk {
			end := min(off+snapChunk, len(mem))
			if !bytes.Equal(mem[off:end], base.mem[off:end]) {
				copy(mem[off:end], base.mem[off:end])
			}
		}
	} else {
		for _, c := range dirty {
			off := int(c) * snapChunk
			if off >= len(mem) {
				return fmt.Errorf("%w: chunk %d is past the memory", errSnapshot, c)
			}
			end := min(off+snapChunk, len(mem))
			copy(mem[off:end], base.mem[off:end])
		}
	}
	return s.SetGlobals(base.globals)
}

// unbind gives a reset instance back its initialisation's sources, as a
// pooled instance has until a run takes it.
func (b *binding) unbind() {
	c := &logicalClock{}
	c.advance(initEpoch)
	b.clock, b.random, b.ops = c, rand.NewChaCha8([32]byte{}), &probeOps{}
	b.stdout, b.errw = io.Discard, io.Discard
}
