package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/sandflow/sandflow/internal/pgtest"
	"github.com/sandflow/sandflow/store"
	"github.com/sandflow/sandflow/store/storetest"
)

var ctxBG = context.Background()

// TestConformance runs the suite the embedded store passes.
func TestConformance(t *testing.T) {
	pgtest.DSN(t)
	storetest.Run(t, opener(Options{}))
}

// TestSimulationCompressEverything runs the simulation again with nearly
// every value compressed.
func TestSimulationCompressEverything(t *testing.T) {
	pgtest.DSN(t)
	storetest.Simulation(t, opener(Options{CompressThreshold: 1}))
}

// TestCrash kills a process appending to the store (its connections die
// with it, their transactions uncommitted) and checks every acknowledged
// batch is there, whole.
func TestCrash(t *testing.T) {
	storetest.Crash(t, func(t *testing.T) string { return newSchema(t) }, func(schema string) (store.Store, error) {
		s, err := Open(ctxBG, pgtest.DSN(t), &Options{Schema: schema, MaxConns: 2})
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

func mustCreate(t *testing.T, s store.Store, id string) {
	t.Helper()
	if err := s.CreateRun(ctxBG, store.Run{ID: id, Status: store.StatusRunning, CreatedAt: time.Unix(1, 0)}, store.Batch{}); err != nil {
		t.Fatalf("CreateRun(%s): %v", id, err)
	}
}

func step(last uint64) store.Batch {
	return store.Batch{Events: []store.Event{
		{Seq: last + 1, Time: time.Unix(2, int64(last)), Kind: "step", Data: []byte(`{}`)},
		{Seq: last + 2, Time: time.Unix(2, int64(last)+1), Kind: "done", Data: []byte(`{}`)},
	}}
}
