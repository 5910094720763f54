package host

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// DefaultAbortGrace is how long an aborted run has to unwind before it is
// cancelled: 30 seconds.
const DefaultAbortGrace = 30 * time.Second

const timerAbort = "abort"

func abortTimer(runID string, index int, at time.Time) store.Timer {
	return store.Timer{RunID: runID, ID: fmt.Sprintf("abort:%d", index), FireAt: at, Kind: timerAbort, Position: uint32(index)}
}

// Abort stops a run's current work and gives it time to unwind (the
// a cancellation, with reason task_cancel, turn_cancelled,
// turn_ended or steer): the run's abort signals fire (OpSignal futures
// fulfil with the reason), its open questions are withdrawn as cancelled,
// and a serve run's waiting calls end as cancelled. The run goes on, on a
// goroutine of the host's, to react; if it has not ended within the
// host's AbortGrace it is cancelled then, unless it is a serve run that
// went back to receive, which stays available for its next call. It
// returns the run's state once the abort is recorded.
//
// Errors, each leaving everything unchanged: ErrRunNotFound; ErrRunEnded
// when the run has ended; a *LimitError when the run's log is full.
func (h *Host) Abort(ctx context.Context, id, reason string) (RunInfo, error) {
	if reason == "" {
		reason = "cancelled"
	}
	// Ask whoever is driving the run to stop at its next boundary, so the
	// abort does not wait for the run's remaining work.
	h.mu.Lock()
	rh := h.runs[id]
	if rh != nil {
		rh.cancelling.Add(1)
	}
	h.mu.Unlock()
	ri, err := h.withRun(ctx, id, func(rh *runHandle) error {
		rs := rh.rs
		if rs.Status.Terminal() {
			return fmt.Errorf("%w: run %s is %s", ErrRunEnded, id, rs.Status)
		}
		if l := h.limitsOf(ctx, rs); rs.LastSeq >= uint64(l.Events) {
			return &LimitError{Limit: "events", Max: int64(l.Events), What: "run " + rs.ID}
		}
		b := newBatch(rs)
		now := time.Now()
		index := len(rs.Aborts)
		if _, err := b.pushAt(EvAbortRequested, now, &history.Data{Reason: reason, Index: index}); err != nil {
			return err
		}
		if err := withdrawOpenAsks(rs, b, now); err != nil {
			return err
		}
		if err := cancelAgentTurns(rs, b, now); err != nil {
			return err
		}
		// Turns it cancelled that are running stop; their outcome is not
		// recorded (the op has settled).
		for p, stop := range rh.stopWork {
			if o := rs.Op(p); o != nil && o.Settled {
				stop()
			}
		}
		b.b.PutTimers = append(b.b.PutTimers, abortTimer(rs.ID, index, now.Add(h.abortGrace())))
		return h.commit(ctx, rh, b, nil)
	})
	if rh != nil {
		// Before the run is driven again: a driver stops while it is set.
		rh.cancelling.Add(-1)
	}
	if err != nil {
		return ri, err
	}
	err = h.goDrive(context.WithoutCancel(ctx), id, func(err error) {
		slog.Default().Error("driving an aborted run", "run", id, "err", err)
	})
	return ri, err
}

// withdrawOpenAsks settles the run's open questions as cancelled.
func withdrawOpenAsks(rs *state.Run, b *batch, now time.Time) error {
	if rs.OpenAsks == 0 {
		return nil
	}
	for i, o := range rs.Ops {
		if o != nil && o.Kind == abi.OpAsk && !o.Settled { // nil: left out of a state image, settled
			p := uint32(i + 1)
			if _, err := b.pushAt(EvAskSettled, now, &history.Data{Op: p, AskID: o.AskID, Answer: &abi.AskAnswer{Status: abi.AnswerCancelled}}); err != nil {
				return err
			}
			b.b.PutAsks = append(b.b.PutAsks, closedAsk(rs, o, p))
		}
	}
	return nil
}

// cancelAgentTurns ends as cancelled the run's agent turns sent with an
// abort signal (CancelOnAbort) that have not ended. A session's next turn
// starts when one ends, so the scan goes on until it finds none.
func cancelAgentTurns(rs *state.Run, b *batch, now time.Time) error {
	for more := true; more; {
		more = false
		for _, p := range rs.PendingAgents() {
			if o := rs.Op(p); o.Agent != nil && o.Agent.CancelOnAbort {
				res := abi.AgentResult{Status: abi.AgentCancelled}
				if _, err := b.pushAt(EvAgentSettled, now, &history.Data{Op: p, Agent: &res}); err != nil {
					return err
				}
				more = true
			}
		}
	}
	return nil
}

func (h *Host) abortGrace() time.Duration {
	if h.opts.AbortGrace > 0 {
		return h.opts.AbortGrace
	}
	return DefaultAbortGrace
}

// abortExpired is what an abort's timer does when it fires: a run still
// going is cancelled, unless it is a serve run that went back to receive
// after the abort.
func (h *Host) abortExpired(rs *state.Run, b *batch, index int) error {
	if rs.Status.Terminal() || index >= len(rs.Aborts) || index != len(rs.Aborts)-1 {
		return nil // ended, or a later abort has its own timer
	}
	if _, ok := rs.Unwound(); !ok {
		return nil // back to receive: the task stays available
	}
	if ws := rs.Detail.Waiting; ws != nil {
		for _, p := range ws.Futures {
			if o := rs.Op(p); o != nil && o.Kind == abi.OpReceive && !o.Settled {
				return nil // waiting for its next call: nothing to unwind
			}
		}
	}
	now := time.Now()
	if err := b.finish(now, abi.InterruptCancelled); err != nil {
		return err
	}
	_, err := b.pushAt(EvRunCancelled, now, &history.Data{Reason: rs.Aborts[index].Reason})
	return err
}
