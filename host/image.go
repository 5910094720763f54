package host

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"

	"github.com/sandflow/sandflow/store"
)

// imageCounters count the host's use of state images (SnapshotStats).
type imageCounters struct{ loaded, refused, completed atomic.Int64 }

// fromImage loads the lazy state of the run whose record is rec from its
// image and the events after it, or returns nil when it has no image the
// host can use, or one the events after it do not follow (the log rules:
// the caller reads it whole). The error is the store's.
func (h *Host) fromImage(ctx context.Context, rec store.Run) (*state.Run, error) {
	rs := h.loadImage(ctx, rec)
	if rs == nil {
		return nil, nil
	}
	evs, err := h.store.Events(ctx, rec.ID, rs.LastSeq, 0)
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		if err = rs.Apply(e); err != nil {
			break
		}
	}
	if err != nil || rs.LastSeq != rec.LastSeq {
		h.distrustImage(rec.ID, rs.ImageSeq)
		return nil, nil
	}
	h.images.loaded.Add(1)
	return rs, nil
}

// loadImage is the lazy state the run's stored image makes, checked against
// the log, or nil.
func (h *Host) loadImage(ctx context.Context, rec store.Run) *state.Run {
	if h.opts.Snapshots < 0 || rec.Status.Terminal() {
		return nil
	}
	st, err := h.store.State(ctx, rec.ID)
	if err != nil {
		return nil // none, or the log read after says what is wrong
	}
	id := rec.ID
	h.mu.Lock()
	bad, ok := h.badImages[id]
	h.mu.Unlock()
	if ok && st.Seq <= bad {
		return nil
	}
	rs, err := state.FromImage(rec, st, func(n int) ([]store.Event, error) {
		h.images.completed.Add(1)
		return h.store.Events(h.life, id, 0, n)
	})
	if err == nil {
		err = h.checkImage(ctx, rs)
	}
	if err != nil {
		h.images.refused.Add(1)
		return nil
	}
	rs.Lazy.Refuse = func() { h.distrustImage(id, st.Seq) }
	return rs
}

// checkImage checks a loaded state's shape against the log: the event of
// its last op is that op's, and the last activation's marker is a
// run_resumed event of that activation. The events after the image must
// then go on from there (apply checks each op's position).
func (h *Host) checkImage(ctx context.Context, rs *state.Run) error {
	at := func(seq uint64) (*history.Data, string, error) {
		evs, err := h.store.Events(ctx, rs.ID, seq-1, 1)
		if err != nil {
			return nil, "", err
		}
		if len(evs) != 1 || evs[0].Seq != seq {
			return nil, "", fmt.Errorf("%w: no event %d", ErrBadHistory, seq)
		}
		d, err := history.Decode(evs[0])
		return d, evs[0].Kind, err
	}
	if n := len(rs.Ops); n > 0 {
		o := rs.Ops[n-1]
		d, kind, err := at(o.Seq)
		if err != nil {
			return err
		}
		if d.Op != uint32(n) || kind == EvRunResumed || kind == EvOutput {
			return fmt.Errorf("%w: event %d (%s, op %d) is not the first of op %d", ErrBadHistory, o.Seq, kind, d.Op, n)
		}
	}
	m := rs.Markers[len(rs.Markers)-1]
	d, kind, err := at(m.Seq)
	if err != nil {
		return err
	}
	if kind != EvRunResumed || d.Activation != rs.Acts()-1 {
		return fmt.Errorf("%w: event %d (%s) is not activation %d's", ErrBadHistory, m.Seq, kind, rs.Acts()-1)
	}
	return nil
}

// distrustImage stops the run's state images up to seq from being
// loaded, and counts the refusal.
func (h *Host) distrustImage(runID string, seq uint64) {
	h.images.refused.Add(1)
	h.markBad(&h.badImages, runID, seq)
}
