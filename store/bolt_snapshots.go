package store

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/sandflow/sandflow/store/internal/integrity"
	bolt "go.etcd.io/bbolt"
)

// PutSnapshot implements Store.
func (s *Bolt) PutSnapshot(ctx context.Context, runID string, snap Snapshot) error {
	return s.update(func(w *wtx) error {
		cur, err := runRecord(w.tx, runID)
		if err != nil || cur.Status.Terminal() {
			return err
		}
		return putSnapshot(w, runID, snap)
	})
}

func putSnapshot(w *wtx, runID string, snap Snapshot) error {
	v, err := w.get(bSnapshots, []byte(runID))
	if err != nil {
		return err
	}
	if len(v) >= 8 && binary.BigEndian.Uint64(v) >= snap.Seq {
		return nil
	}
	v = binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(snap.Data)), snap.Seq)
	return w.put(bSnapshots, []byte(runID), append(v, snap.Data...))
}

// State implements Store.
func (s *Bolt) State(ctx context.Context, runID string) (State, error) {
	seq, data, err := s.seqValue(bStates, runID, ErrStateNotFound, "state image")
	return State{Seq: seq, Data: data}, err
}

// Snapshot implements Store.
func (s *Bolt) Snapshot(ctx context.Context, runID string) (Snapshot, error) {
	seq, data, err := s.seqValue(bSnapshots, runID, ErrSnapshotNotFound, "snapshot")
	return Snapshot{Seq: seq, Data: data}, err
}

// seqValue reads a run's value that begins with a seq (8 bytes,
// big-endian): a snapshot or a state image.
func (s *Bolt) seqValue(bucket bucketID, runID string, notFound error, what string) (uint64, []byte, error) {
	var seq uint64
	var data []byte
	err := s.view(func(tx *bolt.Tx) error {
		v, err := getValue(tx, bucket, []byte(runID))
		if err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("%w: run %s", notFound, runID)
		}
		if len(v) < 8 {
			return integrity.Corruptf(bucketNames[bucket], []byte(runID), "%s is %d bytes", what, len(v))
		}
		seq, data = binary.BigEndian.Uint64(v), append([]byte(nil), v[8:]...)
		return nil
	})
	return seq, data, err
}

// dropImages deletes the snapshot and the state image of a run that
// has ended.
func dropImages(w *wtx, runID string) error {
	for _, bk := range []bucketID{bSnapshots, bStates} {
		if w.read(bk).Get([]byte(runID)) != nil {
			if err := w.del(bk, []byte(runID)); err != nil {
				return err
			}
		}
	}
	return nil
}

// putState writes a batch's state image, when it has one, which must be
// taken where the batch ends the log (newLast).
func putState(w *wtx, runID string, newLast uint64, ps *State) error {
	if ps == nil {
		return nil
	}
	if ps.Seq != newLast {
		return fmt.Errorf("%w: state image of run %s at seq %d, the batch ends at %d", ErrBadBatch, runID, ps.Seq, newLast)
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(ps.Data)), ps.Seq)
	return w.put(bStates, []byte(runID), append(v, ps.Data...))
}
