package store

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// PutSession implements Store.
func (s *Bolt) PutSession(ctx context.Context, id string, data []byte) error {
	if id == "" {
		return fmt.Errorf("%w: a session needs an id", ErrSessionNotFound)
	}
	return s.update(func(w *wtx) error {
		return w.put(bSessions, []byte(id), packValue(nil, data, s.threshold))
	})
}

// Session implements Store.
func (s *Bolt) Session(ctx context.Context, id string) ([]byte, error) {
	return s.packed(bSessions, id, ErrSessionNotFound)
}

// SessionIDs implements Store.
func (s *Bolt) SessionIDs(ctx context.Context) ([]string, error) {
	var out []string
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}
