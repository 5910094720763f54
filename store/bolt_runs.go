package store

import (
	"context"
	"fmt"

	"github.com/sandflow/sandflow/store/internal/integrity"
	"github.com/sandflow/sandflow/store/internal/runindex"
	bolt "go.etcd.io/bbolt"
)

// CreateRun implements Store.
func (s *Bolt) CreateRun(ctx context.Context, run Run, b Batch) error {
	if err := ValidRunID(run.ID); err != nil {
		return err
	}
	return s.update(func(w *wtx) error {
		if w.read(bRuns).Get([]byte(run.ID)) != nil {
			return fmt.Errorf("%w: %s", ErrRunExists, run.ID)
		}
		if b.Run == nil {
			r := run
			b.Run = &r
		}
		return s.apply(w, run.ID, 0, b)
	})
}

// Append implements Store.
func (s *Bolt) Append(ctx context.Context, runID string, expectLastSeq uint64, b Batch) error {
	return s.update(func(w *wtx) error {
		if b.Run != nil {
			// The record is replaced: only where its log ends matters.
			rv, err := w.get(bRuns, []byte(runID))
			if err != nil {
				return err
			}
			if last, ok := runLastSeq(rv, runID); ok {
				if last != expectLastSeq {
					return fmt.Errorf("%w: run %s is at event %d, not %d", ErrSeqConflict, runID, last, expectLastSeq)
				}
				return s.apply(w, runID, expectLastSeq, b)
			}
		}
		cur, err := runRecord(w.tx, runID)
		if err != nil {
			return err
		}
		if cur.LastSeq != expectLastSeq {
			return fmt.Errorf("%w: run %s is at event %d, not %d", ErrSeqConflict, runID, cur.LastSeq, expectLastSeq)
		}
		if b.Run == nil {
			if len(b.Events) > 0 {
				cur.LastSeq = b.Events[len(b.Events)-1].Seq
			}
			b.Run = &cur
		}
		return s.apply(w, runID, expectLastSeq, b)
	})
}

// apply writes a batch of run runID, whose log ends at seq last, into w:
// each bucket's part in turn, the events first. A part that refuses the
// batch leaves the rest unwritten, and update undoes what was written.
func (s *Bolt) apply(w *wtx, runID string, last uint64, b Batch) error {
	if err := s.putEvents(w, runID, last, b.Events); err != nil {
		return err
	}
	newLast := last + uint64(len(b.Events))
	ended, err := putRun(w, runID, newLast, b.Run)
	if err != nil {
		return err
	}
	if ended {
		err = dropImages(w, runID)
	} else {
		err = putState(w, runID, newLast, b.PutState)
	}
	if err != nil {
		return err
	}
	if err := putTimers(w, runID, b.PutTimers, b.DeleteTimers); err != nil {
		return err
	}
	if err := putAsks(w, runID, b.PutAsks); err != nil {
		return err
	}
	if err := releaseHooks(w, runID, b.ReleaseHooks); err != nil {
		return err
	}
	return claimHooks(w, runID, b.ClaimHooks)
}

// putRun writes a batch's run record, which must name the run and end
// where its log now does (newLast), and notes it for the runs' index.
// ended says the record ends the run.
func putRun(w *wtx, runID string, newLast uint64, run *Run) (ended bool, err error) {
	if run.ID != runID || run.LastSeq != newLast {
		return false, fmt.Errorf("%w: run record %s at seq %d does not match log at %d", ErrBadBatch, run.ID, run.LastSeq, newLast)
	}
	r := *run
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	rv, err := encodeRun(r)
	if err != nil {
		return false, fmt.Errorf("%w: run record: %v", ErrBadBatch, err)
	}
	if err := w.put(bRuns, []byte(runID), rv); err != nil {
		return false, err
	}
	w.runs = append(w.runs, indexEntry(&r))
	return r.Status.Terminal(), nil
}

// Run implements Store.
func (s *Bolt) Run(ctx context.Context, id string) (Run, error) {
	var r Run
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		r, err = runRecord(tx, id)
		return err
	})
	return r, err
}

// Runs implements Store.
func (s *Bolt) Runs(ctx context.Context, f RunFilter) ([]Run, error) {
	if err := s.indexRuns(); err != nil {
		return nil, err
	}
	var out []Run
	q := runQuery(f)
	for {
		es := s.idx.Match(q)
		err := s.view(func(tx *bolt.Tx) error {
			runs := tx.Bucket(bucketRuns)
			for _, e := range es {
				var r Run
				k := []byte(e.ID)
				v := runs.Get(k)
				if v == nil {
					return integrity.Corruptf(bucketRuns, k, "the run is indexed and has no record")
				}
				if err := decodeRunValue(k, v, &r); err != nil {
					return err
				}
				// The index was read before the records: a run whose
				// status changed between the two reads is left out.
				if f.Matches(r) {
					out = append(out, r)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		// A run left out makes the page short: the index goes on after
		// the last run it gave.
		if f.Limit <= 0 || len(out) >= f.Limit || len(es) < q.Limit {
			return out, nil
		}
		last := es[len(es)-1]
		q.Before, q.Limit = &runindex.Entry{Created: last.Created, ID: last.ID}, f.Limit-len(out)
	}
}

// RunCounts implements RunCounter, from the run index.
func (s *Bolt) RunCounts(ctx context.Context) ([]RunCount, error) {
	if err := s.indexRuns(); err != nil {
		return nil, err
	}
	return runCounts(s.idx.Counts()), nil
}

// indexRuns builds the runs' index, once. On a writable store it reads the
// records with the write lock held, so that every write after the read
// updates the index (apply1) and none falls between.
func (s *Bolt) indexRuns() error {
	if s.idx.Built() {
		return nil
	}
	s.idxBuild.Lock()
	defer s.idxBuild.Unlock()
	if s.idx.Built() {
		return nil
	}
	build := func(tx *bolt.Tx) error { return buildIndex(&s.idx, tx) }
	if s.readOnly {
		return s.view(build)
	}
	return integrity.Guard("read", s.markBroken, func() error {
		s.mu.RLock()
		defer s.mu.RUnlock()
		if s.closed {
			return ErrClosed
		}
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if s.tx != nil {
			return build(s.tx)
		}
		return s.db.View(build)
	})
}

// ValidRunID reports whether id can name a run: 1-128 letters, digits and
// - _ . : (which keeps ids printable and free of the key separator).
func ValidRunID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("%w: run id must be 1-128 characters", ErrBadBatch)
	}
	for _, r := range id {
		ok := r == '-' || r == '_' || r == '.' || r == ':' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !ok {
			return fmt.Errorf("%w: run id %q may hold only letters, digits and - _ . :", ErrBadBatch, id)
		}
	}
	return nil
}

// runRecord reads a run's record in a transaction.
func runRecord(tx *bolt.Tx, runID string) (Run, error) {
	var cur Run
	v := tx.Bucket(bucketRuns).Get([]byte(runID))
	if v == nil {
		return cur, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
	}
	return cur, decodeRunValue([]byte(runID), v, &cur)
}

// decodeRunValue checks and decodes a stored run record.
func decodeRunValue(k, sv []byte, r *Run) error {
	v, err := integrity.Open(bucketRuns, k, sv)
	if err != nil {
		return err
	}
	if err := decodeRun(v, r); err != nil {
		return integrity.Corruptf(bucketRuns, k, "run record does not decode: %v", err)
	}
	return nil
}
