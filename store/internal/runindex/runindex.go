// Package runindex is the embedded store's index of runs by creation
// time, with each run's status and tool, kept in memory: a list of runs
// filtered by status, tool, time or a page cursor reads only the records
// it returns, where a scan decodes every one. The store builds it from
// its runs bucket on the first list and keeps it current by every write
// of a run record after, under its write lock, so that no write falls
// between the build and the updates. It costs about 100 bytes a run. See
// RATIONALE, "Why is the embedded store's run index in memory?".
package runindex

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Index is safe for concurrent use.
type Index struct {
	mu    sync.RWMutex
	built bool
	// byID finds a run's entry; sorted holds them oldest first.
	byID   map[string]*Entry
	sorted []*Entry
}

// Entry is what the index keeps of a run.
type Entry struct {
	Created time.Time
	ID      string
	Status  string
	Tool    string
}

// Query selects runs: Status and Tool when not empty, From <= Created <
// To where not zero, after the cursor Before (its Created and ID) in the
// newest-first order, at most Limit (0: all).
type Query struct {
	Status, Tool string
	From, To     time.Time
	Before       *Entry
	Limit        int
}

// Count is how many runs have a status and a tool.
type Count struct {
	Status, Tool string
	N            int
}

// older orders entries oldest first, by creation time, then id.
func (e *Entry) older(o *Entry) bool {
	if !e.Created.Equal(o.Created) {
		return e.Created.Before(o.Created)
	}
	return e.ID < o.ID
}

// Built says Build has run.
func (x *Index) Built() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.built
}

// Put adds or updates the entries of run records written; before Build
// it does nothing. Called with the store's write lock held.
func (x *Index) Put(rs []Entry) {
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

func (x *Index) putLocked(r Entry) {
	if e := x.byID[r.ID]; e != nil {
		if e.Created.Equal(r.Created) {
			e.Status, e.Tool = r.Status, r.Tool
			return
		}
		// A record written with another creation time (the host never
		// writes one) moves in the order.
		if j := slices.Index(x.sorted, e); j >= 0 {
			x.sorted = slices.Delete(x.sorted, j, j+1)
		}
		delete(x.byID, r.ID)
	}
	e := &r
	x.byID[r.ID] = e
	n := len(x.sorted)
	if n == 0 || x.sorted[n-1].older(e) {
		x.sorted = append(x.sorted, e) // the usual case: the newest run
		return
	}
	i, _ := slices.BinarySearchFunc(x.sorted, e, cmpEntry)
	x.sorted = slices.Insert(x.sorted, i, e)
}

// Build makes the index of every run, es, and marks it built. Called
// with the store's write lock held (or on a read-only store), so that no
// write comes between reading the records and the index being built.
func (x *Index) Build(es []*Entry) {
	byID := make(map[string]*Entry, len(es))
	for _, e := range es {
		byID[e.ID] = e
	}
	slices.SortFunc(es, cmpEntry)
	x.mu.Lock()
	x.byID, x.sorted, x.built = byID, es, true
	x.mu.Unlock()
}

// Match returns the entries of the runs q selects, newest first. A
// cursor and a To bound are found by binary search; the walk stops at
// From.
func (x *Index) Match(q Query) []Entry {
	x.mu.RLock()
	defer x.mu.RUnlock()
	end := len(x.sorted) // entries before end are candidates
	if q.Before != nil {
		c := &Entry{Created: q.Before.Created, ID: q.Before.ID}
		end, _ = slices.BinarySearchFunc(x.sorted[:end], c, cmpEntry)
	}
	if !q.To.IsZero() {
		// Before the first entry created at To or later.
		end, _ = slices.BinarySearchFunc(x.sorted[:end], q.To, func(e *Entry, t time.Time) int {
			if e.Created.Before(t) {
				return -1
			}
			return 1
		})
	}
	var ids []Entry
	for i := end - 1; i >= 0; i-- {
		e := x.sorted[i]
		if !q.From.IsZero() && e.Created.Before(q.From) {
			break // older still from here on
		}
		if (q.Status != "" && e.Status != q.Status) || (q.Tool != "" && e.Tool != q.Tool) {
			continue
		}
		ids = append(ids, *e)
		if q.Limit > 0 && len(ids) == q.Limit {
			break
		}
	}
	return ids
}

// cmpEntry orders entries oldest first; equal entries compare as after,
// so a search for a cursor finds the first entry not older than it.
func cmpEntry(a, b *Entry) int {
	if a.older(b) {
		return -1
	}
	return 1
}

// Counts returns how many runs the index holds by status and tool, by
// status then tool.
func (x *Index) Counts() []Count {
	x.mu.RLock()
	defer x.mu.RUnlock()
	type key struct{ status, tool string }
	n := map[key]int{}
	for _, e := range x.sorted {
		n[key{e.Status, e.Tool}]++
	}
	out := make([]Count, 0, len(n))
	for k, v := range n {
		out = append(out, Count{Status: k.status, Tool: k.tool, N: v})
	}
	slices.SortFunc(out, func(a, b Count) int {
		if a.Status != b.Status {
			return strings.Compare(a.Status, b.Status)
		}
		return strings.Compare(a.Tool, b.Tool)
	})
	return out
}
