package store_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/store"
	"github.com/sandflow/sandflow/store/storetest"
)

// TestBoltConformance runs the suite every Store passes against the
// embedded store, with fsync off (the crash tests keep it on): once with
// the default compression threshold, where a reopen replays the journal,
// and once with a threshold of 32 bytes, where nearly every value is
// compressed and every reopen comes after a checkpoint.
func TestBoltConformance(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		storetest.Run(t, boltOpener(&store.Options{NoSync: true}, false))
	})
	t.Run("threshold=32/checkpointed", func(t *testing.T) {
		storetest.Run(t, boltOpener(&store.Options{NoSync: true, CompressThreshold: 32}, true))
	})
}

// TestBoltSimulation runs the simulation with compression thresholds
// other than the default (which TestBoltConformance covers), drawing data
// around each: every value compressed (1), around 64 bytes, and none
// compressed (-1).
func TestBoltSimulation(t *testing.T) {
	for _, thr := range []int{1, 64, -1} {
		t.Run(fmt.Sprintf("threshold=%d", thr), func(t *testing.T) {
			storetest.SimulationAround(t, boltOpener(&store.Options{NoSync: true, CompressThreshold: thr}, false), thr)
		})
	}
}

// checkpointOnClose is the embedded store that writes its journal into
// the file before each Close, so that the suite's reopens read the file
// rather than replay the journal.
type checkpointOnClose struct{ *store.Bolt }

func (s checkpointOnClose) Close() error {
	cerr := s.Bolt.Checkpoint()
	if err := s.Bolt.Close(); err != nil {
		return err
	}
	if errors.Is(cerr, store.ErrClosed) { // a second Close
		return nil
	}
	return cerr
}

// boltOpener opens one file per test, in the test's temporary directory.
// After the test, once every store it opened is closed, it verifies the
// file with store.CheckFile (dense plugin versions only where the test
// deletes none). With checkpoint, each store writes its journal into the
// file before it closes.
func boltOpener(opts *store.Options, checkpoint bool) storetest.Opener {
	var mu sync.Mutex
	paths := map[*testing.T]string{}
	return func(t *testing.T) store.Store {
		t.Helper()
		mu.Lock()
		path, ok := paths[t]
		if !ok {
			path = filepath.Join(t.TempDir(), "sandflow.db")
			paths[t] = path
			// Registered before any Close, so it runs after them all.
			t.Cleanup(func() {
				mu.Lock()
				delete(paths, t)
				mu.Unlock()
				store.CheckFile(t, path, !strings.HasSuffix(t.Name(), "/DeletePluginVersion"))
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
		if checkpoint {
			return checkpointOnClose{s}
		}
		return s
	}
}

// TestBoltCrash runs the crash test every Store passes against the
// embedded store with fsync on and a compression threshold of 512 bytes,
// and verifies the file after each kill.
func TestBoltCrash(t *testing.T) {
	storetest.CrashChecked(t, func(t *testing.T) string { return filepath.Join(t.TempDir(), "crash.db") },
		func(path string) (store.Store, error) {
			s, err := store.Open(path, &store.Options{CompressThreshold: 512, LockTimeout: 5 * time.Second})
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		func(t *testing.T, path string) { store.CheckFile(t, path, true) })
}
