package host

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// runHandle serialises the operations on one run and caches its state.
//
// Lock discipline. Driving a run takes two locks, in this order: the
// handle's mu, then Host.mu; no code takes a handle's mu while it holds
// Host.mu. A function that takes a *runHandle, or is a method of one,
// expects rh.mu held unless its comment says otherwise: handle, release
// and withRun take the handle; takeWarm, park and dropWarm take Host.mu
// themselves for the warm pool; Run reads snap, and step attempts read
// aborts, without mu. Functions named …Locked expect Host.mu held.
// runWork releases rh.mu while steps and agent turns run and holds it
// again before it returns (workRound.next, workRound.startSteps): its
// callers must expect the run's state to have moved on meanwhile.
type runHandle struct {
	mu sync.Mutex
	id string // immutable
	// rs is the run's state (nil until loaded), guarded by mu.
	// retireLocked reads it under Host.mu alone, once refs is 0: no one
	// holds the handle then, so no one can hold mu.
	rs   *state.Run
	refs int // guarded by Host.mu

	// warm and elem are guarded by Host.mu: a parked instance is not in use.
	warm *wfInstance
	elem *list.Element
	// idle is the handle's place among those kept only for their state
	// (Host.idle), and idleOps how many ops that state holds; guarded by
	// Host.mu.
	idle    *list.Element
	idleOps int

	// pending: Call made the run and it is not stored yet; its first
	// commit stores it. Guarded by mu.
	pending *pendingRun
	// carry: events applied to the state and not stored yet (an answer,
	// applied before the activation it wakes), which the next commit
	// stores first and a reload applies again. It never outlives a hold
	// of mu. Guarded by mu.
	carry *carried

	// lostOnce: an activation on a fresh instance returned
	// ErrInstanceLost and runs again; another such loss fails it. Guarded
	// by mu.
	lostOnce bool

	// cancelling counts Cancel calls waiting for the run: drive stops at
	// its next step boundary to let them in.
	cancelling atomic.Int32

	// inflight are the steps and agent turns a driver runs with mu
	// released, so that calls, answers and aborts get in meanwhile; other
	// drivers leave them alone. Guarded by mu.
	inflight map[uint32]bool
	// stopWork cuts off an agent turn in flight (an abort cancelled it).
	// Guarded by mu.
	stopWork map[uint32]context.CancelFunc
	// fresh are the step attempts this handle's commits started and no
	// step instance has begun yet, by op: the attempt number. An attempt
	// open in the log and not here began elsewhere, or before this
	// process, and ended unrecorded: it is interrupted (see
	// recordInterrupted). Guarded by mu.
	fresh map[uint32]int

	// lease is this host's hold of the run's lease (lease.go).
	lease runLease

	// snap is the run's state as of the last commit made through this
	// handle, for readers that should not wait while the holder of mu
	// runs steps or waits on agent turns.
	snap atomic.Pointer[RunInfo]
	// aborts is the run's aborts as of the last commit or load, for step
	// attempts, which run without mu (OpStepAborted).
	aborts atomic.Pointer[abortsSeen]
}

// carried is what a runHandle's carry holds: the batch's store part
// (events, questions, timers; no run record, no hook tokens) and the event
// it follows.
type carried struct {
	base uint64
	b    store.Batch
}

// carryForward applies b to the state without storing it: the next commit
// stores it, before its own batch. A batch that moves hook tokens is
// committed at once instead.
func (h *Host) carryForward(ctx context.Context, rh *runHandle, b *batch) error {
	if len(b.tokens) > 0 || rh.carry != nil || rh.pending != nil {
		return h.commit(ctx, rh, b, nil)
	}
	sb := b.storeBatch()
	rh.carry = &carried{base: b.base, b: sb}
	return nil
}

// settleCarry commits what the run carries, if anything: for a caller
// about to let go of the run. On failure the carry is dropped and the
// state reloaded without it.
func (h *Host) settleCarry(ctx context.Context, rh *runHandle) error {
	if rh.carry == nil {
		return nil
	}
	if rh.rs == nil {
		// A commit failed and so did the reload after it (the store went
		// away): what was carried is not stored, and the next call
		// reloads the run.
		rh.carry = nil
		return fmt.Errorf("host: run %s: its state could not be read again after a failed commit; the events carried were not stored", rh.id)
	}
	err := h.commit(ctx, rh, newBatch(rh.rs), nil)
	if err != nil && rh.carry != nil {
		rh.carry = nil
		if rerr := h.reload(ctx, rh, store.Run{}); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// abortsSeen is how many aborts a run has recorded, and the last one's
// reason.
type abortsSeen struct {
	n      int
	reason string
}

// publishAborts makes the run's aborts visible to its step attempts.
// Called with mu held, after the state changed.
func (rh *runHandle) publishAborts() {
	if rh.rs == nil {
		return
	}
	n := len(rh.rs.Aborts)
	if cur := rh.aborts.Load(); cur != nil && cur.n == n {
		return
	}
	seen := &abortsSeen{n: n}
	if n > 0 {
		seen.reason = rh.rs.Aborts[n-1].Reason
	}
	rh.aborts.Store(seen)
}

func (h *Host) handle(id string) *runHandle {
	h.mu.Lock()
	defer h.mu.Unlock()
	rh := h.runs[id]
	if rh == nil {
		rh = &runHandle{id: id}
		h.runs[id] = rh
	}
	if rh.idle != nil {
		h.idle.Remove(rh.idle)
		h.idleOps -= rh.idleOps
		rh.idle = nil
	}
	rh.refs++
	return rh
}

func (h *Host) release(rh *runHandle) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rh.refs--
	if rh.refs == 0 && rh.warm == nil {
		h.retireLocked(rh)
	}
}

// DefaultIdleRuns is Options.IdleRuns' default.
const DefaultIdleRuns = 64

// maxIdleOps bounds the ops the idle runs' states hold together (a long
// run's state is megabytes): about 100 MB.
const maxIdleOps = 1 << 18

// retireLocked forgets a handle no one holds and that has no parked instance,
// or keeps it among the idle ones, with its loaded state, so that the
// run's next resume need not read its log again: only the events after
// it, if any (refresh). The least recently idle beyond Options.IdleRuns,
// or beyond maxIdleOps ops in all, are forgotten. Called with h.mu held
// (rh.mu need not be).
func (h *Host) retireLocked(rh *runHandle) {
	if h.opts.IdleRuns < 0 || rh.rs == nil || rh.rs.Status.Terminal() || len(rh.rs.Ops) > maxIdleOps {
		delete(h.runs, rh.id)
		return
	}
	rh.idle, rh.idleOps = h.idle.PushFront(rh), len(rh.rs.Ops)
	h.idleOps += rh.idleOps
	for h.idle.Len() > h.opts.IdleRuns || h.idleOps > maxIdleOps {
		v := h.idle.Remove(h.idle.Back()).(*runHandle)
		h.idleOps -= v.idleOps
		v.idle = nil
		delete(h.runs, v.id)
	}
}

// takeWarm removes the run's parked instance from the pool and returns it.
func (h *Host) takeWarm(rh *runHandle) *wfInstance {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := rh.warm
	if w != nil {
		h.warm.Remove(rh.elem)
		h.warmBytes -= w.parkedBytes
		rh.warm, rh.elem = nil, nil
	}
	return w
}

// DefaultWarmBytes is the default budget of parked instances' memory.
const DefaultWarmBytes = 1 << 30

func (h *Host) warmBudget() uint64 {
	switch {
	case h.opts.MaxWarmBytes < 0:
		return 0 // no budget: MaxWarm alone
	case h.opts.MaxWarmBytes == 0:
		return DefaultWarmBytes
	}
	return uint64(h.opts.MaxWarmBytes)
}

// park keeps a suspended instance for a warm resume, evicting the least
// recently parked ones over the limit.
func (h *Host) park(ctx context.Context, rh *runHandle, w *wfInstance) {
	if h.opts.MaxWarm < 0 {
		w.close(ctx)
		return
	}
	var evicted []*wfInstance
	w.parkedBytes, w.parkedSeq = 0, rh.rs.LastSeq
	if m, ok := w.inst.(interface{ MemorySize() uint64 }); ok {
		w.parkedBytes = m.MemorySize()
	}
	h.mu.Lock()
	rh.warm = w
	rh.elem = h.warm.PushFront(rh)
	h.warmBytes += w.parkedBytes
	budget := h.warmBudget()
	for h.warm.Len() > h.opts.MaxWarm || (budget > 0 && h.warmBytes > budget) {
		v := h.warm.Remove(h.warm.Back()).(*runHandle)
		evicted = append(evicted, v.warm)
		h.warmBytes -= v.warm.parkedBytes
		v.warm, v.elem = nil, nil
		if v.refs == 0 {
			h.retireLocked(v)
		}
	}
	h.mu.Unlock()
	for _, e := range evicted {
		// Its run resumes from the snapshot instead of replaying. Only
		// the instance's own fields are read: its run may be moving on,
		// and the store keeps the newest snapshot.
		h.recycle(ctx, e, h.snapshotAfter(ctx, e, e.parkedSeq, int(e.cursor)))
	}
}

func (h *Host) dropWarm(ctx context.Context, rh *runHandle) {
	if w := h.takeWarm(rh); w != nil {
		w.close(ctx)
	}
}

// withRun runs fn with the run's handle locked and its state fresh, and
// returns the run's state after it. On a store several hosts share it
// holds the run's lease, waiting up to LeaseWait for another host's.
func (h *Host) withRun(ctx context.Context, id string, fn func(rh *runHandle) error) (RunInfo, error) {
	return h.withRunWait(ctx, id, h.opts.LeaseWait, fn)
}

// withRunWait is withRun waiting up to wait for the run's lease (0: until
// ctx is done).
func (h *Host) withRunWait(ctx context.Context, id string, wait time.Duration, fn func(rh *runHandle) error) (RunInfo, error) {
	if h.isClosed() {
		return RunInfo{}, ErrClosed
	}
	rh := h.handle(id)
	defer h.release(rh)
	if err := h.holdLease(ctx, rh, wait); err != nil {
		return RunInfo{}, err
	}
	defer h.dropLease(rh)
	rh.mu.Lock()
	defer rh.mu.Unlock()
	if err := h.refresh(ctx, rh); err != nil {
		return RunInfo{}, err
	}
	err := fn(rh)
	return h.info(rh.rs), err
}

// refresh makes the cached state match the store, reloading it when the
// log moved on elsewhere.
func (h *Host) refresh(ctx context.Context, rh *runHandle) error {
	rec, err := h.store.Run(ctx, rh.id)
	if err != nil {
		if errors.Is(err, store.ErrRunNotFound) {
			return fmt.Errorf("%w: %s", ErrRunNotFound, rh.id)
		}
		return err
	}
	if rh.rs != nil && rh.rs.LastSeq == rec.LastSeq {
		if !bytes.Equal(rec.Detail, rh.rs.Rec.Detail) {
			// Changed without new events: the summary is read again. The
			// same bytes are the summary the state holds (commit wrote it).
			rh.rs.Detail = history.Detail{}
			_ = json.Unmarshal(rec.Detail, &rh.rs.Detail)
		}
		rh.rs.Rec = rec
		return nil
	}
	return h.reload(ctx, rh, rec)
}

func (h *Host) reload(ctx context.Context, rh *runHandle, rec store.Run) error {
	h.dropWarm(ctx, rh)
	rh.rs = nil
	var evs []store.Event
	var rs *state.Run
	if p := rh.pending; p != nil {
		// Not stored yet: what Call made is the whole of it.
		rec, evs = p.rec, []store.Event{p.created}
	} else {
		if rec.ID == "" {
			var err error
			if rec, err = h.store.Run(ctx, rh.id); err != nil {
				return err
			}
		}
		var err error
		if rs, err = h.fromImage(ctx, rec); err != nil {
			return err
		}
		if rs == nil {
			if evs, err = h.store.Events(ctx, rh.id, 0, 0); err != nil {
				return err
			}
		}
	}
	if rs == nil {
		rs = state.New(rec)
		rs.Reserve(len(evs), func(i int) string { return evs[i].Kind })
		for _, e := range evs {
			if err := rs.Apply(e); err != nil {
				return fmt.Errorf("run %s: %w", rh.id, err)
			}
		}
	}
	if rs.LastSeq != rec.LastSeq {
		return fmt.Errorf("%w: run %s record says seq %d, log ends at %d", ErrBadHistory, rh.id, rec.LastSeq, rs.LastSeq)
	}
	if c := rh.carry; c != nil {
		// Not stored yet: applied again on top of what is.
		err := error(nil)
		if c.base != rs.LastSeq {
			err = fmt.Errorf("host: run %s carries events after %d, the log ends at %d", rh.id, c.base, rs.LastSeq)
		}
		for _, e := range c.b.Events {
			if err == nil {
				err = rs.Apply(e)
			}
		}
		if err != nil {
			rh.carry = nil
			return err
		}
	}
	rh.rs = rs
	rh.publishAborts()
	return nil
}

// commit writes a batch and the run's updated record in one transaction. On
// failure the cached state is reloaded, so it never holds what the store
// does not.
func (h *Host) commit(ctx context.Context, rh *runHandle, b *batch, detail *history.Detail) error {
	rs := rh.rs
	if detail != nil {
		rs.Detail = *detail
	}
	switch rs.Status {
	case store.StatusCompleted:
		rs.Detail = history.Detail{Result: rs.Result}
	case store.StatusFailed:
		rs.Detail = history.Detail{Error: rs.Failure}
	case store.StatusCancelled:
		rs.Detail = history.Detail{}
	}
	rec := rs.Rec
	rec.LastSeq = rs.LastSeq
	rec.UpdatedAt = time.Now().UTC()
	rec.Status = rs.CurrentStatus()
	rec.Detail = history.EncodeDetail(rs.Detail)
	sb := b.storeBatch()
	sb.Run = &rec
	if h.leaser != nil {
		l := rh.lease.held
		sb.Lease = &l
	}
	if rec.Status == store.StatusWaiting && h.opts.Snapshots >= 0 && len(rs.Ops) >= h.opts.Snapshots &&
		(rs.ImageSeq == 0 || rs.LastSeq >= rs.ImageSeq+state.ImageEvery) {
		if data := rs.Image(); data != nil {
			sb.PutState = &store.State{Seq: rs.LastSeq, Data: data}
		}
	}
	base := b.base
	if c := rh.carry; c != nil {
		if b.base != c.base+uint64(len(c.b.Events)) {
			return fmt.Errorf("host: run %s: a batch after event %d, the carried events end at %d", rs.ID, b.base, c.base+uint64(len(c.b.Events)))
		}
		base = c.base
		sb.Events = append(append([]store.Event(nil), c.b.Events...), sb.Events...)
		sb.PutAsks = append(append([]store.Ask(nil), c.b.PutAsks...), sb.PutAsks...)
		sb.PutTimers = append(append([]store.Timer(nil), c.b.PutTimers...), sb.PutTimers...)
		sb.DeleteTimers = append(append([]store.Timer(nil), c.b.DeleteTimers...), sb.DeleteTimers...)
	}
	var err error
	start := time.Now()
	if p := rh.pending; p != nil {
		sb.Events = append([]store.Event{p.created}, sb.Events...)
		if err = h.store.CreateRun(ctx, rec, sb); err == nil {
			rh.pending = nil
		}
	} else {
		err = h.store.Append(ctx, rs.ID, base, sb)
	}
	if o := h.observer(); o != nil && err == nil {
		o.Commit(len(sb.Events), time.Since(start))
	}
	if err == nil {
		rh.carry = nil
	}
	if err != nil {
		if rerr := h.reload(ctx, rh, store.Run{}); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	rs.Rec = rec
	rs.Stored()
	if sb.PutState != nil {
		rs.ImageSeq = rs.LastSeq
	}
	rh.noteStarted(b.started)
	rh.publishAborts()
	info := h.info(rs)
	rh.snap.Store(&info)
	h.notify(rs.ID)
	return nil
}

// noteStarted notes the step attempts a committed batch started as this
// handle's to run.
func (rh *runHandle) noteStarted(ps []uint32) {
	if rh.rs.Status.Terminal() {
		rh.fresh = nil
		return
	}
	for _, p := range ps {
		if o := rh.rs.Op(p); o != nil && o.AttemptOpen {
			if rh.fresh == nil {
				rh.fresh = map[uint32]int{}
			}
			rh.fresh[p] = o.Attempt
		}
	}
}

// interrupted splits the open step attempts to run into those this
// handle started (fresh) and those it did not, which are interrupted.
func (rh *runHandle) interrupted(steps []uint32) (fresh, cut []uint32) {
	all := true
	for _, p := range steps {
		if a, ok := rh.fresh[p]; !ok || a != rh.rs.Op(p).Attempt {
			all = false
			break
		}
	}
	if all {
		return steps, nil // the usual case: no allocation
	}
	for _, p := range steps {
		if a, ok := rh.fresh[p]; ok && a == rh.rs.Op(p).Attempt {
			fresh = append(fresh, p)
		} else {
			cut = append(cut, p)
		}
	}
	return fresh, cut
}

// recordInterrupted ends the open attempts of steps ps as failed with a
// StepInterruptedError of the cause, and lets their retry policy decide
// what follows: another attempt after the backoff, or the step's failure.
// The attempt numbers move on, so a step sees that it runs again.
func (h *Host) recordInterrupted(ctx context.Context, rh *runHandle, ps []uint32, cause string) error {
	rs := rh.rs
	if rs.Status.Terminal() {
		return nil
	}
	b := newBatch(rs)
	now := time.Now()
	for _, p := range ps {
		o := rs.Op(p)
		if o == nil || !o.AttemptOpen {
			continue
		}
		delete(rh.fresh, p)
		ie := &StepInterruptedError{Step: o.Name, Attempt: o.Attempt, Cause: cause}
		if err := h.pushStepFailure(b, o, p, o.Attempt, ie.Object(), now); err != nil {
			return err
		}
	}
	if b.empty() {
		return nil
	}
	return h.commit(ctx, rh, b, nil)
}

// pushStepFailure pushes the failure of attempt a of the step at p, with
// its retry (a timer) when the policy gives one.
func (h *Host) pushStepFailure(b *batch, o *state.Op, p uint32, a int, e *abi.ErrorObject, now time.Time) error {
	d := &history.Data{Op: p, Attempt: a, Error: e}
	if at, retry := state.RetryAt(o.Retry, a, e, now); retry {
		d.RetryAt = &at
		b.b.PutTimers = append(b.b.PutTimers, retryTimer(b.rs.ID, p, a, at))
	}
	if _, err := b.pushAt(EvStepFailed, now, d); err != nil {
		return err
	}
	if d.RetryAt != nil {
		h.wakeScheduler()
	}
	return nil
}

// maxDriveRounds guards against a kernel bug looping forever.
const maxDriveRounds = 1 << 20

// drive does all the work a run has that needs nothing from outside:
// unfinished step attempts, and an activation when what the guest waits for
// has settled. It returns when the run has ended or waits.
func (h *Host) drive(ctx context.Context, rh *runHandle) error {
	for range maxDriveRounds {
		rs := rh.rs
		if rs == nil {
			// A failed commit's reload failed too (the store went away).
			return fmt.Errorf("host: run %s: its state could not be read again after a failed commit", rh.id)
		}
		if rs.Status.Terminal() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if rh.cancelling.Load() > 0 {
			return nil // a Cancel is waiting; it ends the run
		}
		if steps, agents := rh.notInFlight(rs.RunnableSteps()), rh.notInFlight(rs.PendingAgents()); len(steps)+len(agents) > 0 {
			// The work runs without the lock: nothing is carried then.
			if err := h.settleCarry(ctx, rh); err != nil {
				return err
			}
			// An attempt begun and not ended by this handle was cut off
			// (a crash, say): it is recorded so, not run again unseen.
			fresh, cut := rh.interrupted(steps)
			if len(cut) > 0 {
				if err := h.recordInterrupted(ctx, rh, cut, abi.InterruptCrashed); err != nil {
					return err
				}
				continue
			}
			steps = fresh
			if err := h.runWork(ctx, rh, steps, agents); err != nil {
				return err
			}
			continue
		}
		if rs.Acts() > 0 && !rs.Satisfied(rs.Detail.Waiting) {
			return nil
		}
		if err := h.activate(ctx, rh); err != nil {
			if errors.Is(err, store.ErrHookTaken) {
				// Another run claimed a token this activation meant to
				// take; the state was reloaded, and the next activation
				// sees the conflict.
				continue
			}
			return err
		}
	}
	return fmt.Errorf("host: run %s did not settle after %d rounds", rh.id, maxDriveRounds)
}

// activate runs the workflow body until it suspends or completes: on the
// parked instance when there is one, else on a fresh one that replays.
// Called with rh.mu held.
func (h *Host) activate(ctx context.Context, rh *runHandle) error {
	rs := rh.rs
	lp, err := h.plugin(ctx, rs.Rec.Plugin, rs.Rec.Version)
	if err != nil {
		return err
	}
	if rs.Created != nil && rs.Created.SharedInit {
		// After the activation: a refill now would compete with it.
		defer h.refill(lp)
	}
	b := newBatch(rs)
	if _, err := b.push(EvRunResumed, &history.Data{Activation: rs.Acts()}); err != nil {
		return err
	}
	w, fromPool, err := h.activationInstance(ctx, rh, lp)
	if err != nil {
		return h.failActivation(ctx, rh, b, nil, err)
	}
	if fromPool {
		defer h.refill(lp) // it took an instance from the pool
	}
	// An activation run again on another instance (below) is the one
	// observed, not this attempt too.
	again := false
	if o := h.observer(); o != nil {
		before, start := len(rs.Ops), time.Now()
		defer func() {
			if !again {
				observeActivation(o, rs, w, before, start)
			}
		}()
	}
	w.begin(b)
	res, err := w.inst.Call(ctx, abi.RunExport)
	if err == nil {
		err = w.err
	}
	dead := false
	if errors.Is(err, errBlockSuspend) && w.suspended {
		err, res, dead = nil, abi.RunSuspended, true
	}
	if err != nil && (w.warmed || !rh.lostOnce) && errors.Is(err, ErrInstanceLost) && ctx.Err() == nil {
		// The engine no longer holds the parked instance's state (a
		// JavaScript worker evicted or dead), or could not go on with a
		// fresh one (once): nothing of this activation is committed, and
		// it runs again on an instance that replays.
		if !w.warmed {
			rh.lostOnce = true
			defer func() { rh.lostOnce = false }()
		}
		w.close(ctx)
		if rerr := h.reload(ctx, rh, store.Run{}); rerr != nil {
			return errors.Join(err, rerr)
		}
		again = true
		return h.activate(ctx, rh)
	}
	w.warmed = false
	if err != nil && w.restored && ctx.Err() == nil {
		// Replay is the truth: before failing the run on a restored
		// instance, the activation runs again on one that replays.
		w.close(ctx)
		h.distrust(rs.ID, rs.LastSeq)
		if rerr := h.reload(ctx, rh, store.Run{}); rerr != nil {
			return errors.Join(err, rerr)
		}
		again = true
		return h.activate(ctx, rh)
	}
	if err != nil {
		return h.failActivation(ctx, rh, b, w, err)
	}
	switch {
	case res == abi.RunSuspended && w.suspended:
		return h.activationSuspended(ctx, rh, b, w, dead)
	case res == abi.RunDone && w.completed:
		return h.activationCompleted(ctx, rh, b, w)
	}
	return h.failActivation(ctx, rh, b, w, &GuestError{Message: fmt.Sprintf(
		"ABI violation: %s returned %d, but the guest had %s", abi.RunExport, res, map[bool]string{true: "completed", false: "neither suspended nor completed"}[w.completed])})
}

// observeActivation tells o of an activation of w that began at start,
// when the log held before ops: how w came by the run's state, and how
// much of the log it replayed.
func observeActivation(o Observer, rs *state.Run, w *wfInstance, before int, start time.Time) {
	resume := ResumeReplay
	switch {
	case w.warmed:
		resume = ResumeParked
	case w.restored:
		resume = ResumeSnapshot
	case rs.Acts() <= 1:
		resume = ResumeFresh
	}
	replayed := before - int(w.startCursor)
	if replayed < 0 || resume == ResumeParked {
		replayed = 0
	}
	o.Activation(rs.Rec.Tool, resume, replayed, time.Since(start))
}

// activationInstance is the instance an activation runs on: the run's
// parked one, else one restored from a snapshot (fromPool: it took an
// instance from the plugin's pool, to refill), else a fresh one that
// replays.
func (h *Host) activationInstance(ctx context.Context, rh *runHandle, lp *loadedPlugin) (w *wfInstance, fromPool bool, err error) {
	rs := rh.rs
	w = h.takeWarm(rh)
	if w != nil && w.rs != rs {
		w.close(ctx)
		w = nil
	}
	if w != nil {
		w.warmed = true
		return w, false, nil
	}
	if w, err = h.restore(ctx, rs, lp); err != nil {
		if !errors.Is(err, errSnapshot) {
			return nil, false, err
		}
		h.snaps.refused.Add(1)
		w = nil // replay instead
	}
	if w != nil {
		h.snaps.restored.Add(1)
		return w, rs.Created == nil || !rs.Created.SharedInit, nil
	}
	if w, err = h.newWorkflowInstance(ctx, rs, lp, false); err != nil {
		return nil, false, err
	}
	return w, false, nil
}

// activationSuspended commits an activation whose guest suspended, and
// keeps its instance for the next one: parked, or snapshotted when
// instances are not parked. A dead instance (its blocking await could not
// be satisfied) is closed.
func (h *Host) activationSuspended(ctx context.Context, rh *runHandle, b *batch, w *wfInstance, dead bool) error {
	rs := rh.rs
	// Output written between the await and the return is recorded too.
	err := w.flushOutput()
	if err == nil {
		err = h.commit(ctx, rh, b, &history.Detail{Waiting: w.waiting})
	}
	if err != nil {
		w.close(ctx)
		return err
	}
	switch {
	case dead:
		w.close(ctx)
	case h.opts.MaxWarm < 0:
		// Not parked: the next resume restores this instead of
		// replaying.
		h.recycle(ctx, w, h.snapshotAfter(ctx, w, rs.LastSeq, len(rs.Ops)))
	default:
		h.park(ctx, rh, w)
	}
	return nil
}

// activationCompleted commits an activation whose guest completed the
// run, and gives its instance back for reuse.
func (h *Host) activationCompleted(ctx context.Context, rh *runHandle, b *batch, w *wfInstance) error {
	err := w.flushOutput()
	if err == nil {
		err = h.commit(ctx, rh, b, nil)
	}
	if err == nil {
		h.recycle(ctx, w, nil)
	}
	w.close(ctx)
	return err
}

// failActivation handles an activation that ended in an error. A guest
// that failed (trapped, exited, broke the ABI or a limit) fails its run,
// with what it wrote to stderr. Anything else leaves the run as it was:
// a non-deterministic guest (so a fixed plugin can continue the run), a
// cancelled context, a store error.
func (h *Host) failActivation(ctx context.Context, rh *runHandle, b *batch, w *wfInstance, cause error) error {
	var out []byte
	for _, e := range b.b.Events {
		if e.Kind == EvOutput {
			if d, err := history.Decode(e); err == nil && d.Stream == "stderr" {
				out = append(out, d.Data...)
			}
		}
	}
	if w != nil {
		for _, c := range w.outBuf {
			if c.stream == "stderr" {
				out = append(out, c.data...)
			}
		}
		w.close(ctx)
	}
	if err := h.reload(ctx, rh, store.Run{}); err != nil {
		return errors.Join(cause, err)
	}
	h.observeLimit(cause)
	var le *LimitError
	var ge *GuestError
	var pe *PluginError
	if !(errors.As(cause, &le) || errors.As(cause, &ge) || errors.As(cause, &pe)) {
		var nd *NonDeterminismError
		if errors.As(cause, &nd) {
			d := rh.rs.Detail
			d.Stalled = nd.Error()
			nb := newBatch(rh.rs)
			if err := h.commit(ctx, rh, nb, &d); err != nil {
				return errors.Join(cause, err)
			}
		}
		return cause
	}
	eo := errorObject(cause)
	if pe != nil {
		eo = &abi.ErrorObject{Type: abi.ErrTypeTrap, Message: pe.Error()}
	}
	if len(out) > 0 {
		tail := out[max(0, len(out)-512):]
		eo.Message += "; stderr: " + string(tail)
	}
	nb := newBatch(rh.rs)
	now := time.Now()
	if len(out) > 0 {
		data, cut := capOutput(out, lpOutputRoom(rh.rs, h.limitsOf(ctx, rh.rs)))
		if len(data) > 0 {
			if _, err := nb.pushAt(EvOutput, now, &history.Data{Stream: "stderr", Data: string(data), Produced: rh.rs.OutProduced, Cut: cut}); err != nil {
				return err
			}
		}
	}
	if err := nb.finish(now, abi.InterruptRunEnded); err != nil {
		return err
	}
	if _, err := nb.pushAt(EvRunFailed, now, &history.Data{Error: eo}); err != nil {
		return err
	}
	return h.commit(ctx, rh, nb, nil)
}

func lpOutputRoom(rs *state.Run, l Limits) int64 { return l.OutputBytes - rs.OutRecorded }

// notInFlight drops the ops another driver is running.
func (rh *runHandle) notInFlight(ps []uint32) []uint32 {
	if len(rh.inflight) == 0 {
		return ps
	}
	out := ps[:0]
	for _, p := range ps {
		if !rh.inflight[p] {
			out = append(out, p)
		}
	}
	return out
}

// runWork runs step attempts, in parallel up to the host's step
// concurrency, and agent turns, all at once; it records each outcome as it
// arrives. Its phases: join the host's work (joinWork), mark the work in
// flight, start the steps and the agent turns, collect and record their
// outcomes, record what was cut off (endWork).
//
// Called with rh.mu held, and returns with it held; it releases rh.mu
// while the work runs (workRound.next, and startSteps for a lone step),
// so that calls, answers and aborts get in meanwhile (see RATIONALE.md,
// "Why do steps and agent turns run without the run's lock?"). It takes
// h.mu briefly (joinWork), never while it waits.
func (h *Host) runWork(ctx context.Context, rh *runHandle, steps, agents []uint32) error {
	// Close waits for the work, so that attempts it cuts off are
	// recorded as interrupted before the store closes.
	if err := h.joinWork(); err != nil {
		return err
	}
	defer h.work.Done()
	// Closing the host cuts the work off; it stays open in the log and
	// runs again after recovery.
	ctx, cut := context.WithCancel(ctx)
	defer cut()
	defer context.AfterFunc(h.life, cut)()
	rs := rh.rs
	var lp *loadedPlugin
	if len(steps) > 0 {
		var err error
		if lp, err = h.plugin(ctx, rs.Rec.Plugin, rs.Rec.Version); err != nil {
			return err
		}
	}
	r := &workRound{h: h, rh: rh, rs: rs, ctx: ctx, cut: cut, steps: steps, agents: agents,
		done: make(chan workDone, len(steps)+len(agents))}
	rh.markInflight(steps, agents)
	defer rh.clearInflight(steps, agents)
	r.startSteps(lp)
	r.startAgents()
	cutOff, ended, err := r.collect()
	if ended {
		return nil
	}
	return r.endWork(cutOff, err)
}

// joinWork counts a runWork call in h.work, which Close waits for; once
// the host is closed it returns ErrClosed instead. It takes h.mu.
func (h *Host) joinWork() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	h.work.Add(1)
	return nil
}

// markInflight notes the steps and agent turns a driver is about to run
// with mu released, so that other drivers leave them alone. Called with
// mu held.
func (rh *runHandle) markInflight(steps, agents []uint32) {
	if rh.inflight == nil {
		rh.inflight = map[uint32]bool{}
	}
	for _, p := range steps {
		rh.inflight[p] = true
	}
	for _, p := range agents {
		rh.inflight[p] = true
	}
}

// clearInflight undoes markInflight once the work is over, and cuts off
// the agent turns still running (the run ended, say). Called with mu held.
func (rh *runHandle) clearInflight(steps, agents []uint32) {
	for _, p := range steps {
		delete(rh.inflight, p)
	}
	for _, p := range agents {
		delete(rh.inflight, p)
		if stop := rh.stopWork[p]; stop != nil {
			stop()
			delete(rh.stopWork, p)
		}
	}
}

// workDone is the outcome of one piece of a runWork's work.
type workDone struct {
	p     uint32
	a     *stepAttempt // a step's attempt, or nil for an agent turn
	out   stepOutcome
	agent abi.AgentResult
}

// workRound is the work of one runWork call under way: the steps and
// agent turns it started, and the channel their outcomes come back on.
type workRound struct {
	h     *Host
	rh    *runHandle
	rs    *state.Run // rh's state when the work began
	ctx   context.Context
	cut   context.CancelFunc // cuts ctx off: the host closes, or the run ended
	steps []uint32
	// agents are the agent turns; they wait on another session, not on
	// this host's compute, so they do not take a step's slot.
	agents []uint32
	done   chan workDone
	queue  []workDone // outcomes taken from done and not handled yet
}

// startSteps starts the step attempts, each on its own goroutine and at
// most StepConcurrency at once. Called with rh.mu held. A lone step (the
// only work) runs here instead, with rh.mu released as collect would
// release it, but with no goroutine to start and wake for a sequence of
// single steps.
func (r *workRound) startSteps(lp *loadedPlugin) {
	h, rh, rs := r.h, r.rh, r.rs
	sem := make(chan struct{}, h.opts.StepConcurrency)
	for _, p := range r.steps {
		o := rs.Op(p)
		delete(rh.fresh, p) // begun: from here on, cut off if not ended
		a := &stepAttempt{runID: rs.ID, op: p, name: o.Name, input: o.Input, attempt: o.Attempt,
			meta: mustJSON(metadata(rs, state.StepID(rs.ID, p))), rh: rh, abortsBefore: rs.AbortsBefore(o.Seq)}
		run := func() {
			sem <- struct{}{}
			start := time.Now()
			out := h.execStep(r.ctx, lp, a)
			if o := h.observer(); o != nil {
				o.Step(rs.Rec.Tool, time.Since(start), out.err != nil)
			}
			<-sem
			r.done <- workDone{p: p, a: a, out: out}
		}
		if len(r.steps) == 1 && len(r.agents) == 0 {
			rh.mu.Unlock()
			run()
			rh.mu.Lock()
		} else {
			go run()
		}
	}
}

// startAgents starts the agent turns, each on its own goroutine with a
// context its rh.stopWork entry cancels. Called with rh.mu held.
func (r *workRound) startAgents() {
	rh := r.rh
	if rh.stopWork == nil {
		rh.stopWork = map[uint32]context.CancelFunc{}
	}
	for _, p := range r.agents {
		t := agentTurn(r.rs, p)
		actx, stop := context.WithCancel(r.ctx)
		rh.stopWork[p] = stop
		go func() {
			r.done <- workDone{p: p, agent: r.h.execAgent(actx, t)}
		}()
	}
}

// collect records the outcomes of the work as they arrive, until all of
// it has come back. It returns the step attempts cut short (to record as
// interrupted), whether the run ended meanwhile (the rest is dropped), and
// the first error; after an error the rest is dropped too. Called with
// rh.mu held; it releases rh.mu while it waits (next).
func (r *workRound) collect() (cutOff []uint32, ended bool, firstErr error) {
	for taken, total := 0, len(r.steps)+len(r.agents); taken < total; {
		d := r.next()
		taken++
		if !ended && r.rh.rs.Status.Terminal() {
			ended = true
			r.cut()
		}
		if firstErr != nil || ended {
			continue
		}
		if r.cutShort(d) {
			firstErr = r.ctx.Err()
			if d.a != nil {
				cutOff = append(cutOff, d.p)
			}
			continue
		}
		wctx := context.WithoutCancel(r.ctx)
		if d.a != nil {
			firstErr = r.h.recordStep(wctx, r.rh, d.p, d.a, d.out)
		} else {
			turns := r.agentsEnded(d)
			taken += len(turns) - 1
			firstErr = r.h.recordAgents(wctx, r.rh, turns)
		}
		if firstErr == nil {
			firstErr = r.ctx.Err()
		}
	}
	return cutOff, ended, firstErr
}

// next returns the next outcome: one queued, else the next to arrive,
// waited for with rh.mu released, so that a call, an answer, a hook
// delivery or an abort does not wait for the work. Called with rh.mu
// held; it holds it again when it returns.
func (r *workRound) next() workDone {
	if len(r.queue) > 0 {
		d := r.queue[0]
		r.queue = r.queue[1:]
		return d
	}
	r.rh.mu.Unlock()
	d := <-r.done
	r.rh.mu.Lock()
	return d
}

// agentsEnded returns the agent turn d with the other turns that have
// ended by now, to record in one commit: a fan-out of fast agents costs
// one write, not one per turn. The other outcomes it comes across are
// queued for next.
func (r *workRound) agentsEnded(d workDone) []agentOutcome {
	turns := []agentOutcome{{d.p, d.agent}}
	for {
		select {
		case d2 := <-r.done:
			if d2.a == nil && !r.cutShort(d2) {
				turns = append(turns, agentOutcome{d2.p, d2.agent})
			} else {
				r.queue = append(r.queue, d2)
			}
		default:
			return turns
		}
	}
}

// cutShort reports whether the work may have been cut short by the
// caller, not by the guest or the agent: it stays open and runs again.
// Finished work is kept.
func (r *workRound) cutShort(d workDone) bool {
	return r.ctx.Err() != nil && (d.a != nil && d.out.err != nil || d.a == nil && d.agent.Status != abi.AgentCompleted)
}

// endWork records the step attempts cut off as interrupted, by the host's
// stop or its Close, and returns the work's error: ErrClosed with it when
// the host closed. Called with rh.mu held.
func (r *workRound) endWork(cutOff []uint32, firstErr error) error {
	h := r.h
	if len(cutOff) > 0 {
		cause := abi.InterruptHostStopped
		if h.life.Err() != nil {
			cause = abi.InterruptHostClosed
		}
		if err := h.recordInterrupted(context.WithoutCancel(r.ctx), r.rh, cutOff, cause); err != nil {
			firstErr = errors.Join(firstErr, err)
		}
	}
	if firstErr != nil && h.life.Err() != nil {
		return fmt.Errorf("%w: work cut off: %w", ErrClosed, firstErr)
	}
	return firstErr
}

func (h *Host) recordStep(ctx context.Context, rh *runHandle, p uint32, a *stepAttempt, out stepOutcome) error {
	rs := rh.rs
	o := rs.Op(p)
	if rs.Status.Terminal() || o == nil || !o.AttemptOpen || o.Attempt != a.attempt {
		return nil // the run moved on (it was cancelled, say)
	}
	b := newBatch(rs)
	now := time.Now()
	limits := h.limitsOf(ctx, rs)
	for _, c := range out.output {
		data, cut := capOutput(c.data, lpOutputRoom(rs, limits))
		if len(data) == 0 && !cut {
			continue
		}
		if _, err := b.pushAt(EvOutput, now, &history.Data{Stream: c.stream, Data: string(data), Step: p, Cut: cut}); err != nil {
			return err
		}
	}
	if out.err == nil {
		if _, err := b.pushAt(EvStepCompleted, now, &history.Data{Op: p, Attempt: a.attempt, Result: out.result}); err != nil {
			return err
		}
	} else if err := h.pushStepFailure(b, o, p, a.attempt, out.err, now); err != nil {
		return err
	}
	return h.commit(ctx, rh, b, nil)
}

// Parked reports how many suspended instances are parked for a warm
// resume, and their linear memory in bytes as it was when each was parked.
func (h *Host) Parked() (n int, bytes uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.warm.Len(), h.warmBytes
}
