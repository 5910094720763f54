package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandflow/sandflow/store"
)

var (
	_ store.Leaser     = (*Store)(nil)
	_ store.RunCounter = (*Store)(nil)
)

// nowNS is the server's clock in Unix nanoseconds: every host measures
// leases on it, whatever its own clock says.
const nowNS = `(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint`

// AcquireLease implements store.Leaser. It is one statement: a lease free, released or expired is taken with the next
// epoch. Taken again by the same owner (a retry after a lost connection
// that had in fact committed) it is taken anew, with the next epoch. An
// ended run whose lease row its last release deleted starts from the
// epoch that release kept in the run's row (runs.lease_epoch), read under
// a share lock on that row: a release that is deleting the lease row
// holds the run's row, so the lease is taken after it, above its epoch.
func (s *Store) AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) (store.Lease, error) {
	if err := runExists(runID); err != nil {
		return store.Lease{}, s.closedOr(err)
	}
	var epoch int64
	err := s.read(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `WITH r AS (SELECT lease_epoch FROM runs WHERE id = $1 FOR SHARE)
INSERT INTO leases (run_id, owner, epoch, expires_ns) VALUES ($1, $2, 1 + coalesce((SELECT lease_epoch FROM r), 0), `+nowNS+` + $3)
ON CONFLICT (run_id) DO UPDATE SET owner = EXCLUDED.owner, epoch = leases.epoch + 1, expires_ns = EXCLUDED.expires_ns
WHERE leases.expires_ns < `+nowNS+` OR leases.owner = EXCLUDED.owner
RETURNING epoch`, runID, []byte(owner), ttl.Nanoseconds()).Scan(&epoch)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("%w: run %s", store.ErrLeaseHeld, runID)
	}
	if err != nil {
		return store.Lease{}, err
	}
	return store.Lease{Owner: owner, Epoch: uint64(epoch)}, nil
}

// RenewLease implements store.Leaser.
func (s *Store) RenewLease(ctx context.Context, runID string, l store.Lease, ttl time.Duration) error {
	n, err := s.leaseExec(ctx, s.leasePool, `UPDATE leases SET expires_ns = `+nowNS+` + $4 WHERE run_id = $1 AND epoch = $2 AND owner = $3`,
		runID, int64(l.Epoch), []byte(l.Owner), ttl.Nanoseconds())
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: run %s, epoch %d of %s", store.ErrLeaseLost, runID, l.Epoch, l.Owner)
	}
	return err
}

// RenewLeases implements store.Leaser: one statement, the rows updated
// in run id order (as ClaimRuns takes them), so that a renewal and a
// claim that meet on rows wait for each other rather than deadlock.
func (s *Store) RenewLeases(ctx context.Context, owner string, held []store.Claim, ttl time.Duration) ([]string, error) {
	held = slices.Clone(held)
	slices.SortFunc(held, func(a, b store.Claim) int { return strings.Compare(a.RunID, b.RunID) })
	ids, epochs := make([]string, 0, len(held)), make([]int64, 0, len(held))
	for _, c := range held {
		if runExists(c.RunID) == nil {
			ids, epochs = append(ids, c.RunID), append(epochs, int64(c.Lease.Epoch))
		}
	}
	renewed := map[string]bool{}
	err := s.leaseCall(ctx, func(c *pgx.Conn) error {
		clear(renewed)
		rows, err := c.Query(ctx, `UPDATE leases l SET expires_ns = `+nowNS+` + $3
FROM unnest($1::text[], $2::bigint[]) AS u (id, epoch)
WHERE l.run_id = u.id COLLATE "C" AND l.epoch = u.epoch AND l.owner = $4
RETURNING l.run_id`, ids, epochs, ttl.Nanoseconds(), []byte(owner))
		if err != nil {
			return err
		}
		var id string
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
			renewed[id] = true
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	var lost []string
	for _, c := range held {
		if !renewed[c.RunID] {
			lost = append(lost, c.RunID)
		}
	}
	return lost, nil
}

// terminal are the statuses of a run that has ended, as the runs table
// holds them.
var terminal = [][]byte{[]byte(store.StatusCompleted), []byte(store.StatusFailed), []byte(store.StatusCancelled)}

// ReleaseLease implements store.Leaser. The notice goes with the
// release, in its transaction: a host that hears it finds the run as the
// releasing host left it.
//
// The lease of a run that has ended is deleted, not kept released: no
// host drives the run again, and the table holds only the leases of runs
// that may still need a host. Its epoch stays in the run's row, updated
// first, so that the run's row lock orders the deletion before any
// AcquireLease or ClaimRuns of the run (both read the run's row under a
// lock before its lease row), and the next lease, if any, is taken above
// it.
func (s *Store) ReleaseLease(ctx context.Context, runID string, l store.Lease) error {
	if err := runExists(runID); err != nil {
		return s.closedOr(err)
	}
	epoch, owner := int64(l.Epoch), []byte(l.Owner)
	return s.write(ctx, func(tx pgx.Tx) error {
		ct, err := tx.Exec(ctx, `UPDATE runs r SET lease_epoch = l.epoch FROM leases l
WHERE r.id = $1 AND l.run_id = r.id AND l.epoch = $2 AND l.owner = $3 AND r.status = ANY($4::bytea[])`,
			runID, epoch, owner, terminal)
		if err != nil {
			return err
		}
		release := `UPDATE leases SET expires_ns = 0 WHERE run_id = $1 AND epoch = $2 AND owner = $3 RETURNING run_id`
		if ct.RowsAffected() > 0 {
			release = `DELETE FROM leases WHERE run_id = $1 AND epoch = $2 AND owner = $3 RETURNING run_id`
		}
		_, err = tx.Exec(ctx, `WITH r AS (`+release+`) SELECT pg_notify($4, run_id) FROM r`, runID, epoch, owner, s.channel)
		return err
	})
}

// ClaimRuns implements store.Leaser: one statement. The candidates'
// rows are locked FOR UPDATE SKIP LOCKED, so that two hosts claiming at
// once take different runs and neither waits (a run whose row an Append
// holds is skipped too: its writer holds its lease); the lease is then
// taken as AcquireLease takes it (above the epoch an ended run's row
// keeps), and a run whose lease another host took in the meantime is left
// out.
func (s *Store) ClaimRuns(ctx context.Context, owner string, ttl time.Duration, limit int) ([]store.Claim, error) {
	if limit <= 0 {
		return nil, s.closedOr(nil)
	}
	var out []store.Claim
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		rows, err := c.Query(ctx, `WITH now AS (SELECT `+nowNS+` AS ns),
cand AS (
	SELECT r.id, r.lease_epoch FROM runs r, now
	WHERE (r.status = 'running'::bytea OR r.id IN (SELECT t.run_id FROM timers t WHERE t.fire_ns <= now.ns))
	AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.run_id = r.id AND l.expires_ns >= now.ns)
	ORDER BY r.id
	LIMIT $3
	FOR UPDATE OF r SKIP LOCKED
)
INSERT INTO leases (run_id, owner, epoch, expires_ns) SELECT id, $1, lease_epoch + 1, (SELECT ns FROM now) + $2 FROM cand
ON CONFLICT (run_id) DO UPDATE SET owner = EXCLUDED.owner, epoch = leases.epoch + 1, expires_ns = EXCLUDED.expires_ns
WHERE leases.expires_ns < (SELECT ns FROM now)
RETURNING run_id, epoch`, []byte(owner), ttl.Nanoseconds(), int64(limit))
		if err != nil {
			return err
		}
		var id string
		var epoch int64
		_, err = pgx.ForEachRow(rows, []any{&id, &epoch}, func() error {
			out = append(out, store.Claim{RunID: id, Lease: store.Lease{Owner: owner, Epoch: uint64(epoch)}})
			return nil
		})
		return err
	})
	return out, err
}

// Listen implements store.Leaser, on a connection of its own (not one of
// the pool's, which LISTEN would tie to this session).
func (s *Store) Listen(ctx context.Context, fn func(runID string)) error {
	return s.listen(ctx, s.channel, fn)
}

// ListenCommits calls fn with a run's id after each Append of the run
// that committed, on any host whose store has Options.CommitNotices set,
// until ctx is done: a host following a run it does not drive (an event
// stream, a console) reads what was committed. The notices are apart
// from Listen's, so that a commit does not wake the hosts' claims. Like
// Listen it reconnects by itself, and notices sent meanwhile are lost.
func (s *Store) ListenCommits(ctx context.Context, fn func(runID string)) error {
	return s.listen(ctx, s.commitChannel, fn)
}

func (s *Store) listen(ctx context.Context, channel string, fn func(runID string)) error {
	wait := 50 * time.Millisecond
	for {
		err := s.listenOnce(ctx, channel, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.closedOr(nil) != nil {
			return store.ErrClosed
		}
		if err == nil {
			wait = 50 * time.Millisecond
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (s *Store) listenOnce(ctx context.Context, channel string, fn func(runID string)) error {
	conn, err := pgx.ConnectConfig(ctx, s.listenCfg.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Payload)
	}
}

// leaseExec runs one statement on a connection of p.
func (s *Store) leaseExec(ctx context.Context, p *pgxpool.Pool, sql string, args ...any) (int64, error) {
	var n int64
	if err := runExists(args[0].(string)); err != nil {
		return 0, s.closedOr(err)
	}
	err := s.retry(ctx, func() (bool, error) {
		return poolCall(ctx, p, func(c *pgx.Conn) error {
			ct, err := c.Exec(ctx, sql, args...)
			n = ct.RowsAffected()
			return err
		})
	})
	return n, err
}

// leaseCall runs fn on one of the renewal connections, a pool of their
// own (Options.LeaseConns), so that renewals never queue behind the
// calls of a busy host; again on another connection when it lost its
// own.
func (s *Store) leaseCall(ctx context.Context, fn func(c *pgx.Conn) error) error {
	return s.retry(ctx, func() (bool, error) { return poolCall(ctx, s.leasePool, fn) })
}

// poolCall runs fn on a connection of p, and reports whether a failure
// was the connection's (worth a try on another).
func poolCall(ctx context.Context, p *pgxpool.Pool, fn func(c *pgx.Conn) error) (bool, error) {
	c, err := p.Acquire(ctx)
	if err != nil {
		return ctx.Err() == nil, err
	}
	defer c.Release()
	err = fn(c.Conn())
	return err != nil && lost(ctx, c), err
}
