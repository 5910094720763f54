package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"

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
			v, err := openValue(bucketEvents, k, v)
			if err != nil {
				return err
			}
			e, err := d.decode(binary.BigEndian.Uint64(k[len(prefix):]), v)
			if err != nil {
				return corruptf(bucketEvents, k, "%v", err)
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
