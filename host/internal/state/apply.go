package state

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/internal/jsonutil"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// The functions here fold one kind of event each into a run's state; apply
// checks the event's place in the log, decodes it into d and calls the one
// for its kind. Each returns an history.ErrBadHistory error for an event its kind
// does not allow at that point, leaving the state as it was where it can
// (an error ends the load or the commit anyway).

// applyRunCreated takes the run's identity from its first event: the seed
// of its generator, its start time, the plugin version it is pinned to,
// and its first call (a serve run's others come by call_received).
func (rs *Run) applyRunCreated(e *store.Event, d *history.Data) error {
	if rs.Created != nil {
		return fmt.Errorf("%w: second %s at event %d", history.ErrBadHistory, e.Kind, e.Seq)
	}
	seed, err := hex.DecodeString(d.Seed)
	if err != nil || len(seed) != 32 {
		return fmt.Errorf("%w: run seed %q", history.ErrBadHistory, d.Seed)
	}
	created := *d
	rs.Created, rs.Start = &created, e.Time
	rs.PinVersion, rs.PinHash = d.Version, d.ModuleHash
	copy(rs.Seed[:], seed)
	rs.Calls = []Call{{Seq: e.Seq, ID: rs.ID, Input: d.Input}}
	return nil
}

// applyRunResumed begins an activation: the settlements recorded before
// it are what the guest sees in it (visible).
func (rs *Run) applyRunResumed(e *store.Event) {
	rs.Markers = append(rs.Markers, Marker{Seq: e.Seq, Time: e.Time})
}

// applyStepStarted begins an attempt of a step: attempt 1 creates the
// step's op; a later one reopens the op, whose last attempt failed with a
// retry.
func (rs *Run) applyStepStarted(e *store.Event, d *history.Data) error {
	if o := rs.Op(d.Op); o != nil && d.Attempt > 1 {
		if o.Kind != abi.OpStep || o.Settled || o.AttemptOpen {
			return fmt.Errorf("%w: event %d starts attempt %d of op %d, which cannot retry", history.ErrBadHistory, e.Seq, d.Attempt, d.Op)
		}
		o.Attempt, o.AttemptOpen, o.RetryAt = d.Attempt, true, time.Time{}
		return nil
	}
	o, err := rs.newOp(e, d.Op, abi.OpStep, d.Name)
	if err != nil {
		return err
	}
	o.Input, o.Retry, o.Attempt, o.AttemptOpen = d.Input, d.Retry, 1, true
	return nil
}

// applyStepEnded ends the open attempt of a step (step_completed or
// step_failed): a completion fulfils the step's future, a failure with a
// retry time leaves it pending until the next attempt, any other failure
// rejects it.
func (rs *Run) applyStepEnded(e *store.Event, d *history.Data) error {
	o, err := rs.existingOp(e, d.Op, abi.OpStep)
	if err != nil {
		return err
	}
	if !o.AttemptOpen {
		return fmt.Errorf("%w: event %d ends an attempt of op %d that was not started", history.ErrBadHistory, e.Seq, d.Op)
	}
	o.AttemptOpen = false
	switch {
	case e.Kind == history.KindStepCompleted:
		o.settle(e.Seq, abi.FutureFulfilled, NullIfEmpty(d.Result), 0)
	case d.RetryAt != nil:
		o.RetryAt = *d.RetryAt
	default:
		o.settle(e.Seq, abi.FutureRejected, jsonutil.Must(ErrOrUnknown(d.Error)), 0)
	}
	return nil
}

// applyTimerSet creates a sleep op. A sleep whose time had come when it
// was made is settled by the guest's own op (Immediate), so the guest sees
// it at once rather than in the next activation.
func (rs *Run) applyTimerSet(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpSleep, "")
	if err != nil {
		return err
	}
	if d.FireAt != nil {
		o.FireAt = *d.FireAt
	}
	if d.Immediate {
		o.settle(e.Seq, abi.FutureFulfilled, []byte("null"), d.Op)
	}
	return nil
}

// applyTimerFired fulfils a sleep's future, once.
func (rs *Run) applyTimerFired(e *store.Event, d *history.Data) error {
	o, err := rs.existingOp(e, d.Op, abi.OpSleep)
	if err != nil {
		return err
	}
	if o.Settled {
		return fmt.Errorf("%w: timer of op %d fired twice", history.ErrBadHistory, d.Op)
	}
	o.settle(e.Seq, abi.FutureFulfilled, []byte("null"), 0)
	return nil
}

// applyAskOpened creates a question's op. One answered as it was asked
// (no one can answer, or the run is unwinding from an abort) is settled by
// the guest's own op; any other stays open and is counted in openAsks.
func (rs *Run) applyAskOpened(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpAsk, "")
	if err != nil {
		return err
	}
	o.AskID, o.Request = d.AskID, d.Request
	if d.Answer != nil {
		o.settle(e.Seq, abi.FutureFulfilled, history.EncodeAnswer(d.Answer), d.Op)
	} else {
		rs.OpenAsks++
	}
	return nil
}

// applyAskSettled fulfils an open question's future with its answer (an
// answer, or a withdrawal).
func (rs *Run) applyAskSettled(e *store.Event, d *history.Data) error {
	o, err := rs.existingOp(e, d.Op, abi.OpAsk)
	if err != nil {
		return err
	}
	if o.Settled || d.Answer == nil {
		return fmt.Errorf("%w: question of op %d settled twice or without an answer", history.ErrBadHistory, d.Op)
	}
	o.settle(e.Seq, abi.FutureFulfilled, history.EncodeAnswer(d.Answer), 0)
	rs.OpenAsks--
	return nil
}

// applyHookCreated creates a hook (or a webhook) and its op, answered at
// once with the token; a token another run held is recorded as the
// hook's conflict, and every wait on the hook then rejects.
func (rs *Run) applyHookCreated(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpHookCreate, "")
	if err != nil {
		return err
	}
	o.settle(e.Seq, abi.FutureFulfilled, jsonutil.Must(abi.HookCreated{Token: d.Token, Conflict: d.Conflict, URL: d.URL}), d.Op)
	rs.Hooks[d.Op] = &Hook{Token: d.Token, Conflict: d.Conflict, Webhook: d.Webhook, URL: d.URL}
	return nil
}

// applyHookNext creates a wait for a hook's next payload: the hook's
// index-th wait takes its index-th payload, already received or not yet.
// A wait on a hook in conflict or disposed rejects at once.
func (rs *Run) applyHookNext(e *store.Event, d *history.Data) error {
	h := rs.Hooks[d.Hook]
	if h == nil {
		return fmt.Errorf("%w: event %d waits on unknown hook %d", history.ErrBadHistory, e.Seq, d.Hook)
	}
	o, err := rs.newOp(e, d.Op, abi.OpHookNext, "")
	if err != nil {
		return err
	}
	o.Hook, o.Index = d.Hook, len(h.Nexts)
	h.Nexts = append(h.Nexts, d.Op)
	switch {
	case h.Conflict != "":
		o.settle(e.Seq, abi.FutureRejected, jsonutil.Must(abi.ErrorObject{Type: abi.ErrTypeHookConflict,
			Message: fmt.Sprintf("hook token %q is held by run %s", h.Token, h.Conflict)}), d.Op)
	case h.Disposed:
		// After a dispose every wait rejects, even if payloads that
		// arrived earlier were never taken.
		o.settle(e.Seq, abi.FutureRejected, HookDisposedErr(h), d.Op)
	case o.Index < len(h.Received):
		r := h.Received[o.Index]
		o.settle(r.Seq, abi.FutureFulfilled, r.payload, 0)
	}
	return nil
}

// applyHookReceived delivers a payload to a live hook: it fulfils the
// wait that takes it, if the guest has made that wait yet.
func (rs *Run) applyHookReceived(e *store.Event, d *history.Data) error {
	h := rs.Hooks[d.Hook]
	if h == nil || h.Disposed || h.Conflict != "" {
		return fmt.Errorf("%w: event %d delivers to hook %d, which cannot receive", history.ErrBadHistory, e.Seq, d.Hook)
	}
	h.Received = append(h.Received, HookPayload{Seq: e.Seq, payload: NullIfEmpty(d.Payload)})
	if i := len(h.Received) - 1; i < len(h.Nexts) {
		rs.Op(h.Nexts[i]).settle(e.Seq, abi.FutureFulfilled, NullIfEmpty(d.Payload), 0)
	}
	return nil
}

// applyHookDisposed disposes of a hook, by the guest's op or at the run's
// end (no op): its waits still pending reject.
func (rs *Run) applyHookDisposed(e *store.Event, d *history.Data) error {
	h := rs.Hooks[d.Hook]
	if h == nil {
		return fmt.Errorf("%w: event %d disposes unknown hook %d", history.ErrBadHistory, e.Seq, d.Hook)
	}
	if d.Op != 0 { // disposed by the guest, not when the run ended
		if _, err := rs.newOp(e, d.Op, abi.OpHookDispose, ""); err != nil {
			return err
		}
	}
	h.Disposed = true
	for _, p := range h.Nexts {
		if o := rs.Op(p); !o.Settled {
			o.settle(e.Seq, abi.FutureRejected, HookDisposedErr(h), d.Op)
		}
	}
	return nil
}

// applyProgress records a progress op; its value is the run's last
// progress, and the result of a run that completes with null.
func (rs *Run) applyProgress(e *store.Event, d *history.Data) error {
	if _, err := rs.newOp(e, d.Op, abi.OpProgress, ""); err != nil {
		return err
	}
	rs.LastProgress = d.Value
	return nil
}

// applyOutput counts recorded guest output: the bytes the workflow body
// has produced so far (a replay skips as many), and those the log holds
// (against the run's output cap). It may follow the run's end.
func (rs *Run) applyOutput(d *history.Data) {
	if d.Step == 0 {
		rs.OutProduced = d.Produced
	}
	rs.OutRecorded += int64(len(d.Data))
}

// applyRunEnded ends the run completed or failed (run_completed,
// run_failed), by the guest's complete op or (no op) by the host; the
// calls still waiting are answered by the end.
func (rs *Run) applyRunEnded(e *store.Event, d *history.Data) error {
	if d.Op != 0 {
		if _, err := rs.newOp(e, d.Op, abi.OpComplete, ""); err != nil {
			return err
		}
	}
	rs.endCalls(e.Seq)
	if e.Kind == history.KindRunCompleted {
		rs.Status, rs.Result = store.StatusCompleted, NullIfEmpty(d.Result)
	} else {
		rs.Status, rs.Failure, rs.EndResult = store.StatusFailed, ErrOrUnknown(d.Error), d.Result
	}
	return nil
}

// applyRunCancelled ends the run cancelled: by the host, or (with an op)
// by the body's own end after an abort, whose result is kept.
func (rs *Run) applyRunCancelled(e *store.Event, d *history.Data) error {
	if d.Op != 0 { // the body's own end, after an abort
		if _, err := rs.newOp(e, d.Op, abi.OpComplete, ""); err != nil {
			return err
		}
	}
	rs.endCalls(e.Seq)
	rs.Status, rs.Failure, rs.EndResult = store.StatusCancelled, d.Error, d.Result
	return nil
}

// applyWebhookResponded records the guest's answer to a request of a
// manual webhook; each request is answered at most once.
func (rs *Run) applyWebhookResponded(e *store.Event, d *history.Data) error {
	h := rs.Hooks[d.Hook]
	if h == nil || h.Webhook == nil || !h.Webhook.Manual || d.Index < 0 || d.Index >= len(h.Received) || h.Responses[d.Index] != nil || d.Response == nil {
		return fmt.Errorf("%w: event %d answers request %d of hook %d, which cannot be answered", history.ErrBadHistory, e.Seq, d.Index, d.Hook)
	}
	if _, err := rs.newOp(e, d.Op, abi.OpWebhookRespond, ""); err != nil {
		return err
	}
	if h.Responses == nil {
		h.Responses = map[int]*abi.HTTPResponse{}
	}
	h.Responses[d.Index] = d.Response
	return nil
}

// applyAgentSent creates an agent op. A message to a session runs as the
// session's turn when none is running, else waits (queued) for the next
// turn; a session stays with the agent it began with.
func (rs *Run) applyAgentSent(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpAgent, d.Name)
	if err != nil {
		return err
	}
	o.Input, o.Request = d.Input, d.Request
	if d.AgentRequest != nil {
		a := *d.AgentRequest
		o.Agent = &a
	}
	key := o.Session()
	if key == "" {
		return nil
	}
	if rs.Sessions == nil {
		rs.Sessions = map[string]*ChildSession{}
	}
	cs := rs.Sessions[key]
	switch {
	case cs == nil:
		rs.Sessions[key] = &ChildSession{Agent: d.Name, running: d.Op}
	case cs.Agent != d.Name:
		return fmt.Errorf("%w: event %d sends to session %q of agent %s as agent %s", history.ErrBadHistory, e.Seq, key, cs.Agent, d.Name)
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
func (rs *Run) applyAgentSettled(e *store.Event, d *history.Data) error {
	o, err := rs.existingOp(e, d.Op, abi.OpAgent)
	if err != nil {
		return err
	}
	if o.Settled || d.Agent == nil {
		return fmt.Errorf("%w: agent turn of op %d settled twice or without a result", history.ErrBadHistory, d.Op)
	}
	v := jsonutil.Must(d.Agent)
	o.settle(e.Seq, abi.FutureFulfilled, v, 0)
	if cs := rs.Sessions[o.Session()]; o.Session() != "" && cs != nil {
		if cs.running != d.Op {
			return fmt.Errorf("%w: event %d ends a turn of session %q that is not running", history.ErrBadHistory, e.Seq, o.Session())
		}
		rs.endTurn(cs, e.Seq, d.Op, v)
	}
	return nil
}

// endTurn ends the running turn of a session, which began with the
// message at p and ended with value v at event seq.
func (rs *Run) endTurn(cs *ChildSession, seq uint64, p uint32, v []byte) {
	// The messages that went with the turn end with it; those sent
	// meanwhile are the next turn.
	for _, j := range cs.Joined[p] {
		if q := rs.Op(j); !q.Settled {
			q.settle(seq, abi.FutureFulfilled, v, 0)
		}
	}
	cs.Turns = append(cs.Turns, p)
	cs.running = 0
	if len(cs.queued) > 0 {
		cs.running = cs.queued[0]
		if len(cs.queued) > 1 {
			if cs.Joined == nil {
				cs.Joined = map[uint32][]uint32{}
			}
			cs.Joined[cs.running] = append([]uint32(nil), cs.queued[1:]...)
		}
		cs.queued = nil
	}
}

// applyCallReceived adds a call to a serve run; the receive op that takes
// it, if the guest has made it, is fulfilled with it.
func (rs *Run) applyCallReceived(e *store.Event, d *history.Data) error {
	if d.Index != len(rs.Calls) {
		return fmt.Errorf("%w: event %d delivers call %d, expected call %d", history.ErrBadHistory, e.Seq, d.Index, len(rs.Calls))
	}
	if in := bytes.TrimLeft(d.Input, " \t\r\n"); d.CallID == "" || len(in) == 0 || in[0] != '{' {
		return fmt.Errorf("%w: event %d delivers call %d without an id or an object input", history.ErrBadHistory, e.Seq, d.Index)
	}
	rs.Calls = append(rs.Calls, Call{Seq: e.Seq, ID: d.CallID, Input: d.Input})
	if d.Index < len(rs.Receives) {
		rs.Op(rs.Receives[d.Index]).settle(e.Seq, abi.FutureFulfilled, rs.ServeCall(d.Index), 0)
	}
	return nil
}

// applyReceive creates a receive op: the run's i-th takes call i, settled
// by that call's event when it has arrived.
func (rs *Run) applyReceive(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpReceive, "")
	if err != nil {
		return err
	}
	o.Index = len(rs.Receives)
	rs.Receives = append(rs.Receives, d.Op)
	if o.Index < len(rs.Calls) {
		o.settle(rs.Calls[o.Index].Seq, abi.FutureFulfilled, rs.ServeCall(o.Index), 0)
	}
	return nil
}

// applyReplied answers, with the reply's output, the calls among the
// first d.Index that the guest could have received and that are still
// waiting; the reply op is settled at once with how many it answered.
func (rs *Run) applyReplied(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpReply, "")
	if err != nil {
		return err
	}
	if d.Index < 0 || d.Index > rs.Receivable() || d.Answered < 0 {
		return fmt.Errorf("%w: event %d replies to %d received calls, but %d could have been received", history.ErrBadHistory, e.Seq, d.Index, rs.Receivable())
	}
	n := 0
	for i := range d.Index {
		if c := &rs.Calls[i]; !c.Answered {
			c.Answered, c.Output, c.By = true, NullIfEmpty(d.Payload), e.Seq
			n++
		}
	}
	if n != d.Answered {
		return fmt.Errorf("%w: event %d answers %d calls, but %d were waiting", history.ErrBadHistory, e.Seq, d.Answered, n)
	}
	o.settle(e.Seq, abi.FutureFulfilled, jsonutil.Must(abi.ReplyResult{Answered: n}), d.Op)
	return nil
}

// applyAbortRequested records an abort: the guest's abort signals still
// pending fire with its reason, and a serve run's calls still waiting end
// cancelled.
func (rs *Run) applyAbortRequested(e *store.Event, d *history.Data) error {
	if d.Index != len(rs.Aborts) {
		return fmt.Errorf("%w: event %d is abort %d, expected abort %d", history.ErrBadHistory, e.Seq, d.Index, len(rs.Aborts))
	}
	rs.Aborts = append(rs.Aborts, Abort{Seq: e.Seq, Reason: d.Reason})
	v := jsonutil.Must(abi.AbortInfo{Reason: d.Reason})
	for _, o := range rs.Ops {
		if o != nil && o.Kind == abi.OpSignal && !o.Settled { // nil: left out of an image, settled
			o.settle(e.Seq, abi.FutureFulfilled, v, 0)
		}
	}
	// A serve run's calls still waiting end as cancelled.
	for i := range rs.Calls {
		if c := &rs.Calls[i]; !c.Answered {
			c.Answered, c.Cancelled, c.By = true, true, e.Seq
		}
	}
	return nil
}

// applySignal creates an abort signal's op; one made after an abort
// (Reason set) has fired already, by the guest's own op.
func (rs *Run) applySignal(e *store.Event, d *history.Data) error {
	o, err := rs.newOp(e, d.Op, abi.OpSignal, "")
	if err != nil {
		return err
	}
	if d.Reason != "" {
		o.settle(e.Seq, abi.FutureFulfilled, jsonutil.Must(abi.AbortInfo{Reason: d.Reason}), d.Op)
	}
	return nil
}

// applyOpRefused records a recorded op the host refused: it takes its
// position, and a replay answers it with the same refusal.
func (rs *Run) applyOpRefused(e *store.Event, d *history.Data) error {
	kind, ok := abi.OpKindByName(d.Kind)
	if !ok || !kind.Recorded() || d.Status < uint32(abi.StatusBadRequest) || d.Error == nil {
		return fmt.Errorf("%w: event %d refuses op kind %q with status %d", history.ErrBadHistory, e.Seq, d.Kind, d.Status)
	}
	o, err := rs.newOp(e, d.Op, kind, d.Name)
	if err != nil {
		return err
	}
	o.Refused, o.Value = abi.Status(d.Status), jsonutil.Must(d.Error)
	return nil
}

// applyRunUpgraded pins the run to another plugin version. The record
// carries the new pin; nothing else in the model changes.
func (rs *Run) applyRunUpgraded(d *history.Data) {
	rs.PinVersion, rs.PinHash = d.Version, d.ModuleHash
}
