// Package pgtest gives tests outside store/postgres a PostgreSQL schema of
// their own on the server SANDFLOW_TEST_POSTGRES names, and the
// connection string that opens it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// DSN is the server the tests use, from SANDFLOW_TEST_POSTGRES. Without
// it the test skips, unless SANDFLOW_CI=1 says it must run.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("SANDFLOW_TEST_POSTGRES")
	if dsn == "" {
		if os.Getenv("SANDFLOW_CI") == "1" {
			t.Fatal("SANDFLOW_TEST_POSTGRES not set, and SANDFLOW_CI=1 requires the PostgreSQL tests to run")
		}
		t.Skip("SANDFLOW_TEST_POSTGRES not set: this test needs a PostgreSQL server, named by a URL such as postgres://USER@127.0.0.1:5432/DBNAME")
	}
	return dsn
}

// Schema creates a schema of t's own, dropped with everything in it when
// t ends, and returns a connection string whose search_path is that
// schema: every store opened with it shares the schema's tables.
func Schema(t testing.TB) string {
	t.Helper()
	dsn := DSN(t)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "sandflow_test_" + hex.EncodeToString(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", dsn, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return WithSearchPath(dsn, schema)
}

// WithSearchPath returns dsn, a URL or key=value pairs, with its
// search_path set to schema.
func WithSearchPath(dsn, schema string) string {
	if strings.Contains(dsn, "://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + "search_path=" + schema
	}
	return dsn + " search_path=" + schema
}
