package host

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/internal/schema"
	"github.com/sandflow/sandflow/store"
)

// The functions here perform one kind of live op each, for perform: they
// check the op's payload against the run's state and push the op's event
// (and what goes with it: a timer, a question, a hook claim) to the
// activation's batch. Each returns what perform does: the event pushed, or
// a refusal (a status and a message, no event), or a host-side error.

// refusal is a perform function's answer refusing the op.
func refusal(st abi.Status, msg string) (store.Event, abi.Status, string, error) {
	return store.Event{}, st, msg, nil
}

// badRequest refuses an op with StatusBadRequest.
func badRequest(msg string) (store.Event, abi.Status, string, error) {
	return refusal(abi.StatusBadRequest, msg)
}

// pushed is a perform function's answer once it has pushed ev (err: the
// push, or what followed it, failed).
func pushed(ev store.Event, err error) (store.Event, abi.Status, string, error) {
	return ev, abi.StatusOK, "", err
}

// performStep starts a step's first attempt; the driver runs it after the
// activation's commit.
func (w *wfInstance) performStep(name string, payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	var req abi.StepRequest
	if m := decodeStrict(payload, &req); m != "" {
		return badRequest(m)
	}
	if m := checkRetry(req.Retry); m != "" {
		return badRequest(m)
	}
	return pushed(w.batch.push(EvStepStarted, &history.Data{Op: p, Name: name, Input: clone(state.NullIfEmpty(req.Input)), Attempt: 1, Retry: req.Retry}))
}

// performSleep sets a timer, for a duration or until a time. One whose
// time has come already is recorded as immediate, with no timer stored.
func (w *wfInstance) performSleep(payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	var req abi.SleepRequest
	if m := decodeStrict(payload, &req); m != "" {
		return badRequest(m)
	}
	now := w.clock.time()
	var at time.Time
	switch {
	case (req.Ms == nil) == (req.Until == nil):
		return badRequest("give exactly one of ms and until")
	case req.Ms != nil && (*req.Ms < 0 || *req.Ms > maxSleepMs):
		return badRequest(fmt.Sprintf("ms must be 0-%d", int64(maxSleepMs)))
	case req.Ms != nil:
		at = now.Add(time.Duration(*req.Ms) * time.Millisecond)
	case *req.Until < 0 || *req.Until > maxUntilMs:
		return badRequest(fmt.Sprintf("until must be 0-%d (unix milliseconds, up to the year 2200)", int64(maxUntilMs)))
	default:
		at = time.UnixMilli(*req.Until).UTC()
	}
	b := w.batch
	d := &history.Data{Op: p, FireAt: &at, Immediate: !at.After(now)}
	ev, err := b.push(EvTimerSet, d)
	if err == nil && !d.Immediate {
		b.b.PutTimers = append(b.b.PutTimers, sleepTimer(w.rs.ID, p, at))
		w.h.wakeScheduler()
	}
	return pushed(ev, err)
}

// performAsk opens a question, stored for whoever answers it. A run that
// cannot ask (NoAsk), or that is unwinding from an abort, gets its answer
// at once.
func (w *wfInstance) performAsk(payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	rs, b := w.rs, w.batch
	req, m := parseAsk(payload)
	if m != "" {
		return badRequest(m)
	}
	d := &history.Data{Op: p, Request: history.EncodeAskRequest(req)}
	if _, aborted := rs.AbortedNow(); aborted {
		// Asked while unwinding from an abort: withdrawn at once.
		d.Answer = &abi.AskAnswer{Status: abi.AnswerCancelled}
	} else if rs.Created.NoAsk {
		d.Answer = &abi.AskAnswer{Status: abi.AnswerUnavailable}
	} else {
		d.AskID = newTimedID("ask_", 8)
	}
	ev, err := b.push(EvAskOpened, d)
	if err == nil && d.AskID != "" {
		b.b.PutAsks = append(b.b.PutAsks, store.Ask{ID: d.AskID, RunID: rs.ID, Tool: rs.Rec.Tool, Position: p, Open: true, Request: d.Request, CreatedAt: ev.Time})
	}
	return pushed(ev, err)
}

// performHookCreate creates a hook on a token (the guest's, or a random
// one) or a webhook (always a random token, the URL's only secret). A
// token another run holds is recorded as the hook's conflict; a free one
// is claimed with the activation's commit.
func (w *wfInstance) performHookCreate(ctx context.Context, payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	var req abi.HookRequest
	if m := decodeStrict(payload, &req); m != "" {
		return badRequest(m)
	}
	if len(req.Metadata) > 0 && !json.Valid(req.Metadata) {
		return badRequest("metadata is not JSON")
	}
	tok, url := req.Token, ""
	switch {
	case req.Webhook != nil:
		if tok != "" {
			return badRequest("a webhook's token is random: give none")
		}
		if m := checkWebhook(req.Webhook); m != "" {
			return badRequest(m)
		}
		tok = newID("whk_", 16) // 128 bits: the token is the URL's only secret
		url = w.rs.Created.BaseURL + abi.WebhookPath(tok)
	case tok == "":
		tok = newID("hook_", 16) // 128 bits
	default:
		if m := checkToken(tok); m != "" {
			return badRequest(m)
		}
	}
	holder, err := w.hookHolder(ctx, tok)
	if err != nil {
		return store.Event{}, 0, "", err
	}
	b := w.batch
	ev, err := b.push(EvHookCreated, &history.Data{Op: p, Token: tok, Metadata: clone(req.Metadata), Conflict: holder, Webhook: req.Webhook, URL: url})
	if err == nil && holder == "" {
		b.claimHook(tok, p)
	}
	return pushed(ev, err)
}

// performHookRef waits for a hook's next payload (OpHookNext) or disposes
// of the hook (OpHookDispose), which releases its token unless it was
// disposed already or never held it.
func (w *wfInstance) performHookRef(kind abi.OpKind, payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	var ref abi.HookRef
	if m := decodeStrict(payload, &ref); m != "" {
		return badRequest(m)
	}
	h := w.rs.Hooks[ref.Hook]
	if h == nil || ref.Hook > w.cursor {
		return refusal(abi.StatusNotFound, fmt.Sprintf("no hook %d", ref.Hook))
	}
	b := w.batch
	if kind == abi.OpHookNext {
		return pushed(b.push(EvHookNext, &history.Data{Op: p, Hook: ref.Hook}))
	}
	wasDisposed := h.Disposed
	ev, err := b.push(EvHookDisposed, &history.Data{Op: p, Hook: ref.Hook})
	// A second dispose must not release the token: another hook of
	// this run may hold it by now.
	if err == nil && h.Conflict == "" && !wasDisposed {
		b.releaseHook(h.Token)
	}
	return pushed(ev, err)
}

// performWebhookRespond answers a request a manual webhook received, once.
func (w *wfInstance) performWebhookRespond(payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	var req abi.WebhookResponse
	if m := decodeStrict(payload, &req); m != "" {
		return badRequest(m)
	}
	h := w.rs.Hooks[req.Hook]
	switch {
	case h == nil || req.Hook > w.cursor:
		return refusal(abi.StatusNotFound, fmt.Sprintf("no hook %d", req.Hook))
	case h.Webhook == nil || !h.Webhook.Manual:
		return badRequest(fmt.Sprintf("hook %d is not a manual webhook", req.Hook))
	case req.Request < 0 || req.Request >= len(h.Received):
		return refusal(abi.StatusNotFound, fmt.Sprintf("webhook %d has no request %d", req.Hook, req.Request))
	case h.Responses[req.Request] != nil:
		return badRequest(fmt.Sprintf("request %d of webhook %d is already answered", req.Request, req.Hook))
	}
	if m := checkResponse(&req.HTTPResponse); m != "" {
		return badRequest(m)
	}
	resp := req.HTTPResponse
	return pushed(w.batch.push(EvWebhookResponded, &history.Data{Op: p, Hook: req.Hook, Index: req.Request, Response: &resp}))
}

// performAgent sends a message to an agent, in a session or not; the
// driver runs the turn after the activation's commit. One sent with
// CancelOnAbort after an abort fired is cancelled at once.
func (w *wfInstance) performAgent(name string, payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	rs, b := w.rs, w.batch
	var req abi.AgentRequest
	if m := decodeStrict(payload, &req); m != "" {
		return badRequest(m)
	}
	if len(req.OutputSchema) > 0 {
		if _, err := schema.Compile(req.OutputSchema); err != nil {
			return badRequest("outputSchema: " + err.Error())
		}
	}
	if m := checkAgentRequest(&req); m != "" {
		return badRequest(m)
	}
	if cs := rs.Sessions[req.Session]; req.Session != "" && cs != nil && cs.Agent != name {
		return badRequest(fmt.Sprintf("session %q is with agent %s, not %s", req.Session, cs.Agent, name))
	}
	d := &history.Data{Op: p, Name: name, Input: mustJSON(req.Message), Request: clone(req.OutputSchema)}
	if req.Session != "" || len(req.Parts) > 0 || req.Model != nil || req.CancelOnAbort {
		extra := req
		extra.Message, extra.OutputSchema = "", nil
		d.AgentRequest = &extra
	}
	ev, err := b.push(EvAgentSent, d)
	if _, aborted := rs.AbortedNow(); err == nil && aborted && req.CancelOnAbort {
		// Sent with an abort signal that has fired: never sent.
		err = cancelAgentTurns(rs, b, ev.Time)
	}
	return pushed(ev, err)
}

// performProgress records a progress value, any JSON.
func (w *wfInstance) performProgress(payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	if !json.Valid(payload) {
		return badRequest("payload is not JSON")
	}
	return pushed(w.batch.push(EvProgress, &history.Data{Op: p, Value: clone(payload)}))
}

// performReceive makes a serve run's future for its next call.
func (w *wfInstance) performReceive(payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	if len(payload) > 0 {
		return badRequest("receive takes no payload")
	}
	return pushed(w.batch.push(EvReceive, &history.Data{Op: p}))
}

// performSignal makes the guest's abort signal: a future that settles
// when the run is aborted.
func (w *wfInstance) performSignal(payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	if len(payload) > 0 {
		return badRequest("signal takes no payload")
	}
	// A signal made while the run unwinds from an abort has fired.
	reason, _ := w.rs.AbortedNow()
	return pushed(w.batch.push(EvSignal, &history.Data{Op: p, Reason: reason}))
}

// performReply answers a serve run's calls received so far that are still
// waiting, and withdraws the questions open while they waited.
func (w *wfInstance) performReply(payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	rs, b := w.rs, w.batch
	var req abi.ReplyRequest
	if m := decodeStrict(payload, &req); m != "" {
		return badRequest(m)
	}
	if !json.Valid(req.Output) {
		return badRequest("output is required: any JSON value")
	}
	if req.Received < 0 || req.Received > rs.Receivable() {
		return badRequest(fmt.Sprintf("received is %d, but the run's receive futures have taken %d calls", req.Received, rs.Receivable()))
	}
	n := 0
	for i := range req.Received {
		if !rs.Calls[i].Answered {
			n++
		}
	}
	ev, err := b.push(EvReplied, &history.Data{Op: p, Payload: clone(req.Output), Answered: n, Index: req.Received})
	if err == nil && n > 0 {
		// The reply withdraws the questions asked about the calls it
		// answers: every question still open, as each was asked
		// while calls it now answers were waiting.
		err = withdrawOpenAsks(rs, b, ev.Time)
	}
	return pushed(ev, err)
}

// performComplete ends the run with the body's outcome: completed with
// its result (or its last progress, for a null result), failed with its
// error or for a result its tool's outputSchema rejects, or cancelled
// when the body finished unwinding after an abort. What the run still
// has open (hooks, questions, steps) is closed first (finish).
func (w *wfInstance) performComplete(payload []byte, p uint32) (store.Event, abi.Status, string, error) {
	rs, b := w.rs, w.batch
	var out abi.Outcome
	if m := history.DecodeOutcome(payload, &out); m != "" {
		return badRequest(m)
	}
	if out.Error != nil && out.Error.Type == "" {
		return badRequest("error.type is required")
	}
	if out.Error != nil && len(out.Result) > 0 {
		return badRequest("give a result or an error, not both")
	}
	if len(out.Result) > w.limits.PayloadBytes {
		return refusal(abi.StatusTooLarge, fmt.Sprintf("result of %d bytes is over the limit of %d", len(out.Result), w.limits.PayloadBytes))
	}
	now := time.Now()
	reason, unwound := rs.Unwound()
	cause := abi.InterruptRunEnded
	if unwound {
		cause = abi.InterruptCancelled
	}
	if err := b.finish(now, cause); err != nil {
		return store.Event{}, 0, "", err
	}
	if unwound {
		// The body finished unwinding after an abort: the run ends
		// cancelled, keeping what the body ended with.
		return pushed(b.pushAt(EvRunCancelled, now, &history.Data{Op: p, Reason: reason, Result: clone(out.Result), Error: out.Error}))
	}
	if out.Error != nil {
		return pushed(b.pushAt(EvRunFailed, now, &history.Data{Op: p, Error: out.Error}))
	}
	res := state.NullIfEmpty(out.Result)
	if string(res) == "null" && rs.LastProgress != nil {
		res = rs.LastProgress
	}
	if problems := w.outputProblems(res); problems != "" {
		// The tool promises its callers results of this shape (an
		// MCP client may check them): a result without it fails
		// the run, keeping the result for whoever looks into it.
		return pushed(b.pushAt(EvRunFailed, now, &history.Data{Op: p, Result: clone(res),
			Error: &abi.ErrorObject{Type: abi.ErrTypeOutputSchema, Message: "the result does not match the tool's outputSchema: " + problems}}))
	}
	return pushed(b.pushAt(EvRunCompleted, now, &history.Data{Op: p, Result: clone(res)}))
}
