package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/sandflow/sandflow/store/internal/integrity"
	bolt "go.etcd.io/bbolt"
)

// Events implements Store.
func (s *Bolt) Events(ctx context.Context, runID string, after uint64, limit int) ([]Event, error) {
	var out []Event
	if after == math.MaxUint64 {
		_, err := s.Run(ctx, runID)
		return nil, err
	}
	err := s.view(func(tx *bolt.Tx) error {
		cur, err := runRecord(tx, runID)
		if err != nil {
			return err
		}
		// Sized once; kinds shared; data copied into large blocks, not
		// one allocation per event: a long log loads in one pass.
		if cur.LastSeq > after {
			n := cur.LastSeq - after
			if limit > 0 {
				n = min(n, uint64(limit))
			}
			out = make([]Event, 0, min(n, 1<<20))
		}
		var d eventDecoder
		prefix := append([]byte(runID), 0)
		c := tx.Bucket(bucketEvents).Cursor()
		for k, v := c.Seek(eventKey(runID, after+1)); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(k) != len(prefix)+8 {
				continue
			}
			v, err := integrity.Open(bucketEvents, k, v)
			if err != nil {
				return err
			}
			e, err := d.decode(binary.BigEndian.Uint64(k[len(prefix):]), v)
			if err != nil {
				return integrity.Corruptf(bucketEvents, k, "%v", err)
			}
			out = append(out, e)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
		return nil
	})
	return out, err
}

// putEvents writes a batch's events, which must be numbered from
// last+1 on, into the log of run runID.
func (s *Bolt) putEvents(w *wtx, runID string, last uint64, events []Event) error {
	if len(events) > 0 {
		// No event of the run at or after the first new one: else the run
		// record and the log disagree, and the batch is refused rather
		// than overwrite the truth. One seek for the whole batch.
		first := eventKey(runID, last+1)
		if k, _ := w.read(bEvents).Cursor().Seek(first); k != nil && bytes.HasPrefix(k, first[:len(runID)+1]) {
			return fmt.Errorf("%w: run %s already has events after %d", ErrSeqConflict, runID, last)
		}
	}
	for i, e := range events {
		if e.Seq != last+uint64(i)+1 {
			return fmt.Errorf("%w: event %d of run %s should have seq %d", ErrBadBatch, e.Seq, runID, last+uint64(i)+1)
		}
		key := eventKey(runID, e.Seq)
		v, err := encodeEvent(e, s.threshold)
		if err != nil {
			return err
		}
		if err := w.put(bEvents, key, v); err != nil {
			return err
		}
	}
	return nil
}
