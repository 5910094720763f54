package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/store"
)

// PutSession implements store.Store.
func (s *Store) PutSession(ctx context.Context, id string, data []byte) error {
	if id == "" {
		return fmt.Errorf("%w: a session needs an id", store.ErrSessionNotFound)
	}
	stored, z := pack(data, s.threshold)
	return s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO sessions (id, zstd, data) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET zstd = EXCLUDED.zstd, data = EXCLUDED.data`, []byte(id), z, stored)
		return err
	})
}

// Session implements store.Store.
func (s *Store) Session(ctx context.Context, id string) ([]byte, error) {
	var out []byte
	err := s.read(ctx, func(c *pgx.Conn) error {
		var data []byte
		var z bool
		err := c.QueryRow(ctx, `SELECT zstd, data FROM sessions WHERE id = $1`, []byte(id)).Scan(&z, &data)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", store.ErrSessionNotFound, id)
		}
		if err != nil {
			return err
		}
		if out, err = unpack(data, z); err != nil {
			return fmt.Errorf("session %s: %w", id, err)
		}
		return nil
	})
	return out, err
}

// SessionIDs implements store.Store.
func (s *Store) SessionIDs(ctx context.Context) ([]string, error) {
	var out []string
	err := s.read(ctx, func(c *pgx.Conn) error {
		out = out[:0]
		rows, err := c.Query(ctx, `SELECT id FROM sessions ORDER BY id`)
		if err != nil {
			return err
		}
		var id []byte
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
			out = append(out, string(id))
			return nil
		})
		return err
	})
	return out, err
}

// PutSnapshot implements store.Store. The run's row is locked, so that
// a batch ending the run (which drops the snapshot) and this call take
// turns.
func (s *Store) PutSnapshot(ctx context.Context, runID string, snap store.Snapshot) error {
	if err := runExists(runID); err != nil {
		return s.closedOr(err)
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		var status []byte
		err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE id = $1 FOR UPDATE`, runID).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", store.ErrRunNotFound, runID)
		}
		if err != nil || store.RunStatus(status).Terminal() {
			return err
		}
		var kept int64
		err = tx.QueryRow(ctx, `SELECT seq FROM snapshots WHERE run_id = $1`, runID).Scan(&kept)
		switch {
		case err == nil && uint64(kept) >= snap.Seq:
			return nil
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		// Seqs are stored as their bits: bigint is signed, and the
		// comparison above is unsigned.
		_, err = tx.Exec(ctx, `INSERT INTO snapshots (run_id, seq, data) VALUES ($1, $2, $3)
ON CONFLICT (run_id) DO UPDATE SET seq = EXCLUDED.seq, data = EXCLUDED.data`, runID, int64(snap.Seq), nonNil(snap.Data))
		return err
	})
}

// Snapshot implements store.Store.
func (s *Store) Snapshot(ctx context.Context, runID string) (store.Snapshot, error) {
	seq, data, err := s.seqValue(ctx, `SELECT seq, data FROM snapshots WHERE run_id = $1`, runID, store.ErrSnapshotNotFound)
	return store.Snapshot{Seq: seq, Data: data}, err
}

// State implements store.Store.
func (s *Store) State(ctx context.Context, runID string) (store.State, error) {
	seq, data, err := s.seqValue(ctx, `SELECT seq, data FROM states WHERE run_id = $1`, runID, store.ErrStateNotFound)
	return store.State{Seq: seq, Data: data}, err
}

func (s *Store) seqValue(ctx context.Context, sql, runID string, notFound error) (uint64, []byte, error) {
	var seq int64
	var data []byte
	if store.ValidRunID(runID) != nil {
		return 0, nil, s.closedOr(fmt.Errorf("%w: run %q", notFound, runID))
	}
	err := s.read(ctx, func(c *pgx.Conn) error {
		err := c.QueryRow(ctx, sql, runID).Scan(&seq, &data)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: run %s", notFound, runID)
		}
		return err
	})
	return uint64(seq), data, err
}
