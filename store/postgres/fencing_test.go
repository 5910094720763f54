package postgres

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/internal/pgtest"
	"github.com/sandflow/sandflow/store"
)

// Two stores on one database, as two hosts have, race to append at the
// same position, round after round: in each round exactly one commits and
// the other is told ErrSeqConflict, and the log holds the winners'
// batches only.
func TestFencingTwoStores(t *testing.T) {
	schema := newSchema(t)
	a := openSchema(t, schema, Options{})
	b := openSchema(t, schema, Options{})
	mustCreate(t, a, "r")
	const rounds = 40
	var last uint64
	for round := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 2)
		for i, s := range []*Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				batch := step(last)
				batch.Events[0].Data = []byte(fmt.Sprintf(`{"store":%d}`, i))
				<-start
				errs[i] = s.Append(ctxBG, "r", last, batch)
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.Is(err, store.ErrSeqConflict):
			default:
				t.Fatalf("round %d: store %d: %v", round, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d stores committed at seq %d (errors %v)", round, won, last+1, errs)
		}
		last += 2
	}
	for _, s := range []*Store{a, b} {
		evs, err := s.Events(ctxBG, "r", 0, 0)
		if err != nil || len(evs) != 2*rounds {
			t.Fatalf("Events = %d, %v; want %d", len(evs), err, 2*rounds)
		}
		for i, e := range evs {
			if e.Seq != uint64(i+1) {
				t.Fatalf("event %d has seq %d", i, e.Seq)
			}
		}
	}
}

// A writer that holds the run's row (mid-Append on another host) makes a
// second Append wait, and once the first commits, the second is told the
// log moved on: the row lock, not luck, orders them.
func TestFencingWaitsForTheRowLock(t *testing.T) {
	schema := newSchema(t)
	s := openSchema(t, schema, Options{})
	mustCreate(t, s, "r")
	conn, err := pgx.Connect(ctxBG, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctxBG)
	tx, err := conn.Begin(ctxBG)
	if err != nil {
		t.Fatal(err)
	}
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := tx.Exec(ctxBG, `SELECT 1 FROM `+q+`.runs WHERE id = 'r' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- s.Append(ctxBG, "r", 0, step(0)) }()
	// The Append is waiting for the lock: the server says so.
	waiting := false
	for range 200 {
		var n int
		c2, err := pgx.Connect(ctxBG, pgtest.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		err = c2.QueryRow(ctxBG, `SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid()
AND pid IN (SELECT pid FROM pg_stat_activity WHERE query LIKE '%FOR UPDATE%' AND query LIKE '%last_seq%')`).Scan(&n)
		c2.Close(ctxBG)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			waiting = true
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Append returned %v while another transaction held the run's row", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if !waiting {
		t.Fatal("the Append never waited for the row lock")
	}
	// The other writer appends batch 1 and commits.
	if _, err := tx.Exec(ctxBG, `INSERT INTO `+q+`.events (run_id, seq, time_ns, kind, zstd, data) VALUES ('r', 1, 0, 'x', false, ''), ('r', 2, 0, 'x', false, '')`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctxBG, `UPDATE `+q+`.runs SET last_seq = 2,
record = convert_to(jsonb_set(convert_from(record, 'UTF8')::jsonb, '{lastSeq}', '2')::text, 'UTF8') WHERE id = 'r'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctxBG); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, store.ErrSeqConflict) {
		t.Fatalf("Append behind the other writer = %v, want ErrSeqConflict", err)
	}
	if evs, err := s.Events(ctxBG, "r", 0, 0); err != nil || len(evs) != 2 || evs[0].Kind != "x" {
		t.Fatalf("Events = %+v, %v; want the other writer's 2", evs, err)
	}
}

// Events already in the table beyond the run's last_seq (a writer that
// did not keep the row up to date) stop an Append by the (run, seq) key:
// ErrSeqConflict, and nothing of the batch is kept.
func TestAppendRefusesEventsBeyondTheLog(t *testing.T) {
	schema := newSchema(t)
	s := openSchema(t, schema, Options{})
	mustCreate(t, s, "r")
	q := pgx.Identifier{schema}.Sanitize()
	conn, err := pgx.Connect(ctxBG, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctxBG)
	if _, err := conn.Exec(ctxBG, `INSERT INTO `+q+`.events (run_id, seq, time_ns, kind, zstd, data) VALUES ('r', 2, 0, 'x', false, '')`); err != nil {
		t.Fatal(err)
	}
	b := step(0)
	b.PutTimers = []store.Timer{{RunID: "r", ID: "t", FireAt: time.Unix(5, 0)}}
	if err := s.Append(ctxBG, "r", 0, b); !errors.Is(err, store.ErrSeqConflict) {
		t.Fatalf("Append over a stray event = %v, want ErrSeqConflict", err)
	}
	if r, err := s.Run(ctxBG, "r"); err != nil || r.LastSeq != 0 {
		t.Fatalf("Run = %+v, %v; want LastSeq 0", r, err)
	}
	if _, ok, err := s.NextTimer(ctxBG); ok || err != nil {
		t.Fatalf("the refused batch left a timer (%v)", err)
	}
	// Leave the schema as the invariants want it.
	if _, err := conn.Exec(ctxBG, `DELETE FROM `+q+`.events WHERE run_id = 'r'`); err != nil {
		t.Fatal(err)
	}
}
