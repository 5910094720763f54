package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/internal/pgtest"
	"github.com/sandflow/sandflow/store"
	"github.com/sandflow/sandflow/store/storetest"
)

// newSchema makes a schema name of t's own and drops the schema, with
// everything in it, when t ends, after checking the store's invariants
// there.
func newSchema(t testing.TB) string {
	t.Helper()
	dsn := pgtest.DSN(t)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "sandflow_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		checkInvariants(t, conn, schema)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// openSchema opens a store on schema, closed when t ends.
func openSchema(t testing.TB, schema string, opts Options) *Store {
	t.Helper()
	opts.Schema = schema
	if opts.MaxConns == 0 {
		opts.MaxConns = 4
	}
	s, err := Open(context.Background(), pgtest.DSN(t), &opts)
	if err != nil {
		t.Fatalf("Open(schema %s): %v", schema, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// opener gives each test a schema of its own, and the same schema on a
// reopen.
func opener(opts Options) storetest.Opener {
	var mu sync.Mutex
	schemas := map[*testing.T]string{}
	return func(t *testing.T) store.Store {
		t.Helper()
		mu.Lock()
		schema, ok := schemas[t]
		mu.Unlock()
		if !ok {
			schema = newSchema(t)
			mu.Lock()
			schemas[t] = schema
			mu.Unlock()
			t.Cleanup(func() {
				mu.Lock()
				delete(schemas, t)
				mu.Unlock()
			})
		}
		return openSchema(t, schema, opts)
	}
}

// checkInvariants checks, with SQL on the tables, what the store promises
// of its contents beyond what the schema's keys enforce:
//   - every run's events are exactly 1..last_seq, and its record says the
//     same id and last_seq as its columns;
//   - every module's bytes are used by a plugin version (a delete drops
//     them with the last);
//   - no lease is at or below the epoch its run's row keeps, and no ended
//     run keeps a released lease row;
//   - the schema version is this build's.
func checkInvariants(t testing.TB, conn *pgx.Conn, schema string) {
	t.Helper()
	ctx := context.Background()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'runs')`, schema).Scan(&exists); err != nil {
		t.Errorf("invariants: %v", err)
		return
	}
	if !exists {
		return // never opened
	}
	q := pgx.Identifier{schema}.Sanitize()
	checks := map[string]string{
		"run whose log is not 1..last_seq": `SELECT r.id FROM ` + q + `.runs r
LEFT JOIN (SELECT run_id, count(*) n, min(seq) lo, max(seq) hi FROM ` + q + `.events GROUP BY run_id) e ON e.run_id = r.id
WHERE coalesce(e.n, 0) <> r.last_seq OR (e.n > 0 AND (e.lo <> 1 OR e.hi <> r.last_seq))`,
		"run record that disagrees with its columns": `SELECT id FROM ` + q + `.runs
WHERE convert_from(record, 'UTF8')::jsonb ->> 'id' <> id OR (convert_from(record, 'UTF8')::jsonb ->> 'lastSeq')::bigint <> last_seq`,
		"module no plugin version uses": `SELECT encode(hash, 'escape') FROM ` + q + `.modules m
WHERE NOT EXISTS (SELECT 1 FROM ` + q + `.plugins p WHERE p.module_hash = m.hash)`,
		"lease at or below its run's kept epoch": `SELECT l.run_id FROM ` + q + `.leases l JOIN ` + q + `.runs r ON r.id = l.run_id WHERE l.epoch <= r.lease_epoch`,
		"released lease row of an ended run": `SELECT l.run_id FROM ` + q + `.leases l JOIN ` + q + `.runs r ON r.id = l.run_id
WHERE l.expires_ns = 0 AND r.status IN ('completed'::bytea, 'failed'::bytea, 'cancelled'::bytea)`,
		"schema version": `SELECT version::text FROM ` + q + `.sandflow_schema WHERE version <> ` + fmt.Sprint(SchemaVersion),
	}
	for what, sql := range checks {
		rows, err := conn.Query(ctx, sql)
		if err != nil {
			t.Errorf("invariants (%s): %v", what, err)
			continue
		}
		bad, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("invariants (%s): %v", what, err)
		}
		for _, b := range bad {
			t.Errorf("invariant violated in schema %s: %s: %s", schema, what, b)
		}
	}
}
