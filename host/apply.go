package host

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// The functions here fold one kind of event each into a run's state; apply
// checks the event's place in the log, decodes it into d and calls the one
// for its kind. Each returns an ErrBadHistory error for an event its kind
// does not allow at that point, leaving the state as it was where it can
// (an error ends the load or the commit anyway).

// applyRunCreated takes the run's identity from its first event: the seed
// of its generator, its start time, the plugin version it is pinned to,
// and its first call (a serve run's others come by call_received).
func (rs *runState) applyRunCreated(e *store.Event, d *history.Data) error {
	if rs.created != nil {
		return fmt.Errorf("%w: second %s at event %d", ErrBadHistory, e.Kind, e.Seq)
	}
	seed, err := hex.DecodeString(d.Seed)
	if err != nil || len(seed) != 32 {
		return fmt.Errorf("%w: run seed %q", ErrBadHistory, d.Seed)
	}
	created := *d
	rs.created, rs.start = &created, e.Time
	rs.pinVersion, rs.pinHash = d.Version, d.ModuleHash
	copy(rs.seed[:], seed)
	rs.calls = []callRec{{seq: e.Seq, id: rs.id, input: d.Input}}
	return nil
}

// applyRunResumed begins an activation: the settlements recorded before
// it are what the guest sees in it (visible).
func (rs *runState) applyRunResumed(e *store.Event) {
	rs.markers = append(rs.markers, marker{seq: e.Seq, t: e.Time})
}

// applyStepStarted begins an attempt of a step: attempt 1 creates the
// step's op; a later one reopens the op, whose last attempt failed with a
// retry.
func (rs *runState) applyStepStarted(e *store.Event, d *history.Data) error {
	if o := rs.op(d.Op); o != nil && d.Attempt > 1 {
		if o.kind != abi.OpStep || o.settled || o.attemptOpen {
			return fmt.Errorf("%w: event %d starts attempt %d of op %d, which cannot retry", ErrBadHistory, e.Seq, d.Attempt, d.Op)
		}
		o.attempt, o.attemptOpen, o.retryAt = d.Attempt, true, time.Time{}
		return nil
	}
	o, err := rs.newOp(e, d.Op, abi.OpStep, d.Name)
	if err != nil {
		return err
	}
	o.input, o.retry, o.attempt, o.attemptOpen = d.Input, d.Retry, 1, true
	return nil
}

// applyStepEnded ends the open attempt of a step (step_completed or
// step_failed): a completion fulfils the step's future, a failure with a
// retry time leaves it pending until the next attempt, any other failure
// rejects it.
func (rs *runState) applyStepEnded(e *store.Event, d *history.Data) error {
	o, err := rs.existingOp(e, d.Op, abi.OpStep)
	if err != nil {
		return err
	}
	if !o.attemptOpen {
		return fmt.Errorf("%w: event %d ends an attempt of op %d that was not started", ErrBadHistory, e.Seq, d.Op)
	}
	o.attemptOpen = false
	switch {
	case e.Kind == EvStepCompleted:
		o.settle(e.Seq, abi.FutureFulfilled, nullIfEmpty(d.Result), 0)
	case d.RetryAt != nil:
		o.retryAt = *d.RetryAt
	default:
		o.settle(e.Seq, abi.FutureRejected, mustJSON(errOrUnknown(d.Error)), 0)
	}
	return nil
}

// applyTimerSet creates a sleep op. A sleep whose time had come when it
// was made is settled by the guest's own op (Immediate), so the guest sees
// it at once rather than in the next activation.
func (rs *runState) applyTimerSet(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpSleep, "")
	if err != nil {
		return err
	}
	if d.FireAt != nil {
		o.fireAt = *d.FireAt
	}
	if d.Immediate {
		o.settle(e.Seq, abi.FutureFulfilled, []byte("null"), d.Op)
	}
	return nil
}

// applyTimerFired fulfils a sleep's future, once.
func (rs *runState) applyTimerFired(e *store.Event, d *history.Data) error {
	o, err := rs.existingOp(e, d.Op, abi.OpSleep)
	if err != nil {
		return err
	}
	if o.settled {
		return fmt.Errorf("%w: timer of op %d fired twice", ErrBadHistory, d.Op)
	}
	o.settle(e.Seq, abi.FutureFulfilled, []byte("null"), 0)
	return nil
}

// applyAskOpened creates a question's op. One answered as it was asked
// (no one can answer, or the run is unwinding from an abort) is settled by
// the guest's own op; any other stays open and is counted in openAsks.
func (rs *runState) applyAskOpened(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpAsk, "")
	if err != nil {
		return err
	}
	o.askID, o.request = d.AskID, d.Request
	if d.Answer != nil {
		o.settle(e.Seq, abi.FutureFulfilled, history.EncodeAnswer(d.Answer), d.Op)
	} else {
		rs.openAsks++
	}
	return nil
}

// applyAskSettled fulfils an open question's future with its answer (an
// answer, or a withdrawal).
func (rs *runState) applyAskSettled(e *store.Event, d *history.Data) error {
	o, err := rs.existingOp(e, d.Op, abi.OpAsk)
	if err != nil {
		return err
	}
	if o.settled || d.Answer == nil {
		return fmt.Errorf("%w: question of op %d settled twice or without an answer", ErrBadHistory, d.Op)
	}
	o.settle(e.Seq, abi.FutureFulfilled, history.EncodeAnswer(d.Answer), 0)
	rs.openAsks--
	return nil
}

// applyHookCreated creates a hook (or a webhook) and its op, answered at
// once with the token; a token another run held is recorded as the
// hook's conflict, and every wait on the hook then rejects.
func (rs *runState) applyHookCreated(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpHookCreate, "")
	if err != nil {
		return err
	}
	o.settle(e.Seq, abi.FutureFulfilled, mustJSON(abi.HookCreated{Token: d.Token, Conflict: d.Conflict, URL: d.URL}), d.Op)
	rs.hooks[d.Op] = &hookRec{token: d.Token, conflict: d.Conflict, webhook: d.Webhook, url: d.URL}
	return nil
}

// applyHookNext creates a wait for a hook's next payload: the hook's
// index-th wait takes its index-th payload, already received or not yet.
// A wait on a hook in conflict or disposed rejects at once.
func (rs *runState) applyHookNext(e *store.Event, d *history.Data) error {
	h := rs.hooks[d.Hook]
	if h == nil {
		return fmt.Errorf("%w: event %d waits on unknown hook %d", ErrBadHistory, e.Seq, d.Hook)
	}
	o, err := rs.newOp(e, d.Op, abi.OpHookNext, "")
	if err != nil {
		return err
	}
	o.hook, o.index = d.Hook, len(h.nexts)
	h.nexts = append(h.nexts, d.Op)
	switch {
	case h.conflict != "":
		o.settle(e.Seq, abi.FutureRejected, mustJSON(abi.ErrorObject{Type: abi.ErrTypeHookConflict,
			Message: fmt.Sprintf("hook token %q is held by run %s", h.token, h.conflict)}), d.Op)
	case h.disposed:
		// After a dispose every wait rejects, even if payloads that
		// arrived earlier were never taken.
		o.settle(e.Seq, abi.FutureRejected, hookDisposedErr(h), d.Op)
	case o.index < len(h.received):
		r := h.received[o.index]
		o.settle(r.seq, abi.FutureFulfilled, r.payload, 0)
	}
	return nil
}

// applyHookReceived delivers a payload to a live hook: it fulfils the
// wait that takes it, if the guest has made that wait yet.
func (rs *runState) applyHookReceived(e *store.Event, d *history.Data) error {
	h := rs.hooks[d.Hook]
	if h == nil || h.disposed || h.conflict != "" {
		return fmt.Errorf("%w: event %d delivers to hook %d, which cannot receive", ErrBadHistory, e.Seq, d.Hook)
	}
	h.received = append(h.received, hookPayload{seq: e.Seq, payload: nullIfEmpty(d.Payload)})
	if i := len(h.received) - 1; i < len(h.nexts) {
		rs.op(h.nexts[i]).settle(e.Seq, abi.FutureFulfilled, nullIfEmpty(d.Payload), 0)
	}
	return nil
}

// applyHookDisposed disposes of a hook, by the guest's op or at the run's
// end (no op): its waits still pending reject.
func (rs *runState) applyHookDisposed(e *store.Event, d *history.Data) error {
	h := rs.hooks[d.Hook]
	if h == nil {
		return fmt.Errorf("%w: event %d disposes unknown hook %d", ErrBadHistory, e.Seq, d.Hook)
	}
	if d.Op != 0 { // disposed by the guest, not when the run ended
		if _, err := rs.newOp(e, d.Op, abi.OpHookDispose, ""); err != nil {
			return err
		}
	}
	h.disposed = true
	for _, p := range h.nexts {
		if o := rs.op(p); !o.settled {
			o.settle(e.Seq, abi.FutureRejected, hookDisposedErr(h), d.Op)
		}
	}
	return nil
}

// applyProgress records a progress op; its value is the run's last
// progress, and the result of a run that completes with null.
func (rs *runState) applyProgress(e *store.Event, d *history.Data) error {
	if _, err := rs.newOp(e, d.Op, abi.OpProgress, ""); err != nil {
		return err
	}
	rs.lastProgress = d.Value
	return nil
}

// applyOutput counts recorded guest output: the bytes the workflow body
// has produced so far (a replay skips as many), and those the log holds
// (against the run's output cap). It may follow the run's end.
func (rs *runState) applyOutput(d *history.Data) {
	if d.Step == 0 {
		rs.outProduced = d.Produced
	}
	rs.outRecorded += int64(len(d.Data))
}

// applyRunEnded ends the run completed or failed (run_completed,
// run_failed), by the guest's complete op or (no op) by the host; the
// calls still waiting are answered by the end.
func (rs *runState) applyRunEnded(e *store.Event, d *history.Data) error {
	if d.Op != 0 {
		if _, err := rs.newOp(e, d.Op, abi.OpComplete, ""); err != nil {
			return err
		}
	}
	rs.endCalls(e.Seq)
	if e.Kind == EvRunCompleted {
		rs.status, rs.result = store.StatusCompleted, nullIfEmpty(d.Result)
	} else {
		rs.status, rs.failure, rs.endResult = store.StatusFailed, errOrUnknown(d.Error), d.Result
	}
	return nil
}

// applyRunCancelled ends the run cancelled: by the host, or (with an op)
// by the body's own end after an abort, whose result is kept.
func (rs *runState) applyRunCancelled(e *store.Event, d *history.Data) error {
	if d.Op != 0 { // the body's own end, after an abort
		if _, err := rs.newOp(e, d.Op, abi.OpComplete, ""); err != nil {
			return err
		}
	}
	rs.endCalls(e.Seq)
	rs.status, rs.failure, rs.endResult = store.StatusCancelled, d.Error, d.Result
	return nil
}

// applyWebhookResponded records the guest's answer to a request of a
// manual webhook; each request is answered at most once.
func (rs *runState) applyWebhookResponded(e *store.Event, d *history.Data) error {
	h := rs.hooks[d.Hook]
	if h == nil || h.webhook == nil || !h.webhook.Manual || d.Index < 0 || d.Index >= len(h.received) || h.responses[d.Index] != nil || d.Response == nil {
		return fmt.Errorf("%w: event %d answers request %d of hook %d, which cannot be answered", ErrBadHistory, e.Seq, d.Index, d.Hook)
	}
	if _, err := rs.newOp(e, d.Op, abi.OpWebhookRespond, ""); err != nil {
		return err
	}
	if h.responses == nil {
		h.responses = map[int]*abi.HTTPResponse{}
	}
	h.responses[d.Index] = d.Response
	return nil
}

// applyAgentSent creates an agent op. A message to a session runs as the
// session's turn when none is running, else waits (queued) for the next
// turn; a session stays with the agent it began with.
func (rs *runState) applyAgentSent(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpAgent, d.Name)
	if err != nil {
		return err
	}
	o.input, o.request = d.Input, d.Request
	if d.AgentRequest != nil {
		a := *d.AgentRequest
		o.agent = &a
	}
	key := o.session()
	if key == "" {
		return nil
	}
	if rs.sessions == nil {
		rs.sessions = map[string]*childSession{}
	}
	cs := rs.sessions[key]
	switch {
	case cs == nil:
		rs.sessions[key] = &childSession{agent: d.Name, running: d.Op}
	case cs.agent != d.Name:
		return fmt.Errorf("%w: event %d sends to session %q of agent %s as agent %s", ErrBadHistory, e.Seq, key, cs.agent, d.Name)
	case cs.running != 0:
		cs.queued = append(cs.queued, d.Op)
	default:
		cs.running = d.Op
	}
	return nil
}

// applyAgentSettled fulfils an agent turn's future with its result. In a
// session, the messages that went with the turn settle with it, and the
// messages queued meanwhile become the next turn (endTurn).
func (rs *runState) applyAgentSettled(e *store.Event, d *history.Data) error {
	o, err := rs.existingOp(e, d.Op, abi.OpAgent)
	if err != nil {
		return err
	}
	if o.settled || d.Agent == nil {
		return fmt.Errorf("%w: agent turn of op %d settled twice or without a result", ErrBadHistory, d.Op)
	}
	v := mustJSON(d.Agent)
	o.settle(e.Seq, abi.FutureFulfilled, v, 0)
	if cs := rs.sessions[o.session()]; o.session() != "" && cs != nil {
		if cs.running != d.Op {
			return fmt.Errorf("%w: event %d ends a turn of session %q that is not running", ErrBadHistory, e.Seq, o.session())
		}
		rs.endTurn(cs, e.Seq, d.Op, v)
	}
	return nil
}

// endTurn ends the running turn of a session, which began with the
// message at p and ended with value v at event seq.
func (rs *runState) endTurn(cs *childSession, seq uint64, p uint32, v []byte) {
	// The messages that went with the turn end with it; those sent
	// meanwhile are the next turn.
	for _, j := range cs.joined[p] {
		if q := rs.op(j); !q.settled {
			q.settle(seq, abi.FutureFulfilled, v, 0)
		}
	}
	cs.turns = append(cs.turns, p)
	cs.running = 0
	if len(cs.queued) > 0 {
		cs.running = cs.queued[0]
		if len(cs.queued) > 1 {
			if cs.joined == nil {
				cs.joined = map[uint32][]uint32{}
			}
			cs.joined[cs.running] = append([]uint32(nil), cs.queued[1:]...)
		}
		cs.queued = nil
	}
}

// applyCallReceived adds a call to a serve run; the receive op that takes
// it, if the guest has made it, is fulfilled with it.
func (rs *runState) applyCallReceived(e *store.Event, d *history.Data) error {
	if d.Index != len(rs.calls) {
		return fmt.Errorf("%w: event %d delivers call %d, expected call %d", ErrBadHistory, e.Seq, d.Index, len(rs.calls))
	}
	if in := bytes.TrimLeft(d.Input, " \t\r\n"); d.CallID == "" || len(in) == 0 || in[0] != '{' {
		return fmt.Errorf("%w: event %d delivers call %d without an id or an object input", ErrBadHistory, e.Seq, d.Index)
	}
	rs.calls = append(rs.calls, callRec{seq: e.Seq, id: d.CallID, input: d.Input})
	if d.Index < len(rs.receives) {
		rs.op(rs.receives[d.Index]).settle(e.Seq, abi.FutureFulfilled, rs.serveCall(d.Index), 0)
	}
	return nil
}

// applyReceive creates a receive op: the run's i-th takes call i, settled
// by that call's event when it has arrived.
func (rs *runState) applyReceive(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpReceive, "")
	if err != nil {
		return err
	}
	o.index = len(rs.receives)
	rs.receives = append(rs.receives, d.Op)
	if o.index < len(rs.calls) {
		o.settle(rs.calls[o.index].seq, abi.FutureFulfilled, rs.serveCall(o.index), 0)
	}
	return nil
}

// applyReplied answers, with the reply's output, the calls among the
// first d.Index that the guest could have received and that are still
// waiting; the reply op is settled at once with how many it answered.
func (rs *runState) applyReplied(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpReply, "")
	if err != nil {
		return err
	}
	if d.Index < 0 || d.Index > rs.receivable() || d.Answered < 0 {
		return fmt.Errorf("%w: event %d replies to %d received calls, but %d could have been received", ErrBadHistory, e.Seq, d.Index, rs.receivable())
	}
	n := 0
	for i := range d.Index {
		if c := &rs.calls[i]; !c.answered {
			c.answered, c.output, c.by = true, nullIfEmpty(d.Payload), e.Seq
			n++
		}
	}
	if n != d.Answered {
		return fmt.Errorf("%w: event %d answers %d calls, but %d were waiting", ErrBadHistory, e.Seq, d.Answered, n)
	}
	o.settle(e.Seq, abi.FutureFulfilled, mustJSON(abi.ReplyResult{Answered: n}), d.Op)
	return nil
}

// applyAbortRequested records an abort: the guest's abort signals still
// pending fire with its reason, and a serve run's calls still waiting end
// cancelled.
func (rs *runState) applyAbortRequested(e *store.Event, d *history.Data) error {
	if d.Index != len(rs.aborts) {
		return fmt.Errorf("%w: event %d is abort %d, expected abort %d", ErrBadHistory, e.Seq, d.Index, len(rs.aborts))
	}
	rs.aborts = append(rs.aborts, abortRec{seq: e.Seq, reason: d.Reason})
	v := mustJSON(abi.AbortInfo{Reason: d.Reason})
	for _, o := range rs.ops {
		if o != nil && o.kind == abi.OpSignal && !o.settled { // nil: left out of an image, settled
			o.settle(e.Seq, abi.FutureFulfilled, v, 0)
		}
	}
	// A serve run's calls still waiting end as cancelled.
	for i := range rs.calls {
		if c := &rs.calls[i]; !c.answered {
			c.answered, c.cancelled, c.by = true, true, e.Seq
		}
	}
	return nil
}

// applySignal creates an abort signal's op; one made after an abort
// (Reason set) has fired already, by the guest's own op.
func (rs *runState) applySignal(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpSignal, "")
	if err != nil {
		return err
	}
	if d.Reason != "" {
		o.settle(e.Seq, abi.FutureFulfilled, mustJSON(abi.AbortInfo{Reason: d.Reason}), d.Op)
	}
	return nil
}

// applyOpRefused records a recorded op the host refused: it takes its
// position, and a replay answers it with the same refusal.
func (rs *runState) applyOpRefused(e *store.Event, d *history.Data) error {
	kind, ok := abi.OpKindByName(d.Kind)
	if !ok || !kind.Recorded() || d.Status < uint32(abi.StatusBadRequest) || d.Error == nil {
		return fmt.Errorf("%w: event %d refuses op kind %q with status %d", ErrBadHistory, e.Seq, d.Kind, d.Status)
	}
	o, err := rs.newOp(e, d.Op, kind, d.Name)
	if err != nil {
		return err
	}
	o.refused, o.value = abi.Status(d.Status), mustJSON(d.Error)
	return nil
}

// applyRunUpgraded pins the run to another plugin version. The record
// carries the new pin; nothing else in the model changes.
func (rs *runState) applyRunUpgraded(d *history.Data) {
	rs.pinVersion, rs.pinHash = d.Version, d.ModuleHash
}
