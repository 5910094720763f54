package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

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

func (s *Bolt) apply(w *wtx, runID string, last uint64, b Batch) error {
	if len(b.Events) > 0 {
		// No event of the run at or after the first new one: else the run
		// record and the log disagree, and the batch is refused rather
		// than overwrite the truth. One seek for the whole batch.
		first := eventKey(runID, last+1)
		if k, _ := w.read(bEvents).Cursor().Seek(first); k != nil && bytes.HasPrefix(k, first[:len(runID)+1]) {
			return fmt.Errorf("%w: run %s already has events after %d", ErrSeqConflict, runID, last)
		}
	}
	for i, e := range b.Events {
		if e.Seq != last+uint64(i)+1 {
			return fmt.Errorf("%w: event %d of run %s should have seq %d", ErrBadBatch, e.Seq, runID, last+uint64(i)+1)
		}
		key := eventKey(runID, e.Seq)
		v, err := encodeEvent(e, s.threshold)
		if err != nil {
			return err
		}
		if err := w.put(bEvents, key, v); err != nil {
			return err
		}
	}
	newLast := last + uint64(len(b.Events))
	if b.Run.ID != runID || b.Run.LastSeq != newLast {
		return fmt.Errorf("%w: run record %s at seq %d does not match log at %d", ErrBadBatch, b.Run.ID, b.Run.LastSeq, newLast)
	}
	r := *b.Run
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	rv, err := encodeRun(r)
	if err != nil {
		return fmt.Errorf("%w: run record: %v", ErrBadBatch, err)
	}
	if err := w.put(bRuns, []byte(runID), rv); err != nil {
		return err
	}
	w.runs = append(w.runs, indexEntry{created: r.CreatedAt, id: r.ID, status: r.Status, tool: r.Tool})
	if r.Status.Terminal() {
		for _, bk := range []bucketID{bSnapshots, bStates} {
			if w.read(bk).Get([]byte(runID)) != nil {
				if err := w.del(bk, []byte(runID)); err != nil {
					return err
				}
			}
		}
	} else if ps := b.PutState; ps != nil {
		if ps.Seq != newLast {
			return fmt.Errorf("%w: state image of run %s at seq %d, the batch ends at %d", ErrBadBatch, runID, ps.Seq, newLast)
		}
		v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(ps.Data)), ps.Seq)
		if err := w.put(bStates, []byte(runID), append(v, ps.Data...)); err != nil {
			return err
		}
	}
	for _, t := range b.PutTimers {
		if t.RunID != runID {
			return fmt.Errorf("%w: timer for run %s in a batch of run %s", ErrBadBatch, t.RunID, runID)
		}
		if err := checkTime(t.FireAt, "timer"); err != nil {
			return err
		}
		t.FireAt = t.FireAt.UTC()
		tv, err := json.Marshal(t)
		if err != nil {
			return err
		}
		if err := w.put(bTimers, timerKey(t), tv); err != nil {
			return err
		}
	}
	for _, t := range b.DeleteTimers {
		if t.RunID != runID {
			return fmt.Errorf("%w: deleting a timer of run %s in a batch of run %s", ErrBadBatch, t.RunID, runID)
		}
		if err := w.del(bTimers, timerKey(t)); err != nil {
			return err
		}
	}
	for _, a := range b.PutAsks {
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
				return corruptf(bucketAsks, []byte(a.ID), "question record does not decode: %v", err)
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
	for _, tok := range b.ReleaseHooks {
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
	for _, c := range b.ClaimHooks {
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
	g := f
	for {
		es := s.idx.match(g)
		err := s.view(func(tx *bolt.Tx) error {
			runs := tx.Bucket(bucketRuns)
			for _, e := range es {
				var r Run
				k := []byte(e.id)
				v := runs.Get(k)
				if v == nil {
					return corruptf(bucketRuns, k, "the run is indexed and has no record")
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
		if f.Limit <= 0 || len(out) >= f.Limit || len(es) < g.Limit {
			return out, nil
		}
		last := es[len(es)-1]
		g.Before, g.Limit = &RunCursor{CreatedAt: last.created, ID: last.id}, f.Limit-len(out)
	}
}

// RunCounts implements RunCounter, from the run index.
func (s *Bolt) RunCounts(ctx context.Context) ([]RunCount, error) {
	if err := s.indexRuns(); err != nil {
		return nil, err
	}
	return s.idx.counts(), nil
}

// indexRuns builds the runs' index, once. On a writable store it reads the
// records with the write lock held, so that every write after the read
// updates the index (apply1) and none falls between.
func (s *Bolt) indexRuns() error {
	s.idx.mu.RLock()
	built := s.idx.built
	s.idx.mu.RUnlock()
	if built {
		return nil
	}
	s.idxBuild.Lock()
	defer s.idxBuild.Unlock()
	s.idx.mu.RLock()
	built = s.idx.built
	s.idx.mu.RUnlock()
	if built {
		return nil
	}
	if s.readOnly {
		return s.view(s.idx.build)
	}
	return guard("read", s.markBroken, func() error {
		s.mu.RLock()
		defer s.mu.RUnlock()
		if s.closed {
			return ErrClosed
		}
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if s.tx != nil {
			return s.idx.build(s.tx)
		}
		return s.db.View(s.idx.build)
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
	v, err := openValue(bucketRuns, k, sv)
	if err != nil {
		return err
	}
	if err := decodeRun(v, r); err != nil {
		return corruptf(bucketRuns, k, "run record does not decode: %v", err)
	}
	return nil
}
