package store_test

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store"
	"github.com/sandflow/sandflow/store/storetest"
)

// TestBoltConformance runs the suite every Store passes against the
// embedded store, with fsync off (the crash tests keep it on).
func TestBoltConformance(t *testing.T) {
	storetest.Run(t, boltOpener(&store.Options{NoSync: true}))
}

// boltOpener opens one file per test, in the test's temporary directory.
func boltOpener(opts *store.Options) storetest.Opener {
	var mu sync.Mutex
	paths := map[*testing.T]string{}
	return func(t *testing.T) store.Store {
		t.Helper()
		mu.Lock()
		path, ok := paths[t]
		if !ok {
			path = filepath.Join(t.TempDir(), "sandflow.db")
			paths[t] = path
			t.Cleanup(func() {
				mu.Lock()
				delete(paths, t)
				mu.Unlock()
			})
		}
		mu.Unlock()
		s, err := store.Open(path, opts)
		if err != nil {
			t.Fatalf("Open(%s): %v", path, err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	}
}

// TestBoltCrash runs the crash test every Store passes against the
// embedded store with fsync on.
func TestBoltCrash(t *testing.T) {
	storetest.Crash(t, func(t *testing.T) string { return filepath.Join(t.TempDir(), "crash.db") },
		func(path string) (store.Store, error) {
			s, err := store.Open(path, &store.Options{LockTimeout: 5 * time.Second})
			if err != nil {
				return nil, err
			}
			return s, nil
		})
}
