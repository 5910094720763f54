package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// Answer answers a question: an option id, or text.
type Answer struct {
	OptionID string `json:"optionId,omitempty"`
	Text     string `json:"text,omitempty"`
}

// Question is an open or settled question.
type Question struct {
	ID        string         `json:"id"`
	RunID     string         `json:"runId"`
	Tool      string         `json:"tool"`
	Open      bool           `json:"open"`
	Request   abi.AskRequest `json:"request"`
	CreatedAt time.Time      `json:"createdAt"`
}

// Questions lists questions, oldest first; openOnly leaves out settled ones.
func (h *Host) Questions(ctx context.Context, openOnly bool) ([]Question, error) {
	asks, err := h.store.Asks(ctx, openOnly)
	if err != nil {
		return nil, err
	}
	out := make([]Question, 0, len(asks))
	for _, a := range asks {
		q := Question{ID: a.ID, RunID: a.RunID, Tool: a.Tool, Open: a.Open, CreatedAt: a.CreatedAt}
		if err := json.Unmarshal(a.Request, &q.Request); err != nil {
			return nil, fmt.Errorf("question %s: %w", a.ID, err)
		}
		out = append(out, q)
	}
	return out, nil
}

// Question returns one question, or ErrUnknownAsk.
func (h *Host) Question(ctx context.Context, id string) (Question, error) {
	a, err := h.store.Ask(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrAskNotFound) {
			return Question{}, fmt.Errorf("%w: %s", ErrUnknownAsk, id)
		}
		return Question{}, err
	}
	q := Question{ID: a.ID, RunID: a.RunID, Tool: a.Tool, Open: a.Open, CreatedAt: a.CreatedAt}
	if err := json.Unmarshal(a.Request, &q.Request); err != nil {
		return Question{}, fmt.Errorf("question %s: %w", a.ID, err)
	}
	return q, nil
}

// AnswerAsk answers an open question and continues its run until it ends
// or waits again.
//
// Errors, each leaving everything unchanged: ErrUnknownAsk; ErrAskClosed
// when the question was answered or withdrawn; ErrBadAnswer when the
// answer matches no option or is text the question does not allow.
func (h *Host) AnswerAsk(ctx context.Context, askID string, a Answer) (RunInfo, error) {
	return h.settleAsk(ctx, askID, func(req abi.AskRequest, l Limits) (abi.AskAnswer, error) {
		return checkAnswer(req, a, l.PayloadBytes)
	})
}

// settleAsk settles an open question with the answer decide gives, then
// continues the run.
func (h *Host) settleAsk(ctx context.Context, askID string, decide func(abi.AskRequest, Limits) (abi.AskAnswer, error)) (RunInfo, error) {
	ask, err := h.openAsk(ctx, askID)
	if err != nil {
		return RunInfo{}, err
	}
	settled := false
	info, err := h.withRun(ctx, ask.RunID, func(rh *runHandle) error {
		b, err := h.settleBatch(ctx, rh, ask, decide)
		if err != nil {
			return err
		}
		// The answer is stored with the activation it wakes, in one
		// commit; whatever ends the drive first, it is stored before the
		// run is let go, or the call fails and nothing is.
		if err := h.carryForward(ctx, rh, b); err != nil {
			return err
		}
		err = h.drive(ctx, rh)
		if cerr := h.settleCarry(ctx, rh); cerr != nil {
			return errors.Join(err, cerr)
		}
		settled = true
		return err
	})
	if err != nil && !settled {
		return RunInfo{}, err
	}
	return info, err
}

// WithdrawAsk withdraws an open question: its ask resolves as
// "cancelled", and the run continues until it ends or waits again.
// Errors: ErrUnknownAsk; ErrAskClosed when it was already answered or
// withdrawn.
func (h *Host) WithdrawAsk(ctx context.Context, askID string) (RunInfo, error) {
	return h.settleAsk(ctx, askID, func(abi.AskRequest, Limits) (abi.AskAnswer, error) {
		return abi.AskAnswer{Status: abi.AnswerCancelled}, nil
	})
}

// AskUnavailable settles an open question as "unavailable": whoever was
// asked cannot answer (an MCP client that cancelled the form), and the
// run continues until it ends or waits again. Errors: ErrUnknownAsk;
// ErrAskClosed when it was already answered or withdrawn.
func (h *Host) AskUnavailable(ctx context.Context, askID string) (RunInfo, error) {
	return h.settleAsk(ctx, askID, func(abi.AskRequest, Limits) (abi.AskAnswer, error) {
		return abi.AskAnswer{Status: abi.AnswerUnavailable}, nil
	})
}

func checkAnswer(req abi.AskRequest, a Answer, maxText int) (abi.AskAnswer, error) {
	switch {
	case a.OptionID != "" && a.Text != "":
		return abi.AskAnswer{}, fmt.Errorf("%w: give an option id or text, not both", ErrBadAnswer)
	case a.OptionID != "":
		for _, o := range req.Options {
			if o.ID == a.OptionID {
				return abi.AskAnswer{Status: abi.AnswerAnswered, OptionID: a.OptionID}, nil
			}
		}
		ids := make([]string, len(req.Options))
		for i, o := range req.Options {
			ids[i] = o.ID
		}
		return abi.AskAnswer{}, fmt.Errorf("%w: %q is not one of the options %q", ErrBadAnswer, a.OptionID, ids)
	case a.Text != "":
		if !req.AllowFreeform && req.Display != abi.DisplayText {
			return abi.AskAnswer{}, fmt.Errorf("%w: the question takes one of its options, not text", ErrBadAnswer)
		}
		if len(a.Text) > maxText {
			return abi.AskAnswer{}, &LimitError{Limit: "payload", Max: int64(maxText), What: "answer text"}
		}
		return abi.AskAnswer{Status: abi.AnswerAnswered, Text: a.Text}, nil
	}
	return abi.AskAnswer{}, fmt.Errorf("%w: give an option id or text", ErrBadAnswer)
}

// ResumeHook delivers a JSON payload to the hook holding token (a program's
// resumeHook) and continues its run until it ends or waits again.
//
// Errors, each leaving everything unchanged: ErrUnknownHook when no live
// run holds the token; ErrBadInput when the payload is not JSON; a
// *LimitError when it is too large.
func (h *Host) ResumeHook(ctx context.Context, token string, payload json.RawMessage) (RunInfo, error) {
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if !json.Valid(payload) {
		return RunInfo{}, fmt.Errorf("%w: hook payload is not JSON", ErrBadInput)
	}
	delivered := false
	info, err := h.deliver(ctx, token, false, func(rh *runHandle, hr *state.Hook) (json.RawMessage, error) {
		return payload, nil
	}, func(rh *runHandle, _ uint32, _ int) error {
		delivered = true
		return h.drive(ctx, rh)
	})
	if err != nil && !delivered {
		return RunInfo{}, err
	}
	return info, err
}

// DeliverHook records a payload to the hook holding token, like
// ResumeHook, but does not run the run: the caller does (Drive). Errors are
// ResumeHook's.
func (h *Host) DeliverHook(ctx context.Context, token string, payload json.RawMessage) (RunInfo, error) {
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if !json.Valid(payload) {
		return RunInfo{}, fmt.Errorf("%w: hook payload is not JSON", ErrBadInput)
	}
	return h.deliver(ctx, token, false, func(*runHandle, *state.Hook) (json.RawMessage, error) {
		return payload, nil
	}, func(*runHandle, uint32, int) error { return nil })
}

// WebhookDelivery is a request a webhook took: its run, hook and request
// index, and the response to give it at once (nil when the run answers it
// itself: a manual webhook).
type WebhookDelivery struct {
	RunID    string
	Hook     uint32
	Index    int
	Response *abi.HTTPResponse
}

// DeliverWebhook records a request to the webhook holding token. It does
// not run the run: the caller does (Drive), after answering the request
// with the delivery's response, or, for a manual webhook, while it waits
// for the run's answer (WebhookResponse).
//
// Errors, each leaving everything unchanged: ErrUnknownHook when no live
// webhook has the token; a *LimitError when the request is too large or the
// run's log is full.
func (h *Host) DeliverWebhook(ctx context.Context, token string, req abi.WebhookRequest) (WebhookDelivery, error) {
	var d WebhookDelivery
	_, err := h.deliver(ctx, token, true, func(rh *runHandle, hr *state.Hook) (json.RawMessage, error) {
		req.Index = len(hr.Received)
		return json.Marshal(req)
	}, func(rh *runHandle, hook uint32, index int) error {
		d = WebhookDelivery{RunID: rh.id, Hook: hook, Index: index}
		if hr := rh.rs.Hooks[hook]; !hr.Webhook.Manual {
			d.Response = hr.Webhook.RespondWith
			if d.Response == nil {
				d.Response = &abi.HTTPResponse{Status: 202}
			}
		}
		return nil
	})
	return d, err
}

// WebhookResponse returns how a run answered a request to its manual
// webhook, or nil while it has not.
func (h *Host) WebhookResponse(ctx context.Context, runID string, hook uint32, index int) (*abi.HTTPResponse, error) {
	var resp *abi.HTTPResponse
	_, err := h.withRun(ctx, runID, func(rh *runHandle) error {
		if hr := rh.rs.Hooks[hook]; hr != nil {
			resp = hr.Responses[index]
		}
		return nil
	})
	return resp, err
}

// deliver records a payload to the hook holding token, made by payload
// under the run's lock, then calls after with the run still locked.
func (h *Host) deliver(ctx context.Context, token string, webhook bool,
	payload func(*runHandle, *state.Hook) (json.RawMessage, error), after func(*runHandle, uint32, int) error) (RunInfo, error) {
	hk, err := h.store.Hook(ctx, token)
	if err != nil {
		if errors.Is(err, store.ErrHookNotFound) {
			return RunInfo{}, fmt.Errorf("%w: %q", ErrUnknownHook, token)
		}
		return RunInfo{}, err
	}
	return h.withRun(ctx, hk.RunID, func(rh *runHandle) error {
		rs := rh.rs
		hr := rs.Hooks[hk.HookID]
		if rs.Status.Terminal() || hr == nil || hr.Token != token || hr.Disposed || hr.Conflict != "" || (hr.Webhook != nil) != webhook {
			return fmt.Errorf("%w: %q", ErrUnknownHook, token)
		}
		p, err := payload(rh, hr)
		if err != nil {
			return err
		}
		l := h.limitsOf(ctx, rs)
		if len(p) > l.PayloadBytes {
			return &LimitError{Limit: "payload", Max: int64(l.PayloadBytes), What: "hook payload"}
		}
		if rs.LastSeq >= uint64(l.Events) {
			return &LimitError{Limit: "events", Max: int64(l.Events), What: "run " + rs.ID}
		}
		index := len(hr.Received)
		b := newBatch(rs)
		if _, err := b.push(EvHookReceived, &history.Data{Hook: hk.HookID, Index: index, Payload: clone(p)}); err != nil {
			return err
		}
		if err := h.commit(ctx, rh, b, nil); err != nil {
			return err
		}
		return after(rh, hk.HookID, index)
	})
}

// limitsOf returns the limits of the run's plugin version, or the host's
// when it cannot be loaded.
func (h *Host) limitsOf(ctx context.Context, rs *state.Run) Limits {
	if lp, err := h.plugin(ctx, rs.Rec.Plugin, rs.Rec.Version); err == nil {
		return lp.limits
	}
	return h.limits
}
