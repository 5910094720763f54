package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DueTimers implements Store.
func (s *Bolt) DueTimers(ctx context.Context, now time.Time, limit int) ([]Timer, error) {
	var out []Timer
	end := timeKey(now)
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketTimers).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) < 8 || binary.BigEndian.Uint64(k) > end {
				break
			}
			t, err := decodeTimer(k, v)
			if err != nil {
				return err
			}
			out = append(out, t)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// NextTimer implements Store.
func (s *Bolt) NextTimer(ctx context.Context) (Timer, bool, error) {
	var t Timer
	var ok bool
	err := s.view(func(tx *bolt.Tx) error {
		k, v := tx.Bucket(bucketTimers).Cursor().First()
		if k == nil {
			return nil
		}
		ok = true
		var err error
		t, err = decodeTimer(k, v)
		return err
	})
	return t, ok, err
}

// decodeTimer checks and decodes a stored timer.
func decodeTimer(k, sv []byte) (Timer, error) {
	return decodeJSON[Timer](bucketTimers, k, sv, "timer")
}

// putTimers writes and deletes a batch's timers, all of run runID.
func putTimers(w *wtx, runID string, put, del []Timer) error {
	for _, t := range put {
		if t.RunID != runID {
			return fmt.Errorf("%w: timer for run %s in a batch of run %s", ErrBadBatch, t.RunID, runID)
		}
		if err := checkTime(t.FireAt, "timer"); err != nil {
			return err
		}
		t.FireAt = t.FireAt.UTC()
		tv, err := json.Marshal(t)
		if err != nil {
			return err
		}
		if err := w.put(bTimers, timerKey(t), tv); err != nil {
			return err
		}
	}
	for _, t := range del {
		if t.RunID != runID {
			return fmt.Errorf("%w: deleting a timer of run %s in a batch of run %s", ErrBadBatch, t.RunID, runID)
		}
		if err := w.del(bTimers, timerKey(t)); err != nil {
			return err
		}
	}
	return nil
}
