package postgres

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/internal/pgtest"
	"github.com/sandflow/sandflow/store"
)

// leaseRow reads run id's lease row and the epoch its run's row keeps
// (0, false when there is no lease row).
func leaseRow(t *testing.T, schema, id string) (epoch int64, ok bool, kept int64) {
	t.Helper()
	conn, err := pgx.Connect(ctxBG, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctxBG)
	q := pgx.Identifier{schema}.Sanitize()
	err = conn.QueryRow(ctxBG, `SELECT epoch FROM `+q+`.leases WHERE run_id = $1`, id).Scan(&epoch)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	ok = err == nil
	if err := conn.QueryRow(ctxBG, `SELECT lease_epoch FROM `+q+`.runs WHERE id = $1`, id).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	return epoch, ok, kept
}

// ending is step(last) that ends the run.
func ending(last uint64) store.Batch {
	b := step(last)
	b.Run = &store.Run{ID: "r", Status: store.StatusCompleted, CreatedAt: time.Unix(1, 0), LastSeq: last + 2}
	return b
}

// The release of an ended run's lease deletes the lease row, and the
// run's next lease is taken above the deleted one's epoch: a host that
// held an older lease is still refused. A run that has not ended keeps
// its released row.
func TestLeaseOfEndedRunDeleted(t *testing.T) {
	schema := newSchema(t)
	a, b := openSchema(t, schema, Options{}), openSchema(t, schema, Options{})
	mustCreate(t, a, "r")
	l1, err := a.AcquireLease(ctxBG, "r", "A", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctxBG, "r", 0, leased(step(0), l1)); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseLease(ctxBG, "r", l1); err != nil {
		t.Fatal(err)
	}
	if e, ok, _ := leaseRow(t, schema, "r"); !ok || e != 1 {
		t.Fatalf("lease row of a waiting run after release: epoch %d, present %v; want epoch 1 kept", e, ok)
	}
	l2, err := b.AcquireLease(ctxBG, "r", "B", time.Hour)
	if err != nil || l2.Epoch != 2 {
		t.Fatalf("AcquireLease = %v, %v; want epoch 2", l2, err)
	}
	if err := b.Append(ctxBG, "r", 2, leased(ending(2), l2)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := leaseRow(t, schema, "r"); !ok {
		t.Fatal("the lease row of an ended run went before its lease was released")
	}
	if err := b.ReleaseLease(ctxBG, "r", l2); err != nil {
		t.Fatal(err)
	}
	if e, ok, kept := leaseRow(t, schema, "r"); ok || kept != 2 {
		t.Fatalf("after the ended run's release: lease row epoch %d present %v, kept epoch %d; want no row, 2 kept", e, ok, kept)
	}
	// Both earlier holders are refused, with no lease row and after the
	// next lease is taken.
	for _, l := range []store.Lease{l1, l2} {
		if err := a.Append(ctxBG, "r", 4, leased(step(4), l)); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("Append under %v with no lease row = %v, want ErrLeaseLost", l, err)
		}
		if err := a.RenewLease(ctxBG, "r", l, time.Hour); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("RenewLease of %v with no lease row = %v, want ErrLeaseLost", l, err)
		}
	}
	l3, err := a.AcquireLease(ctxBG, "r", "B", time.Hour)
	if err != nil || l3.Epoch != 3 {
		t.Fatalf("AcquireLease of an ended run = %v, %v; want epoch 3, above the deleted lease", l3, err)
	}
	if err := b.Append(ctxBG, "r", 4, leased(step(4), l2)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Append under the deleted lease %v, same owner, after a new one = %v, want ErrLeaseLost", l2, err)
	}
	// A stale release leaves the new lease alone; its own release deletes it.
	if err := b.ReleaseLease(ctxBG, "r", l2); err != nil {
		t.Fatal(err)
	}
	if e, ok, _ := leaseRow(t, schema, "r"); !ok || e != 3 {
		t.Fatalf("a stale release touched the lease: epoch %d present %v", e, ok)
	}
	if err := a.ReleaseLease(ctxBG, "r", l3); err != nil {
		t.Fatal(err)
	}
	if _, ok, kept := leaseRow(t, schema, "r"); ok || kept != 3 {
		t.Fatalf("second release: row present %v, kept %d; want none, 3", ok, kept)
	}
}

// The release that deletes an ended run's lease races hosts taking the
// run's lease (AcquireLease) and claiming runs (ClaimRuns, which also
// takes the run's due timer): whichever order the server picks, every
// lease taken is above every earlier epoch, no two hosts hold the run at
// once, and the holder of an older lease is refused.
func TestLeaseDeletionRace(t *testing.T) {
	schema := newSchema(t)
	stores := []*Store{openSchema(t, schema, Options{}), openSchema(t, schema, Options{}), openSchema(t, schema, Options{})}
	const rounds = 40
	for round := range rounds {
		id := fmt.Sprintf("r%d", round)
		mustCreate(t, stores[0], id)
		l, err := stores[0].AcquireLease(ctxBG, id, "A", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		end := step(0)
		end.Run = &store.Run{ID: id, Status: store.StatusCompleted, CreatedAt: time.Unix(1, 0), LastSeq: 2}
		// A timer left due makes the ended run a candidate for claims.
		end.PutTimers = []store.Timer{{RunID: id, ID: "t", FireAt: time.Unix(3, 0)}}
		if err := stores[0].Append(ctxBG, id, 0, leased(end, l)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		taken := make([]store.Lease, 3)
		errs := make([]error, 3)
		var claimed atomic.Int32 // 1: C claimed nothing, 2: C claimed the run
		wg.Add(3)
		go func() {
			defer wg.Done()
			<-start
			errs[0] = stores[0].ReleaseLease(ctxBG, id, l)
		}()
		go func() {
			defer wg.Done()
			<-start
			for {
				taken[1], errs[1] = stores[1].AcquireLease(ctxBG, id, "B", time.Hour)
				if !errors.Is(errs[1], store.ErrLeaseHeld) || claimed.Load() == 2 {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			cs, err := stores[2].ClaimRuns(ctxBG, "C", time.Hour, 100)
			errs[2] = err
			claimed.Store(1)
			for _, c := range cs {
				if c.RunID == id {
					taken[2] = c.Lease
					claimed.Store(2)
				}
			}
		}()
		close(start)
		wg.Wait()
		if claimed.Load() == 2 && errors.Is(errs[1], store.ErrLeaseHeld) {
			errs[1] = nil
		}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, host %d: %v", round, i, err)
			}
		}
		holder := 1
		if taken[2].Epoch != 0 {
			holder = 2
		}
		if (taken[1].Epoch != 0) == (taken[2].Epoch != 0) {
			t.Fatalf("round %d: B took %v and C claimed %v, want exactly one", round, taken[1], taken[2])
		}
		if taken[holder].Epoch <= l.Epoch {
			t.Fatalf("round %d: the lease taken, %v, is not above the released %v", round, taken[holder], l)
		}
		if err := stores[0].Append(ctxBG, id, 2, leased(step(2), l)); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("round %d: Append under the released lease = %v, want ErrLeaseLost", round, err)
		}
		if err := stores[holder].ReleaseLease(ctxBG, id, taken[holder]); err != nil {
			t.Fatal(err)
		}
		if _, ok, kept := leaseRow(t, schema, id); ok || kept != int64(taken[holder].Epoch) {
			t.Fatalf("round %d: after the last release: row present %v, kept %d, want none, %d", round, ok, kept, taken[holder].Epoch)
		}
	}
}

// Migration 4 deletes the lease rows ended runs kept before it, keeping
// their epochs in the runs' rows, and leaves the others' alone.
func TestMigration4DeletesEndedRunsLeases(t *testing.T) {
	schema := newSchema(t)
	s := openSchema(t, schema, Options{})
	mustCreate(t, s, "r")
	mustCreate(t, s, "w")
	for _, id := range []string{"r", "w"} {
		for range 3 {
			l, err := s.AcquireLease(ctxBG, id, "A", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.RenewLease(ctxBG, id, l, -time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Append(ctxBG, "r", 0, ending(0)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Back to schema 3, as an older build left it.
	conn, err := pgx.Connect(ctxBG, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctxBG)
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctxBG, `ALTER TABLE `+q+`.runs DROP COLUMN lease_epoch; UPDATE `+q+`.sandflow_schema SET version = 3`); err != nil {
		t.Fatal(err)
	}
	openSchema(t, schema, Options{})
	if e, ok, kept := leaseRow(t, schema, "r"); ok || kept != 3 {
		t.Fatalf("ended run after migration 4: lease row epoch %d present %v, kept %d; want none, 3", e, ok, kept)
	}
	if e, ok, kept := leaseRow(t, schema, "w"); !ok || e != 3 || kept != 0 {
		t.Fatalf("waiting run after migration 4: lease row epoch %d present %v, kept %d; want epoch 3 kept in the row", e, ok, kept)
	}
}
