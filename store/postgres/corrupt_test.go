package postgres

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/internal/pgtest"
	"github.com/sandflow/sandflow/store"
)

// Damaged rows are reported as store.ErrCorrupt, not as a panic or as
// garbage data, and not repaired.
func TestCorruptValues(t *testing.T) {
	schema := newSchema(t)
	s := openSchema(t, schema, Options{CompressThreshold: 8})
	mustCreate(t, s, "r")
	if err := s.Append(ctxBG, "r", 0, step(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPlugin(ctxBG, store.Plugin{Name: "p", ModuleHash: "h"}, bytes.Repeat([]byte("abc"), 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctxBG, "s", bytes.Repeat([]byte("xyz"), 100)); err != nil {
		t.Fatal(err)
	}
	b := step(2)
	b.PutAsks = []store.Ask{{ID: "q", RunID: "r", Request: []byte(`{}`)}}
	if err := s.Append(ctxBG, "r", 2, b); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctxBG, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctxBG)
	q := pgx.Identifier{schema}.Sanitize()
	for _, sql := range []string{
		`UPDATE %s.events SET zstd = true WHERE run_id = 'r' AND seq = 2`, // raw bytes read as a frame
		`UPDATE %s.modules SET data = substring(data from 1 for length(data) / 2)`,
		`UPDATE %s.sessions SET data = '\x28b52ffd00'::bytea`,
		`UPDATE %s.asks SET record = 'not json'`,
		`INSERT INTO %s.plugins (name, version, module_hash, record) VALUES ('p', 2, 'h', '{')`,
	} {
		if _, err := conn.Exec(ctxBG, fmt.Sprintf(sql, q)); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if evs, err := s.Events(ctxBG, "r", 0, 0); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Events over a corrupt event = %d events, %v; want ErrCorrupt", len(evs), err)
	}
	if evs, err := s.Events(ctxBG, "r", 0, 1); err != nil || len(evs) != 1 {
		t.Errorf("Events before the corrupt event = %d, %v", len(evs), err)
	}
	if _, err := s.Module(ctxBG, "h"); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Module with a truncated frame = %v, want ErrCorrupt", err)
	}
	if _, err := s.Session(ctxBG, "s"); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Session with a broken frame = %v, want ErrCorrupt", err)
	}
	if _, err := s.Ask(ctxBG, "q"); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Ask with broken JSON = %v, want ErrCorrupt", err)
	}
	if _, err := s.Asks(ctxBG, false); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Asks with broken JSON = %v, want ErrCorrupt", err)
	}
	if _, err := s.Plugin(ctxBG, "p", 0); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Plugin latest with broken JSON = %v, want ErrCorrupt", err)
	}
	if _, err := s.Plugins(ctxBG); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("Plugins with broken JSON = %v, want ErrCorrupt", err)
	}
	// Nothing was repaired: the damaged rows are as they were left.
	var z bool
	if err := conn.QueryRow(ctxBG, `SELECT zstd FROM `+q+`.events WHERE run_id = 'r' AND seq = 2`).Scan(&z); err != nil || !z {
		t.Errorf("the damaged event was changed: zstd %v, %v", z, err)
	}
}

// errRecorder is a testing.TB that collects Errorf calls, to test the
// invariant checker itself.
type errRecorder struct {
	testing.TB
	msgs []string
}

func (r *errRecorder) Helper() {}

func (r *errRecorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

// The invariant checker run in every test's cleanup notices each kind of
// damage it looks for.
func TestInvariantCheckerCatchesDamage(t *testing.T) {
	damages := map[string]string{
		"event gap":             `DELETE FROM %s.events WHERE seq = 1`,
		"event beyond last_seq": `INSERT INTO %s.events (run_id, seq, time_ns, kind, zstd, data) VALUES ('r', 3, 0, 'x', false, '')`,
		"record behind its row": `UPDATE %s.runs SET last_seq = 4`,
		"orphan module":         `INSERT INTO %s.modules (hash, zstd, data) VALUES ('other', false, '')`,
		"schema version":        `UPDATE %s.sandflow_schema SET version = 0`,
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			schema := newSchema(t)
			s := openSchema(t, schema, Options{})
			mustCreate(t, s, "r")
			if err := s.Append(ctxBG, "r", 0, step(0)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.PutPlugin(ctxBG, store.Plugin{Name: "p", ModuleHash: "h"}, []byte("m")); err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.Connect(ctxBG, pgtest.DSN(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctxBG)
			clean := &errRecorder{TB: t}
			checkInvariants(clean, conn, schema)
			if len(clean.msgs) != 0 {
				t.Fatalf("undamaged schema reported: %v", clean.msgs)
			}
			q := pgx.Identifier{schema}.Sanitize()
			if _, err := conn.Exec(ctxBG, fmt.Sprintf(damage, q)); err != nil {
				t.Fatal(err)
			}
			rec := &errRecorder{TB: t}
			checkInvariants(rec, conn, schema)
			if len(rec.msgs) == 0 {
				t.Errorf("damage %q went unnoticed", name)
			}
			// The cleanup's check must pass: drop what the damage left.
			if _, err := conn.Exec(ctxBG, `DROP SCHEMA `+q+` CASCADE`); err != nil {
				t.Fatal(err)
			}
		})
	}
}
