package postgres

import (
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/internal/pgtest"
)

// Open migrates a new schema once, however many hosts open it at once,
// opens a migrated one without change, and refuses one a newer build
// migrated further, with a typed error, changing nothing.
func TestMigrations(t *testing.T) {
	schema := newSchema(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(ctxBG, pgtest.DSN(t), &Options{Schema: schema, MaxConns: 1})
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open %d: %v", i, err)
		}
	}
	s := openSchema(t, schema, Options{})
	mustCreate(t, s, "r")
	s.Close()
	s = openSchema(t, schema, Options{}) // again: nothing to do
	if _, err := s.Run(ctxBG, "r"); err != nil {
		t.Fatalf("Run after a second Open: %v", err)
	}
	s.Close()

	conn, err := pgx.Connect(ctxBG, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctxBG)
	q := pgx.Identifier{schema}.Sanitize()
	var version, rows int
	if err := conn.QueryRow(ctxBG, `SELECT max(version), count(*) FROM `+q+`.sandflow_schema`).Scan(&version, &rows); err != nil {
		t.Fatal(err)
	}
	if version != SchemaVersion || rows != 1 {
		t.Fatalf("sandflow_schema: version %d in %d rows, want %d in 1", version, rows, SchemaVersion)
	}
	if _, err := conn.Exec(ctxBG, `UPDATE `+q+`.sandflow_schema SET version = $1`, SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctxBG, pgtest.DSN(t), &Options{Schema: schema})
	var se *SchemaError
	if !errors.Is(err, ErrSchemaTooNew) || !errors.As(err, &se) || se.Found != SchemaVersion+1 || se.Known != SchemaVersion {
		t.Fatalf("Open of a newer schema = %v, want a *SchemaError{%d, %d}", err, SchemaVersion+1, SchemaVersion)
	}
	if err := conn.QueryRow(ctxBG, `SELECT version FROM `+q+`.sandflow_schema`).Scan(&version); err != nil || version != SchemaVersion+1 {
		t.Fatalf("the refused Open changed the version to %d (%v)", version, err)
	}
	if _, err := conn.Exec(ctxBG, `UPDATE `+q+`.sandflow_schema SET version = $1`, SchemaVersion); err != nil {
		t.Fatal(err)
	}
}
