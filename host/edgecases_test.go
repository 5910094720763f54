package host_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

const edgeCasesDir = "host/testdata/guests/edgecases"

// blocker is a capability that signals when a step enters it and waits
// until the test releases it.
type blocker struct {
	entered chan string
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan string, 16), release: make(chan struct{})}
}

func (b *blocker) capability() host.Capability {
	return func(ctx context.Context, call host.CapabilityCall) (json.RawMessage, error) {
		b.entered <- call.StepID
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return json.RawMessage(`1`), nil
	}
}

// edgeCases is a host with the edgecases guest (one tool whose input mode
// picks a scenario of the kernel's edges) and the capabilities it calls.
type edgeCases struct {
	*fixture
	count *counter
	block *blocker
}

// newEdgeCases opens a host with the edgecases guest registered as
// "edgecases"; its "count" and "block" capabilities are the fixture's.
func newEdgeCases(t testing.TB, opts *host.Options) *edgeCases {
	t.Helper()
	c := &counter{n: map[string]int{}}
	b := newBlocker()
	var o host.Options
	if opts != nil {
		o = *opts
	}
	o.Capabilities = map[string]host.Capability{"count": c.capability(), "block": b.capability()}
	r := &edgeCases{fixture: newFixture(t, &o), count: c, block: b}
	r.add(edgeCasesDir)
	return r
}

// addAs registers the edgecases guest again under another name with
// limits.
func (r *edgeCases) addAs(name string, l *host.ManifestLimits) {
	r.t.Helper()
	m := manifest(r.t, edgeCasesDir)
	m.Name, m.Limits = name, l
	if _, err := r.h.AddPlugin(context.Background(), guest(r.t, edgeCasesDir), m); err != nil {
		r.t.Fatal(err)
	}
}

// fireUntilDone fires due timers until the run no longer waits on one.
func (r *edgeCases) fireUntilDone(id string, limit time.Duration) host.RunInfo {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ri, err := r.h.Run(context.Background(), id)
		if err != nil {
			r.t.Fatal(err)
		}
		onTimer := ri.Status == store.StatusRunning
		for _, w := range ri.Waiting {
			onTimer = onTimer || w.Kind == "sleep" || w.Kind == "step_retry"
		}
		if !onTimer {
			return ri
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("run %s still waits on a timer after %s: %+v", id, limit, ri)
		}
		if _, err := r.h.FireDue(context.Background(), time.Now().Add(time.Hour), nil); err != nil {
			r.t.Fatal(err)
		}
		if _, err := r.h.Drive(context.Background(), id); err != nil {
			return ri
		}
	}
}

// eventsOf returns a run's events of one kind, decoded.
func eventsOf(t testing.TB, h *host.Host, id, kind string) []map[string]any {
	t.Helper()
	evs, err := h.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, e := range evs {
		if e.Kind != kind {
			continue
		}
		var d map[string]any
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}
