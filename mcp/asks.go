package mcp

import (
	"context"
	"errors"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
)

// A question as a form: its options as a single-select enum whose
// entries carry their labels ("answer"), its freeform text as a string
// ("text"). A question with options and no text requires an option; one
// without options requires text.
func elicitParams(q host.Question) *sdk.ElicitParams {
	r := q.Request
	props := map[string]any{}
	var required []string
	if len(r.Options) > 0 {
		oneOf := make([]any, len(r.Options))
		for i, o := range r.Options {
			e := map[string]any{"const": o.ID, "title": o.Label}
			oneOf[i] = e
		}
		props["answer"] = map[string]any{"type": "string", "title": "Answer", "oneOf": oneOf}
		if !r.AllowFreeform && r.Display != abi.DisplayText {
			required = append(required, "answer")
		}
	}
	if len(r.Options) == 0 || r.AllowFreeform || r.Display == abi.DisplayText {
		props["text"] = map[string]any{"type": "string", "title": "Answer in your own words"}
		if len(r.Options) == 0 {
			required = append(required, "text")
		}
	}
	schema := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		schema["required"] = required
	}
	msg := r.Prompt
	if r.Title != "" {
		msg = r.Title + "\n\n" + msg
	}
	return &sdk.ElicitParams{Mode: "form", Message: msg, RequestedSchema: schema,
		Meta: sdk.Meta{relatedTask: map[string]any{"taskId": q.RunID}}}
}

// inputRequired is a call's answer while its run asks (2026-07-28): the
// questions as input requests keyed by their ids; the request state is
// the run's id, which the retried call sends back.
func inputRequired(runID string, asks []host.Question) *sdk.CallToolResult {
	reqs := sdk.InputRequestMap{}
	for _, q := range asks {
		reqs[q.ID] = elicitParams(q)
	}
	return &sdk.CallToolResult{InputRequests: reqs, RequestState: runID}
}

// settleAsk delivers a form's outcome to the run: accept as answered
// (the option, or the text), decline as cancelled, cancel as
// unavailable. The run goes on on the server's context.
func (s *Server) settleAsk(ctx context.Context, q host.Question, er *sdk.ElicitResult) (host.RunInfo, error) {
	var settle func(context.Context) (host.RunInfo, error)
	switch er.Action {
	case "accept":
		var a host.Answer
		if t, _ := er.Content["text"].(string); t != "" {
			a.Text = t
		} else if o, _ := er.Content["answer"].(string); o != "" {
			a.OptionID = o
		}
		settle = func(ctx context.Context) (host.RunInfo, error) { return s.h.AnswerAsk(ctx, q.ID, a) }
	case "decline":
		settle = func(ctx context.Context) (host.RunInfo, error) { return s.h.WithdrawAsk(ctx, q.ID) }
	default:
		settle = func(ctx context.Context) (host.RunInfo, error) { return s.h.AskUnavailable(ctx, q.ID) }
	}
	ri, err := s.detached(ctx, settle)
	switch {
	case errors.Is(err, host.ErrAskClosed):
		return s.h.Run(ctx, q.RunID) // answered meanwhile, in the console, say
	case errors.Is(err, host.ErrBadAnswer), errors.Is(err, host.ErrLimit):
		return host.RunInfo{}, invalidParams("question %s: %v", q.ID, err)
	}
	return ri, err
}
