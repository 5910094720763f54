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
	return decodeJSON[Hook](bucketHooks, k, sv, "hook")
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

// releaseHooks deletes the tokens of a batch that run runID holds;
// others are left alone.
func releaseHooks(w *wtx, runID string, tokens []string) error {
	for _, tok := range tokens {
		h, ok, err := w.hook(tok)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if h.RunID == runID {
			if err := w.del(bHooks, []byte(tok)); err != nil {
				return err
			}
		}
	}
	return nil
}

// claimHooks gives a batch's tokens to run runID, unless another run
// holds one: then the batch is refused with ErrHookTaken.
func claimHooks(w *wtx, runID string, claims []Hook) error {
	for _, c := range claims {
		if c.Token == "" || c.RunID != runID {
			return fmt.Errorf("%w: hook claim %+v in a batch of run %s", ErrBadBatch, c, runID)
		}
		if h, ok, err := w.hook(c.Token); err != nil {
			return err
		} else if ok {
			if h.RunID != runID {
				return fmt.Errorf("%w: %q is held by run %s", ErrHookTaken, c.Token, h.RunID)
			}
		}
		v, err := json.Marshal(c)
		if err != nil {
			return err
		}
		if err := w.put(bHooks, []byte(c.Token), v); err != nil {
			return err
		}
	}
	return nil
}
