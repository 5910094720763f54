package host

import (
	"context"
	"io"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
)

// Pre-initialised instances. Instantiating a Go guest and running its
// _initialize takes milliseconds (on wazero most of a cold resume), so with
// Options.PreInit each WebAssembly plugin version in use keeps a few
// workflow instances made ahead of demand. For that to be invisible to the
// guest, every workflow instance of a run created with PreInit on (its
// run_created records sharedInit), pooled or made on demand, is
// initialised the same way: on a clock that reads initEpoch and a
// generator with a fixed seed, with its output discarded and its ops
// refused. Only then is it bound to its run's clock, generator, output and
// ops. The price: what a guest's runtime draws while it initialises (Go's
// map hash seeds and math/rand's global source) is the same in every such
// run; crypto/rand and everything read after initialisation stay the
// run's own. Runs created without it initialise on their run's sources, as
// they always did, and never use the pool.

// initEpoch is the time a guest's initialisation sees: the same for every
// instance. A run's clock starts later, so the guest's clock never goes
// back.
var initEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// binding is what an instance's WASI and op imports reach: the
// initialisation's sources until bind, the run's after.
type binding struct {
	clock        GuestClock
	random       io.Reader
	stdout, errw io.Writer
	ops          OpHandler
}

func newBinding() *binding {
	b := &binding{}
	b.unbind()
	return b
}

// bind hands the instance to its run.
func (b *binding) bind(w *wfInstance) {
	w.bind = b
	b.clock, b.random, b.ops = &w.clock, w.rng, w
	b.stdout, b.errw = outWriter{w, "stdout"}, outWriter{w, "stderr"}
}

func (b *binding) Now() int64                 { return b.clock.Now() }
func (b *binding) Sleep(ns int64)             { b.clock.Sleep(ns) }
func (b *binding) Read(p []byte) (int, error) { return b.random.Read(p) }
func (b *binding) config(lp *loadedPlugin) InstanceConfig {
	return InstanceConfig{
		Clock: b, Random: b, Ops: b,
		Stdout: bindingWriter{b, false}, Stderr: bindingWriter{b, true},
		MemoryLimit: lp.limits.MemoryBytes, CPULimit: lp.limits.CPUTime, Name: lp.m.Name,
	}
}

func (b *binding) Op(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
	return b.ops.Op(ctx, kind, name, payload)
}

type bindingWriter struct {
	b      *binding
	stderr bool
}

func (w bindingWriter) Write(p []byte) (int, error) {
	if w.stderr {
		return w.b.errw.Write(p)
	}
	return w.b.stdout.Write(p)
}

// freshInstance is an initialised workflow instance not yet bound to a run.
type freshInstance struct {
	inst Instance
	b    *binding
}

// instantiate makes and initialises a workflow instance of the plugin.
func (h *Host) instantiate(ctx context.Context, lp *loadedPlugin) (freshInstance, error) {
	b := newBinding()
	inst, err := lp.cm.Instantiate(ctx, b.config(lp))
	if err != nil {
		return freshInstance{}, err
	}
	h.insts.made.Add(1)
	if err := checkVersion(ctx, inst); err != nil {
		inst.Close(ctx)
		return freshInstance{}, err
	}
	return freshInstance{inst, b}, nil
}

// takeFresh returns a pre-initialised instance of the plugin, or makes
// one. The activation that takes it refills the pool when it is done
// (activate), so the refill does not compete with the resume. When the
// pool is empty but instances are being reset for it, it waits for one:
// a reset takes tens of microseconds, an instantiation milliseconds.
func (h *Host) takeFresh(ctx context.Context, lp *loadedPlugin) (freshInstance, error) {
	if _, ok := lp.cm.(engine.Poolable); !ok || h.preInit() == 0 {
		return h.instantiate(ctx, lp)
	}
	lp.mu.Lock()
	for len(lp.fresh) == 0 && lp.resetting > 0 && !lp.closed {
		if lp.resetDone == nil {
			lp.resetDone = make(chan struct{})
		}
		done := lp.resetDone
		lp.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return freshInstance{}, ctx.Err()
		}
		lp.mu.Lock()
	}
	var f freshInstance
	if n := len(lp.fresh); n > 0 {
		f, lp.fresh = lp.fresh[n-1], lp.fresh[:n-1]
	}
	lp.mu.Unlock()
	if f.inst != nil {
		return f, nil
	}
	return h.instantiate(ctx, lp)
}

// resetFinished notes, with lp.mu held, that an instance being reset for
// the pool is done with (pooled or closed), waking takeFresh's waiters.
func (lp *loadedPlugin) resetFinished() {
	lp.resetting--
	if lp.resetDone != nil {
		close(lp.resetDone)
		lp.resetDone = nil
	}
}

// refill tops the plugin's pool up to the host's PreInit, on one goroutine
// per plugin at a time. An instance that fails to instantiate stops it:
// the next take instantiates on demand, and reports the error.
func (h *Host) refill(lp *loadedPlugin) {
	want := h.preInit()
	lp.mu.Lock()
	if lp.filling || len(lp.fresh)+lp.resetting >= want || h.life.Err() != nil {
		lp.mu.Unlock()
		return
	}
	lp.filling = true
	lp.mu.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		lp.mu.Lock()
		lp.filling = false
		lp.mu.Unlock()
		return
	}
	h.drivers.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.drivers.Done()
		for {
			lp.mu.Lock()
			if len(lp.fresh)+lp.resetting >= want || lp.closed || h.life.Err() != nil {
				lp.filling = false
				lp.mu.Unlock()
				return
			}
			lp.mu.Unlock()
			f, err := h.instantiate(h.life, lp)
			lp.mu.Lock()
			if err != nil || lp.closed {
				lp.filling = false
				lp.mu.Unlock()
				if err == nil {
					f.inst.Close(context.Background())
				}
				return
			}
			lp.fresh = append(lp.fresh, f)
			lp.mu.Unlock()
		}
	}()
}

func (h *Host) preInit() int { return max(h.opts.PreInit, 0) }

func (lp *loadedPlugin) isFilling() bool {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.filling || lp.resetting > 0
}

// sharedInit reports whether a new run of the plugin initialises its
// instances on the shared sources, so that the pool can serve it.
func (h *Host) sharedInit(lp *loadedPlugin) bool {
	_, ok := lp.cm.(engine.Poolable)
	return ok && h.preInit() > 0
}

// closeFresh closes the plugin's pre-initialised instances, for good.
func (lp *loadedPlugin) closeFresh(ctx context.Context) {
	lp.mu.Lock()
	fresh := lp.fresh
	lp.fresh, lp.closed = nil, true
	lp.mu.Unlock()
	for _, f := range fresh {
		f.inst.Close(ctx)
	}
}

// isClosed reports whether the plugin's pool was closed: the host let go
// of the plugin.
func (lp *loadedPlugin) isClosed() bool {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.closed
}

// WaitPreInit waits until no plugin's pool of pre-initialised instances is
// being filled, by new instances or by finished ones being reset
// (recycle.go): for benchmarks and tests that time a resume served from a
// full pool, and for a host warming up before it takes traffic.
func (h *Host) WaitPreInit(ctx context.Context) error {
	for {
		h.mu.Lock()
		filling := false
		for _, lp := range h.plugins {
			filling = filling || lp.isFilling()
		}
		for _, e := range h.adHoc { // modules checked ad hoc have pools too
			filling = filling || e.lp.isFilling()
		}
		h.mu.Unlock()
		if !filling {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}
