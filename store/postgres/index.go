package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/store"
)

// DueTimers implements store.Store.
func (s *Store) DueTimers(ctx context.Context, now time.Time, limit int) ([]store.Timer, error) {
	var lim any
	if limit > 0 {
		lim = int64(limit)
	}
	return s.timers(ctx, `SELECT record FROM timers WHERE fire_ns <= $1 ORDER BY fire_ns, run_id, id LIMIT $2`, clampNanos(now), lim)
}

// DueTimersOf implements store.Leaser.
func (s *Store) DueTimersOf(ctx context.Context, runID string, now time.Time) ([]store.Timer, error) {
	if err := runExists(runID); err != nil {
		return nil, s.closedOr(nil)
	}
	return s.timers(ctx, `SELECT record FROM timers WHERE run_id = $1 AND fire_ns <= $2 ORDER BY fire_ns, id`, runID, clampNanos(now))
}

// NextTimer implements store.Store.
func (s *Store) NextTimer(ctx context.Context) (store.Timer, bool, error) {
	ts, err := s.timers(ctx, `SELECT record FROM timers ORDER BY fire_ns, run_id, id LIMIT 1`)
	if err != nil || len(ts) == 0 {
		return store.Timer{}, false, err
	}
	return ts[0], true, nil
}

func (s *Store) timers(ctx context.Context, sql string, args ...any) ([]store.Timer, error) {
	var out []store.Timer
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		rows, err := c.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		var record []byte
		_, err = pgx.ForEachRow(rows, []any{&record}, func() error {
			var t store.Timer
			if err := json.Unmarshal(record, &t); err != nil {
				return fmt.Errorf("%w: timer: %v", store.ErrCorrupt, err)
			}
			out = append(out, t)
			return nil
		})
		return err
	})
	return out, err
}

// Ask implements store.Store.
func (s *Store) Ask(ctx context.Context, id string) (store.Ask, error) {
	var a store.Ask
	err := s.read(ctx, func(c *pgx.Conn) error {
		var record []byte
		err := c.QueryRow(ctx, `SELECT record FROM asks WHERE id = $1`, []byte(id)).Scan(&record)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", store.ErrAskNotFound, id)
		}
		if err != nil {
			return err
		}
		return decodeAsk(record, &a)
	})
	return a, err
}

func decodeAsk(record []byte, a *store.Ask) error {
	*a = store.Ask{}
	if err := json.Unmarshal(record, a); err != nil {
		return fmt.Errorf("%w: question: %v", store.ErrCorrupt, err)
	}
	return nil
}

// Asks implements store.Store.
func (s *Store) Asks(ctx context.Context, openOnly bool) ([]store.Ask, error) {
	var out []store.Ask
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		rows, err := c.Query(ctx, `SELECT record FROM asks WHERE open OR NOT $1 ORDER BY created_s, created_n, id`, openOnly)
		if err != nil {
			return err
		}
		var record []byte
		_, err = pgx.ForEachRow(rows, []any{&record}, func() error {
			var a store.Ask
			if err := decodeAsk(record, &a); err != nil {
				return err
			}
			out = append(out, a)
			return nil
		})
		return err
	})
	return out, err
}

// ClaimHook implements store.Store.
func (s *Store) ClaimHook(ctx context.Context, token, runID string, hookID uint32) (string, error) {
	if token == "" || runID == "" {
		return "", fmt.Errorf("%w: hook token and run id must not be empty", store.ErrBadBatch)
	}
	var holder string
	err := s.write(ctx, func(tx pgx.Tx) error {
		holder = ""
		ct, err := tx.Exec(ctx, claimSQL, []byte(token), []byte(runID), int64(hookID))
		if err != nil || ct.RowsAffected() == 1 {
			return err
		}
		// The insert left the row alone, and locked it: its holder
		// cannot change before this transaction ends.
		var h []byte
		err = tx.QueryRow(ctx, `SELECT run_id FROM hooks WHERE token = $1`, []byte(token)).Scan(&h)
		holder = string(h)
		return err
	})
	return holder, err
}

// Hook implements store.Store.
func (s *Store) Hook(ctx context.Context, token string) (store.Hook, error) {
	h := store.Hook{Token: token}
	err := s.read(ctx, func(c *pgx.Conn) error {
		var id int64
		var runID []byte
		err := c.QueryRow(ctx, `SELECT run_id, hook_id FROM hooks WHERE token = $1`, []byte(token)).Scan(&runID, &id)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", store.ErrHookNotFound, token)
		}
		if err != nil {
			return err
		}
		if id < 0 || id > 1<<32-1 {
			return fmt.Errorf("%w: hook %q has id %d", store.ErrCorrupt, token, id)
		}
		h.RunID, h.HookID = string(runID), uint32(id)
		return nil
	})
	if err != nil {
		return store.Hook{}, err
	}
	return h, nil
}
