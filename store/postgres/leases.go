package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandflow/sandflow/store"
)

var _ store.Leaser = (*Store)(nil)

// nowNS is the server's clock in Unix nanoseconds: every host measures
// leases on it, whatever its own clock says.
const nowNS = `(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint`

// AcquireLease implements store.Leaser. It is one statement on the lease
// connections: a lease free, released or expired is taken with the next
// epoch. Taken again by the same owner (a retry after a lost connection
// that had in fact committed) it is taken anew, with the next epoch.
func (s *Store) AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) (store.Lease, error) {
	if err := runExists(runID); err != nil {
		return store.Lease{}, s.closedOr(err)
	}
	var epoch int64
	err := s.leaseCall(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `INSERT INTO leases (run_id, owner, epoch, expires_ns) VALUES ($1, $2, 1, `+nowNS+` + $3)
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
	n, err := s.leaseExec(ctx, `UPDATE leases SET expires_ns = `+nowNS+` + $4 WHERE run_id = $1 AND epoch = $2 AND owner = $3`,
		runID, int64(l.Epoch), []byte(l.Owner), ttl.Nanoseconds())
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: run %s, epoch %d of %s", store.ErrLeaseLost, runID, l.Epoch, l.Owner)
	}
	return err
}

// ReleaseLease implements store.Leaser.
func (s *Store) ReleaseLease(ctx context.Context, runID string, l store.Lease) error {
	_, err := s.leaseExec(ctx, `UPDATE leases SET expires_ns = 0 WHERE run_id = $1 AND epoch = $2 AND owner = $3`,
		runID, int64(l.Epoch), []byte(l.Owner))
	return err
}

func (s *Store) leaseExec(ctx context.Context, sql string, args ...any) (int64, error) {
	var n int64
	if err := runExists(args[0].(string)); err != nil {
		return 0, s.closedOr(err)
	}
	err := s.leaseCall(ctx, func(c *pgx.Conn) error {
		ct, err := c.Exec(ctx, sql, args...)
		n = ct.RowsAffected()
		return err
	})
	return n, err
}

// leaseCall runs fn on one of the lease connections, a pool of their own
// (Options.LeaseConns), so that renewals do not queue behind the appends
// of a busy host; again on another connection when it lost its own.
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
