package host

import (
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"
	"slices"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// batch collects one atomic change to a run: events are applied to the
// run's state as they are pushed, so later ops see them, and the whole
// batch is committed in one store transaction.
type batch struct {
	rs   *state.Run
	base uint64 // the run's last seq before the batch
	b    store.Batch
	// hooks is the last claim (hookID > 0) or release (0) of each token in
	// the batch, in the order tokens were first touched: the store applies
	// releases and claims as two sets, so the batch keeps only the net.
	hooks  map[string]uint32
	tokens []string
	// started are the steps whose attempts the batch starts (step_started
	// events), which the run's handle runs once the batch is committed;
	// startedBuf holds the first few without an allocation of their own.
	started    []uint32
	startedBuf [2]uint32
}

func (b *batch) claimHook(token string, hookID uint32) { b.hookChange(token, hookID) }
func (b *batch) releaseHook(token string)              { b.hookChange(token, 0) }

func (b *batch) hookChange(token string, hookID uint32) {
	if b.hooks == nil {
		b.hooks = map[string]uint32{}
	}
	if _, seen := b.hooks[token]; !seen {
		b.tokens = append(b.tokens, token)
	}
	b.hooks[token] = hookID
}

// storeBatch returns the store batch, with the net hook changes.
func (b *batch) storeBatch() store.Batch {
	sb := b.b
	sb.ReleaseHooks, sb.ClaimHooks = nil, nil
	for _, tok := range b.tokens {
		if id := b.hooks[tok]; id > 0 {
			sb.ClaimHooks = append(sb.ClaimHooks, store.Hook{Token: tok, RunID: b.rs.ID, HookID: id})
		} else {
			sb.ReleaseHooks = append(sb.ReleaseHooks, tok)
		}
	}
	return sb
}

func newBatch(rs *state.Run) *batch { return &batch{rs: rs, base: rs.LastSeq} }

// push appends an event of the given kind, stamped now.
func (b *batch) push(kind string, d *history.Data) (store.Event, error) {
	return b.pushAt(kind, time.Now(), d)
}

func (b *batch) pushAt(kind string, t time.Time, d *history.Data) (store.Event, error) {
	e := history.NewEvent(kind, t, d)
	e.Seq = b.rs.LastSeq + 1
	if err := b.rs.Apply(e); err != nil {
		return e, fmt.Errorf("host: internal error applying %s: %w", kind, err)
	}
	b.b.Events = append(b.b.Events, e)
	if kind == EvStepStarted {
		if b.started == nil {
			b.started = b.startedBuf[:0]
		}
		b.started = append(b.started, d.Op)
	}
	return e, nil
}

func (b *batch) empty() bool {
	return len(b.b.Events) == 0 && len(b.b.PutTimers) == 0 && len(b.b.DeleteTimers) == 0 &&
		len(b.b.PutAsks) == 0 && len(b.tokens) == 0
}

// finish pushes what ending a run implies, before its terminal event: open
// questions are withdrawn, hooks disposed, timers dropped, and step
// attempts still open end as interrupted with cause (abi.InterruptCancelled
// or InterruptRunEnded), so that every attempt the log begins, it ends.
func (b *batch) finish(now time.Time, cause string) error {
	rs := b.rs
	for i, o := range rs.Ops {
		p := uint32(i + 1)
		if o == nil || o.Refused != 0 { // nil: left out of a state image, settled
			continue
		}
		switch {
		case o.Kind == abi.OpStep && o.AttemptOpen:
			ie := &StepInterruptedError{Step: o.Name, Attempt: o.Attempt, Cause: cause}
			if _, err := b.pushAt(EvStepFailed, now, &history.Data{Op: p, Attempt: o.Attempt, Error: ie.Object()}); err != nil {
				return err
			}
		case o.Kind == abi.OpAsk && !o.Settled:
			if _, err := b.pushAt(EvAskSettled, now, &history.Data{Op: p, AskID: o.AskID, Answer: &abi.AskAnswer{Status: abi.AnswerCancelled}}); err != nil {
				return err
			}
			b.b.PutAsks = append(b.b.PutAsks, closedAsk(rs, o, p))
		case o.Kind == abi.OpSleep && !o.Settled:
			b.b.DeleteTimers = append(b.b.DeleteTimers, sleepTimer(rs.ID, p, o.FireAt))
		case o.Kind == abi.OpStep && !o.Settled && !o.RetryAt.IsZero():
			b.b.DeleteTimers = append(b.b.DeleteTimers, retryTimer(rs.ID, p, o.Attempt, o.RetryAt))
		}
	}
	ids := make([]uint32, 0, len(rs.Hooks))
	for id := range rs.Hooks {
		ids = append(ids, id)
	}
	slices.Sort(ids) // a stable log, whatever the map order
	for _, id := range ids {
		h := rs.Hooks[id]
		if h.Disposed || h.Conflict != "" {
			continue
		}
		if _, err := b.pushAt(EvHookDisposed, now, &history.Data{Hook: id}); err != nil {
			return err
		}
		b.releaseHook(h.Token)
	}
	return nil
}

func closedAsk(rs *state.Run, o *state.Op, p uint32) store.Ask {
	return store.Ask{ID: o.AskID, RunID: rs.ID, Tool: rs.Rec.Tool, Position: p, Open: false, Request: o.Request, CreatedAt: o.Time}
}

func sleepTimer(runID string, p uint32, at time.Time) store.Timer {
	return store.Timer{RunID: runID, ID: fmt.Sprintf("sleep:%d", p), FireAt: at, Kind: timerSleep, Position: p}
}

func retryTimer(runID string, p uint32, attempt int, at time.Time) store.Timer {
	return store.Timer{RunID: runID, ID: fmt.Sprintf("retry:%d:%d", p, attempt), FireAt: at, Kind: timerRetry, Position: p}
}

// Timer kinds in the store's timer index.
const (
	timerSleep = "sleep"
	timerRetry = "step_retry"
)
