package host

import (
	"context"
	"errors"
	"testing"
	"time"
)

// idleInstance is an Instance that is never called.
type idleInstance struct{}

func (idleInstance) Call(context.Context, string) (int32, error) {
	return 0, errors.New("not callable")
}
func (idleInstance) Close(context.Context) error { return nil }

// poolableModule is a compiled module whose instances are pooled, and
// that cannot make any.
type poolableModule struct{}

func (poolableModule) Instantiate(context.Context, InstanceConfig) (Instance, error) {
	return nil, errors.New("not instantiable")
}
func (poolableModule) Close(context.Context) error { return nil }
func (poolableModule) Poolable()                   {}

// A take from an empty pool with an instance being reset for it waits for
// that instance instead of making one (which this plugin, with no
// compiled module behind it, could not), and gives up when its context
// ends.
func TestTakeFreshWaitsForReset(t *testing.T) {
	h := &Host{opts: Options{PreInit: 2}}
	lp := &loadedPlugin{cm: poolableModule{}, resetting: 1}
	got := make(chan freshInstance, 1)
	go func() {
		f, err := h.takeFresh(context.Background(), lp)
		if err != nil {
			t.Error(err)
		}
		got <- f
	}()
	select {
	case f := <-got:
		t.Fatalf("took %v from an empty pool before the reset finished", f)
	case <-time.After(20 * time.Millisecond):
	}
	want := freshInstance{inst: idleInstance{}}
	lp.mu.Lock()
	lp.fresh = append(lp.fresh, want)
	lp.resetFinished()
	lp.mu.Unlock()
	if f := <-got; f != want {
		t.Fatalf("took %v, want the reset instance", f)
	}
	if lp.resetting != 0 || len(lp.fresh) != 0 || lp.resetDone != nil {
		t.Fatalf("after the take: resetting %d, %d pooled, resetDone %v", lp.resetting, len(lp.fresh), lp.resetDone)
	}

	lp.resetting = 1
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if f, err := h.takeFresh(ctx, lp); !errors.Is(err, context.DeadlineExceeded) || f.inst != nil {
		t.Fatalf("take with the reset never finishing: %v, %v; want the context's error", f, err)
	}
}
