package store

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// ClaimHook implements Store.
func (s *Bolt) ClaimHook(ctx context.Context, token, runID string, hookID uint32) (string, error) {
	if token == "" || runID == "" {
		return "", fmt.Errorf("%w: hook token and run id must not be empty", ErrBadBatch)
	}
	var holder string
	err := s.update(func(w *wtx) error {
		if h, ok, err := w.hook(token); err != nil {
			return err
		} else if ok {
			if h.RunID != runID {
				holder = h.RunID
				return nil
			}
		}
		v, err := json.Marshal(Hook{Token: token, RunID: runID, HookID: hookID})
		if err != nil {
			return err
		}
		return w.put(bHooks, []byte(token), v)
	})
	return holder, err
}

// Hook implements Store.
func (s *Bolt) Hook(ctx context.Context, token string) (Hook, error) {
	var h Hook
	err := s.view(func(tx *bolt.Tx) error {
		sv := tx.Bucket(bucketHooks).Get([]byte(token))
		if sv == nil {
			return fmt.Errorf("%w: %q", ErrHookNotFound, token)
		}
		var err error
		h, err = decodeHook([]byte(token), sv)
		return err
	})
	return h, err
}

// decodeHook checks and decodes a stored hook token's holder.
func decodeHook(k, sv []byte) (Hook, error) {
	var h Hook
	v, err := openValue(bucketHooks, k, sv)
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(v, &h); err != nil {
		return h, corruptf(bucketHooks, k, "hook does not decode: %v", err)
	}
	return h, nil
}

// hook reads a token's holder in a write; ok is false when none holds it.
func (w *wtx) hook(token string) (Hook, bool, error) {
	sv := w.read(bHooks).Get([]byte(token))
	if sv == nil {
		return Hook{}, false, nil
	}
	h, err := decodeHook([]byte(token), sv)
	return h, err == nil, err
}
