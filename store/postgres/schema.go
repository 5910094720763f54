package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrSchemaTooNew is returned by Open when the database's schema was
// written by a newer build than this one: it may hold what this build
// would not read or would overwrite, so the store refuses it rather than
// guess. Compare with errors.Is; the error is a *SchemaError.
var ErrSchemaTooNew = errors.New("postgres: database schema is newer than this build")

// SchemaError says which schema version Open found and which this build
// knows up to.
type SchemaError struct {
	Found, Known int
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("postgres: database schema version %d, this build knows 1 to %d", e.Found, e.Known)
}

// Is makes errors.Is(err, ErrSchemaTooNew) hold for a *SchemaError.
func (e *SchemaError) Is(target error) bool { return target == ErrSchemaTooNew }

// migrations[v] takes the schema from version v-1 to v. They run in order
// on Open, each in the transaction that records its version, so a schema
// is never left half migrated. A released migration is never edited:
// a change is a new one.
//
// Names and opaque strings the host chooses (kinds, tokens, question,
// timer, plugin and session ids) are bytea: PostgreSQL's text holds
// neither NUL nor invalid UTF-8, which the embedded store accepts, and
// bytea orders as the embedded store's keys do (byte by byte, a prefix
// first). Run ids are checked ASCII (store.ValidRunID) and are text in the
// C collation, which orders them the same way; a hook's holder is bytea,
// as ClaimHook takes any run id. Times are Unix seconds and
// nanoseconds (an event time or a timer: nanoseconds alone, in the years
// 1678-2262 the embedded store also keeps). Records are json.Marshal's
// bytes, as the embedded store writes them; the columns beside them are
// what the queries select and order by. A run's row is updated at every
// commit, in columns no index holds: fillfactor 80 leaves room on its page
// for the new version (a HOT update, no index entry written).
var migrations = []string{
	1: `
CREATE TABLE runs (
	id          text COLLATE "C" PRIMARY KEY,
	status      bytea NOT NULL,
	tool        bytea NOT NULL,
	plugin      bytea NOT NULL,
	version     bigint NOT NULL,
	created_s   bigint NOT NULL,
	created_n   integer NOT NULL,
	last_seq    bigint NOT NULL,
	record      bytea NOT NULL
) WITH (fillfactor = 80);
CREATE INDEX runs_created ON runs (created_s DESC, created_n DESC, id DESC);
CREATE INDEX runs_plugin ON runs (plugin, version);
CREATE TABLE events (
	run_id  text COLLATE "C" NOT NULL REFERENCES runs (id),
	seq     bigint NOT NULL,
	time_ns bigint NOT NULL,
	kind    bytea NOT NULL,
	zstd    boolean NOT NULL,
	data    bytea NOT NULL,
	PRIMARY KEY (run_id, seq)
);
CREATE TABLE timers (
	fire_ns bigint NOT NULL,
	run_id  text COLLATE "C" NOT NULL REFERENCES runs (id),
	id      bytea NOT NULL,
	record  bytea NOT NULL,
	PRIMARY KEY (fire_ns, run_id, id)
);
CREATE TABLE asks (
	id        bytea PRIMARY KEY,
	run_id    text COLLATE "C" NOT NULL REFERENCES runs (id),
	open      boolean NOT NULL,
	created_s bigint NOT NULL,
	created_n integer NOT NULL,
	record    bytea NOT NULL
);
CREATE INDEX asks_created ON asks (created_s, created_n, id);
CREATE TABLE hooks (
	token   bytea PRIMARY KEY,
	run_id  bytea NOT NULL,
	hook_id bigint NOT NULL
);
CREATE TABLE modules (
	hash bytea PRIMARY KEY,
	zstd boolean NOT NULL,
	data bytea NOT NULL
);
CREATE TABLE plugins (
	name        bytea NOT NULL,
	version     bigint NOT NULL,
	module_hash bytea NOT NULL REFERENCES modules (hash),
	record      bytea NOT NULL,
	PRIMARY KEY (name, version)
);
CREATE INDEX plugins_module ON plugins (module_hash);
CREATE TABLE sessions (
	id   bytea PRIMARY KEY,
	zstd boolean NOT NULL,
	data bytea NOT NULL
);
CREATE TABLE snapshots (
	run_id text COLLATE "C" PRIMARY KEY REFERENCES runs (id),
	seq    bigint NOT NULL,
	data   bytea NOT NULL
);
CREATE TABLE states (
	run_id text COLLATE "C" PRIMARY KEY REFERENCES runs (id),
	seq    bigint NOT NULL,
	data   bytea NOT NULL
);
`,
	// Leases (leases.go): who drives each run, under which epoch, until
	// when (nanoseconds on the server's clock; 0 once released); and the
	// epoch each event was written under.
	2: `
CREATE TABLE leases (
	run_id     text COLLATE "C" PRIMARY KEY,
	owner      bytea NOT NULL,
	epoch      bigint NOT NULL,
	expires_ns bigint NOT NULL
);
ALTER TABLE events ADD COLUMN epoch bigint NOT NULL DEFAULT 0;
`,
	// Claims (ClaimRuns) look for runs left running without reading the
	// others: the index holds only the running ones. A claimed run's due
	// timers are read by run (DueTimersOf).
	3: `
CREATE INDEX runs_running ON runs (id) WHERE status = 'running'::bytea;
CREATE INDEX timers_run ON timers (run_id, fire_ns);
`,
	// A run that has ended keeps no lease row: the release of its last
	// lease deletes it and keeps its epoch in the run's row, where the
	// next lease taken (a host may still acquire an ended run's) starts
	// above it, so that no deletion lowers an epoch that fences a stale
	// host. The rows ended runs kept before are deleted likewise.
	4: `
ALTER TABLE runs ADD COLUMN lease_epoch bigint NOT NULL DEFAULT 0;
UPDATE runs r SET lease_epoch = l.epoch FROM leases l
WHERE l.run_id = r.id AND r.status IN ('completed'::bytea, 'failed'::bytea, 'cancelled'::bytea);
DELETE FROM leases l USING runs r
WHERE l.run_id = r.id AND r.status IN ('completed'::bytea, 'failed'::bytea, 'cancelled'::bytea);
`,
}

// SchemaVersion is the newest schema this build writes and reads.
const SchemaVersion = 4

// migrate creates schema (when not "") and brings the store's tables in
// the schema on search_path up to SchemaVersion, or refuses a newer one.
// Hosts opening one database at once take turns on an advisory lock named
// for the schema, so that each migration runs once, and CREATE SCHEMA IF
// NOT EXISTS, which two sessions cannot run at once, runs once.
func migrate(ctx context.Context, conn *pgx.Conn, schema string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('sandflow schema ' || coalesce(nullif($1, ''), current_schema())))`, schema); err != nil {
		return fmt.Errorf("postgres: schema lock: %w", err)
	}
	if schema != "" {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("postgres: create schema %s: %w", schema, err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS sandflow_schema (version integer NOT NULL)`); err != nil {
		return fmt.Errorf("postgres: schema table: %w", err)
	}
	var versions []int
	rows, err := tx.Query(ctx, `SELECT version FROM sandflow_schema`)
	if err != nil {
		return err
	}
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return err
	}
	v := 0
	switch len(versions) {
	case 0:
		if _, err := tx.Exec(ctx, `INSERT INTO sandflow_schema (version) VALUES (0)`); err != nil {
			return err
		}
	case 1:
		v = versions[0]
	default:
		return fmt.Errorf("postgres: sandflow_schema holds %d rows, not 1", len(versions))
	}
	if v > SchemaVersion {
		return &SchemaError{Found: v, Known: SchemaVersion}
	}
	if v < 0 {
		return fmt.Errorf("postgres: schema version %d", v)
	}
	for v < SchemaVersion {
		v++
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return fmt.Errorf("postgres: migration %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE sandflow_schema SET version = $1`, v); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}
