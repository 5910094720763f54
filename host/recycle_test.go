package host_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// stdoutOf is what a run wrote to stdout, as its log records it.
func stdoutOf(t *testing.T, h *host.Host, id string) string {
	t.Helper()
	var out strings.Builder
	for _, d := range eventsOf(t, h, id, host.EvOutput) {
		if d["stream"] == "stdout" {
			s, _ := d["data"].(string)
			out.WriteString(s)
		}
	}
	return out.String()
}

// A finished run's instance is reset and reused by the next run. A guest
// that closes stdout changes no state outside its memory and globals:
// the host's WASI refuses fd_close on both engines, so its instance is
// reused too, and the next runs' stdout works.
func TestInstanceReuse(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		reuses := strings.HasPrefix(engineFor(t).Name(), "wazero")
		k := newKitchen(t, &host.Options{PreInit: 2, MaxWarm: -1})
		reused := func() int64 {
			// Instances are reset in the background: wait for them.
			if err := k.h.WaitPreInit(context.Background()); err != nil {
				t.Fatal(err)
			}
			return k.h.InstanceStats().Reused
		}

		for i := range 3 {
			before := reused()
			if ri := k.run(`{"mode":"steps","n":2}`); result[int](t, ri) != 1 {
				t.Fatalf("steps: %+v", ri)
			}
			// Each activation's instance is reset after it: the host
			// parks none.
			if got := reused() - before; (got > 0) != reuses || got > 3 {
				t.Fatalf("run %d: %d instances reused over its 3 activations", i, got)
			}
		}

		before := reused()
		ri := k.run(`{"mode":"close-stdout"}`)
		if ri.Status != store.StatusCompleted {
			t.Fatalf("close-stdout: %+v: %+v", ri, ri.Error)
		}
		closed := result[struct {
			CloseErr    string
			WriteFailed bool
		}](t, ri)
		if !closed.WriteFailed {
			t.Fatalf("writing to the closed stdout did not fail (closing it: %q)", closed.CloseErr)
		}
		if closed.CloseErr == "" {
			t.Errorf("closing stdout succeeded: the host's fd_close must refuse")
		}
		if got := reused() - before; (got > 0) != reuses {
			t.Errorf("the instance whose guest closed stdout: %d reused, want reuse %v", got, reuses)
		}
		if out := stdoutOf(t, k.h, ri.ID); out != "before close\n" {
			t.Errorf("close-stdout wrote %q", out)
		}

		// Every pooled instance, reused or new, still has its stdout.
		for range 4 {
			ri := k.run(`{"mode":"print","n":1,"text":"hello","ms":0}`)
			ri = k.settle(ri.ID, 10*1e9)
			if ri.Status != store.StatusCompleted {
				t.Fatalf("print: %+v", ri)
			}
			if out := stdoutOf(t, k.h, ri.ID); out != "hello\nafter sleep\n" {
				t.Fatalf("print wrote %q", out)
			}
		}
		st := k.h.InstanceStats()
		if reuses != (st.Reused > 0) || st.Made == 0 {
			t.Errorf("instance stats %+v", st)
		}
	})
}
