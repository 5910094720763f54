package store

import (
	"context"
	"fmt"
	"sort"

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
	v, err := openValue(bucketAsks, k, sv)
	if err != nil {
		return err
	}
	if err := decodeAsk(v, a); err != nil {
		return corruptf(bucketAsks, k, "question record does not decode: %v", err)
	}
	return nil
}
