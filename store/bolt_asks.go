package store

import (
	"context"
	"fmt"
	"sort"

	"github.com/sandflow/sandflow/store/internal/integrity"
	bolt "go.etcd.io/bbolt"
)

// Ask implements Store.
func (s *Bolt) Ask(ctx context.Context, id string) (Ask, error) {
	var a Ask
	err := s.view(func(tx *bolt.Tx) error {
		sv := tx.Bucket(bucketAsks).Get([]byte(id))
		if sv == nil {
			return fmt.Errorf("%w: %s", ErrAskNotFound, id)
		}
		return decodeAskValue([]byte(id), sv, &a)
	})
	return a, err
}

// Asks implements Store.
func (s *Bolt) Asks(ctx context.Context, openOnly bool) ([]Ask, error) {
	var out []Ask
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAsks).ForEach(func(k, sv []byte) error {
			var a Ask
			if err := decodeAskValue(k, sv, &a); err != nil {
				return err
			}
			if !openOnly || a.Open {
				out = append(out, a)
			}
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, err
}

// decodeAskValue checks and decodes a stored question record.
func decodeAskValue(k, sv []byte, a *Ask) error {
	v, err := integrity.Open(bucketAsks, k, sv)
	if err != nil {
		return err
	}
	if err := decodeAsk(v, a); err != nil {
		return integrity.Corruptf(bucketAsks, k, "question record does not decode: %v", err)
	}
	return nil
}

// putAsks writes a batch's questions, all of run runID; a question id
// another run's question has is refused.
func putAsks(w *wtx, runID string, asks []Ask) error {
	for _, a := range asks {
		if a.RunID != runID || a.ID == "" {
			return fmt.Errorf("%w: question %q for run %s in a batch of run %s", ErrBadBatch, a.ID, a.RunID, runID)
		}
		v, err := w.get(bAsks, []byte(a.ID))
		if err != nil {
			return err
		}
		if v != nil && !askOfRun(v, a.ID, runID) {
			var prev Ask
			if err := decodeAsk(v, &prev); err != nil {
				return integrity.Corruptf(bucketAsks, []byte(a.ID), "question record does not decode: %v", err)
			}
			if prev.RunID != runID {
				return fmt.Errorf("%w: question %s belongs to run %s", ErrBadBatch, a.ID, prev.RunID)
			}
		}
		a.CreatedAt = a.CreatedAt.UTC()
		av, err := encodeAsk(a)
		if err != nil {
			return fmt.Errorf("%w: question %s: %v", ErrBadBatch, a.ID, err)
		}
		if err := w.put(bAsks, []byte(a.ID), av); err != nil {
			return err
		}
	}
	return nil
}
