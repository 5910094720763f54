package host

import (
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"slices"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// batch collects one atomic change to a run: events are applied to the
// run's state as they are pushed, so later ops see them, and the whole
// batch is committed in one store transaction.
type batch struct {
	rs   *runState
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
			sb.ClaimHooks = append(sb.ClaimHooks, store.Hook{Token: tok, RunID: b.rs.id, HookID: id})
		} else {
			sb.ReleaseHooks = append(sb.ReleaseHooks, tok)
		}
	}
	return sb
}

func newBatch(rs *runState) *batch { return &batch{rs: rs, base: rs.lastSeq} }

// push appends an event of the given kind, stamped now.
func (b *batch) push(kind string, d *history.Data) (store.Event, error) {
	return b.pushAt(kind, time.Now(), d)
}

func (b *batch) pushAt(kind string, t time.Time, d *history.Data) (store.Event, error) {
	e := history.NewEvent(kind, t, d)
	e.Seq = b.rs.lastSeq + 1
	if err := b.rs.apply(e); err != nil {
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
	for i, o := range rs.ops {
		p := uint32(i + 1)
		if o == nil || o.refused != 0 { // nil: left out of a state image, settled
			continue
		}
		switch {
		case o.kind == abi.OpStep && o.attemptOpen:
			ie := &StepInterruptedError{Step: o.name, Attempt: o.attempt, Cause: cause}
			if _, err := b.pushAt(EvStepFailed, now, &history.Data{Op: p, Attempt: o.attempt, Error: ie.Object()}); err != nil {
				return err
			}
		case o.kind == abi.OpAsk && !o.settled:
			if _, err := b.pushAt(EvAskSettled, now, &history.Data{Op: p, AskID: o.askID, Answer: &abi.AskAnswer{Status: abi.AnswerCancelled}}); err != nil {
				return err
			}
			b.b.PutAsks = append(b.b.PutAsks, closedAsk(rs, o, p))
		case o.kind == abi.OpSleep && !o.settled:
			b.b.DeleteTimers = append(b.b.DeleteTimers, sleepTimer(rs.id, p, o.fireAt))
		case o.kind == abi.OpStep && !o.settled && !o.retryAt.IsZero():
			b.b.DeleteTimers = append(b.b.DeleteTimers, retryTimer(rs.id, p, o.attempt, o.retryAt))
		}
	}
	ids := make([]uint32, 0, len(rs.hooks))
	for id := range rs.hooks {
		ids = append(ids, id)
	}
	slices.Sort(ids) // a stable log, whatever the map order
	for _, id := range ids {
		h := rs.hooks[id]
		if h.disposed || h.conflict != "" {
			continue
		}
		if _, err := b.pushAt(EvHookDisposed, now, &history.Data{Hook: id}); err != nil {
			return err
		}
		b.releaseHook(h.token)
	}
	return nil
}

func closedAsk(rs *runState, o *opRec, p uint32) store.Ask {
	return store.Ask{ID: o.askID, RunID: rs.id, Tool: rs.rec.Tool, Position: p, Open: false, Request: o.request, CreatedAt: o.t}
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
