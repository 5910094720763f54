// Package postgres is a store.Store on PostgreSQL, for several hosts that
// share runs, logs, timers and plugins.
//
// Every change is one transaction, committed before the call returns: the
// connections this store opens set synchronous_commit to on, so a commit
// that returned is on disk (and on the synchronous standbys, where the
// server has them). Append locks the run's row, checks that the log ends
// where the caller expects, and adds the events under the primary key
// (run, seq): two writers, in one process or in two hosts, cannot both
// commit the same sequence numbers, and the one that loses gets
// store.ErrSeqConflict.
//
// Several hosts share a Store through its leases (leases.go, a
// store.Leaser): a host drives a run only while it holds the run's lease,
// every batch carries the lease, and Append refuses one whose lease
// another host has taken since (store.ErrLeaseLost). Hosts claim the runs
// that need one with FOR UPDATE SKIP LOCKED and hear of each other's
// work by LISTEN/NOTIFY.
//
// Open applies the schema's migrations (schema.go) and refuses a database
// that a newer build migrated further (ErrSchemaTooNew). The connections
// are a pgxpool.Pool: a connection the server dropped (a restart, an
// administrator's kill) is replaced, and a call that lost its connection
// before it committed is run again on a new one. A call that lost its
// connection while committing cannot know whether the commit happened:
// it returns ErrOutcomeUnknown, and the caller reads the state again (an
// Append that did commit then shows as the log having moved on).
//
// A Store is safe for concurrent use by multiple goroutines.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandflow/sandflow/store"
)

// ErrOutcomeUnknown is returned when the connection to the server was
// lost while a transaction was committing: it may or may not have been
// applied.
var ErrOutcomeUnknown = errors.New("postgres: connection lost while committing, outcome unknown")

// ErrBadConnString is returned by Open when the connection string is not
// a postgres:// (or postgresql://) URL or key=value pairs libpq would
// take; nothing is contacted.
var ErrBadConnString = errors.New("postgres: bad connection string")

// ErrUnreachable is returned by Open when no connection to the server
// could be made (nothing listens there, the name does not resolve, the
// server refused the login, or it did not answer within the connect
// timeout); nothing was written.
var ErrUnreachable = errors.New("postgres: server unreachable")

// DefaultConnectTimeout bounds Open's first connection when the
// connection string gives no connect_timeout.
const DefaultConnectTimeout = 10 * time.Second

// Options configures Open. nil or a zero field means the default.
type Options struct {
	// Schema is the PostgreSQL schema that holds the store's tables,
	// created if missing; "" means the connection's search_path (public
	// by default). Several stores can share one database in schemas of
	// their own.
	Schema string
	// MaxConns bounds the connections the store opens for its calls; 0
	// means 16.
	MaxConns int32
	// LeaseConns bounds the connections kept apart for renewing leases,
	// so that a renewal never waits behind a busy host's other calls; 0
	// means 2.
	LeaseConns int32
	// CompressThreshold is the size from which event data, module bytes
	// and session records are stored zstd-compressed; 0 means 1 KiB,
	// negative disables it.
	CompressThreshold int
	// RetryFor is how long a call that lost its connection before
	// committing keeps trying on new ones (a server restart takes
	// seconds); 0 means 10 seconds, negative means no retry.
	RetryFor time.Duration
	// CommitNotices makes each committed Append tell the hosts following
	// the run (ListenCommits) that it changed, with a notice in the
	// append's transaction. Off by default: every notifying commit takes
	// one database-wide lock while it commits, which costs commits
	// throughput (RATIONALE.md, "How far do several hosts scale?").
	CommitNotices bool
}

// Store is the PostgreSQL store.
type Store struct {
	pool      *pgxpool.Pool
	leasePool *pgxpool.Pool
	// listenCfg makes Listen's connection; channel is the LISTEN/NOTIFY
	// channel of the store's schema (channels are the database's).
	listenCfg *pgx.ConnConfig
	channel   string
	// commitChannel is the channel of commit notices, which the store
	// sends when notifyCommits (Options.CommitNotices).
	commitChannel string
	notifyCommits bool
	threshold     int
	retryFor      time.Duration

	mu     sync.RWMutex // held to read closed, for the whole call; Close takes it to write
	closed bool
}

var _ store.Store = (*Store)(nil)

// Open connects to the database that connString names (a postgres://
// URL or key=value pairs, as libpq takes them), migrates its schema and
// returns the store. opts may be nil.
func Open(ctx context.Context, connString string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxConns == 0 {
		o.MaxConns = 16
	}
	if o.LeaseConns == 0 {
		o.LeaseConns = 2
	}
	if o.MaxConns < 0 || o.LeaseConns < 0 {
		return nil, fmt.Errorf("postgres: MaxConns %d, LeaseConns %d", o.MaxConns, o.LeaseConns)
	}
	if o.CompressThreshold == 0 {
		o.CompressThreshold = 1024
	}
	if o.RetryFor == 0 {
		o.RetryFor = 10 * time.Second
	}
	cfg, err := parseConnString(connString)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = o.MaxConns
	// A commit is acknowledged only once it is durable, whatever the
	// server's default.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	if o.Schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{o.Schema}.Sanitize()
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("postgres: open: %w", ctx.Err())
		}
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	err = migrate(ctx, c.Conn(), o.Schema)
	var schema string
	if err == nil {
		err = c.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema)
	}
	c.Release()
	if err != nil {
		pool.Close()
		if errors.Is(err, ErrSchemaTooNew) {
			return nil, err
		}
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	lcfg := cfg.Copy()
	lcfg.MaxConns = o.LeaseConns
	leasePool, err := pgxpool.NewWithConfig(ctx, lcfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Store{pool: pool, leasePool: leasePool, listenCfg: cfg.ConnConfig, channel: "sandflow " + schema,
		commitChannel: "sandflow commits " + schema, notifyCommits: o.CommitNotices,
		threshold: o.CompressThreshold, retryFor: o.RetryFor}
	return s, nil
}

// parseConnString parses a connection string as pgxpool does, refusing a
// URL of another scheme, and bounds the first connection by
// DefaultConnectTimeout unless it says otherwise.
func parseConnString(connString string) (*pgxpool.Config, error) {
	if strings.Contains(connString, "://") && !strings.HasPrefix(connString, "postgres://") && !strings.HasPrefix(connString, "postgresql://") {
		scheme, _, _ := strings.Cut(connString, "://")
		return nil, fmt.Errorf("%w: scheme %q, want postgres:// or postgresql://", ErrBadConnString, scheme)
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConnString, err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	return cfg, nil
}

// Close waits for the calls in progress and closes the connections.
// Calls after Close return store.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.pool.Close()
		s.leasePool.Close()
	}
	return nil
}

// write runs fn in a transaction and commits it. fn runs again, in a new
// transaction on another connection, when the connection failed before
// the commit was sent: the server rolled the first one back.
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.retry(ctx, func() (bool, error) { return s.writeOnce(ctx, fn) })
}

// read runs fn on a connection, again on another when the connection
// failed. fn only reads.
func (s *Store) read(ctx context.Context, fn func(c *pgx.Conn) error) error {
	return s.retry(ctx, func() (bool, error) { return poolCall(ctx, s.pool, fn) })
}

func (s *Store) writeOnce(ctx context.Context, fn func(tx pgx.Tx) error) (bool, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return ctx.Err() == nil, err
	}
	defer c.Release()
	tx, err := c.Begin(ctx)
	if err != nil {
		return lost(ctx, c), err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx) // a broken connection rolls back by itself
		return lost(ctx, c), err
	}
	if err := tx.Commit(ctx); err != nil {
		if lost(ctx, c) || ctx.Err() != nil {
			return false, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
		}
		return false, fmt.Errorf("postgres: commit: %w", err)
	}
	return false, nil
}

// lost reports whether c's connection is gone (and the call was not
// cancelled): the server dropped it, or the network did.
func lost(ctx context.Context, c *pgxpool.Conn) bool {
	return ctx.Err() == nil && c.Conn().IsClosed()
}

// retry calls once until it succeeds, fails for good, or s.retryFor has
// passed since the first try, waiting more between tries.
func (s *Store) retry(ctx context.Context, once func() (again bool, err error)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	start := time.Now()
	wait := 20 * time.Millisecond
	for {
		again, err := once()
		if err == nil || !again || s.retryFor < 0 || time.Since(start)+wait > s.retryFor {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// closedOr returns store.ErrClosed once the store is closed, else err: a
// call answered without the server answers as one that asked it would.
func (s *Store) closedOr(err error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	return err
}

// isUnique reports whether err is a unique violation of the constraint
// named.
func isUnique(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == constraint
}
