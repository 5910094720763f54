package store

import (
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// runIndex is the embedded store's index of runs by creation time, with
// each run's status and tool, kept in memory: a list of runs filtered by
// status, tool, time or a page cursor reads only the records it returns,
// where a scan decodes every one. It is built from the runs bucket on the
// first Runs call and kept current by every write of a run record after
// (Bolt.apply1, under the write lock, so no write falls between the build
// and the updates). It costs about 100 bytes a run. See RATIONALE, "Why is
// the embedded store's run index in memory?".
type runIndex struct {
	mu    sync.RWMutex
	built bool
	// byID finds a run's entry; sorted holds them oldest first.
	byID   map[string]*indexEntry
	sorted []*indexEntry
}

type indexEntry struct {
	created time.Time
	id      string
	status  RunStatus
	tool    string
}

// older orders entries oldest first, by creation time, then id.
func (e *indexEntry) older(o *indexEntry) bool {
	if !e.created.Equal(o.created) {
		return e.created.Before(o.created)
	}
	return e.id < o.id
}

// put adds or updates the entries of run records written. Called with
// the store's write lock held.
func (x *runIndex) put(rs []indexEntry) {
	if len(rs) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.built {
		return
	}
	for _, r := range rs {
		x.putLocked(r)
	}
}

func (x *runIndex) putLocked(r indexEntry) {
	if e := x.byID[r.id]; e != nil {
		if e.created.Equal(r.created) {
			e.status, e.tool = r.status, r.tool
			return
		}
		// A record written with another creation time (the host never
		// writes one) moves in the order.
		if j := slices.Index(x.sorted, e); j >= 0 {
			x.sorted = slices.Delete(x.sorted, j, j+1)
		}
		delete(x.byID, r.id)
	}
	e := &r
	x.byID[r.id] = e
	n := len(x.sorted)
	if n == 0 || x.sorted[n-1].older(e) {
		x.sorted = append(x.sorted, e) // the usual case: the newest run
		return
	}
	i, _ := slices.BinarySearchFunc(x.sorted, e, cmpEntry)
	x.sorted = slices.Insert(x.sorted, i, e)
}

// build reads every run record of tx into the index. Called with the
// store's write lock held (or on a read-only store), so that no write
// comes between the read and the index being marked built.
func (x *runIndex) build(tx *bolt.Tx) error {
	byID := map[string]*indexEntry{}
	var sorted []*indexEntry
	err := tx.Bucket(bucketRuns).ForEach(func(k, sv []byte) error {
		var r Run
		if err := decodeRunValue(k, sv, &r); err != nil {
			return err
		}
		e := &indexEntry{created: r.CreatedAt, id: r.ID, status: r.Status, tool: r.Tool}
		byID[r.ID] = e
		sorted = append(sorted, e)
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(sorted, cmpEntry)
	x.mu.Lock()
	x.byID, x.sorted, x.built = byID, sorted, true
	x.mu.Unlock()
	return nil
}

// match returns the entries of the runs f selects, newest first, at most
// f.Limit (0: all). A cursor and a To bound are found by binary search;
// the walk stops at From.
func (x *runIndex) match(f RunFilter) []indexEntry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	end := len(x.sorted) // entries before end are candidates
	if f.Before != nil {
		c := &indexEntry{created: f.Before.CreatedAt, id: f.Before.ID}
		end, _ = slices.BinarySearchFunc(x.sorted[:end], c, cmpEntry)
	}
	if !f.To.IsZero() {
		// Before the first entry created at To or later.
		end, _ = slices.BinarySearchFunc(x.sorted[:end], f.To, func(e *indexEntry, t time.Time) int {
			if e.created.Before(t) {
				return -1
			}
			return 1
		})
	}
	var ids []indexEntry
	for i := end - 1; i >= 0; i-- {
		e := x.sorted[i]
		if !f.From.IsZero() && e.created.Before(f.From) {
			break // older still from here on
		}
		if (f.Status != "" && e.status != f.Status) || (f.Tool != "" && e.tool != f.Tool) {
			continue
		}
		ids = append(ids, *e)
		if f.Limit > 0 && len(ids) == f.Limit {
			break
		}
	}
	return ids
}

// cmpEntry orders entries oldest first; equal entries compare as after,
// so a search for a cursor finds the first entry not older than it.
func cmpEntry(a, b *indexEntry) int {
	if a.older(b) {
		return -1
	}
	return 1
}

// counts returns how many runs the index holds by status and tool.
func (x *runIndex) counts() []RunCount {
	x.mu.RLock()
	defer x.mu.RUnlock()
	type key struct {
		status RunStatus
		tool   string
	}
	n := map[key]int{}
	for _, e := range x.sorted {
		n[key{e.status, e.tool}]++
	}
	out := make([]RunCount, 0, len(n))
	for k, v := range n {
		out = append(out, RunCount{Status: k.status, Tool: k.tool, N: v})
	}
	slices.SortFunc(out, func(a, b RunCount) int {
		if a.Status != b.Status {
			return strings.Compare(string(a.Status), string(b.Status))
		}
		return strings.Compare(a.Tool, b.Tool)
	})
	return out
}

var _ RunCounter = (*Bolt)(nil)
