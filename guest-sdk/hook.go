package sandflow

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/sandflow/sandflow/abi"
)

// HookOptions configures CreateHook.
type HookOptions struct {
	// Token is the token that resumes the hook; empty means a random one.
	// Give a fixed token when something outside must find the hook later.
	Token string
	// Metadata is stored with the hook.
	Metadata any
}

// Hook receives payloads sent to its token (the host's resumeHook), in
// order. It is disposed when the run ends.
type Hook[T any] struct {
	id       uint32
	token    string
	conflict string
}

// CreateHook registers a hook for payloads of type T.
func CreateHook[T any](ctx *Context, opts HookOptions) (*Hook[T], error) {
	req := abi.HookRequest{Token: opts.Token}
	if opts.Metadata != nil {
		b, err := json.Marshal(opts.Metadata)
		if err != nil {
			return nil, err
		}
		req.Metadata = b
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	r := doOp(abi.OpHookCreate, "", b)
	if r.status != abi.StatusOK {
		return nil, decodeError(r.payload)
	}
	var hc abi.HookCreated
	if err := json.Unmarshal(r.payload, &hc); err != nil {
		return nil, fmt.Errorf("sandflow: bad hook_create answer: %w", err)
	}
	return &Hook[T]{id: r.future, token: hc.Token, conflict: hc.Conflict}, nil
}

// Token returns the token that resumes the hook.
func (h *Hook[T]) Token() string { return h.token }

// Conflict returns the id of the run that already held the token when the
// hook was created, or "". A conflicted hook receives nothing: Next
// rejects with a HookConflictError.
func (h *Hook[T]) Conflict() string { return h.conflict }

// Next returns a future for the hook's next payload.
func (h *Hook[T]) Next(ctx *Context) *Future[T] {
	return newFuture[T](doOp(abi.OpHookNext, "", []byte(fmt.Sprintf(`{"hook":%d}`, h.id))))
}

// Dispose releases the token so another run can use it.
func (h *Hook[T]) Dispose(ctx *Context) error {
	r := doOp(abi.OpHookDispose, "", []byte(fmt.Sprintf(`{"hook":%d}`, h.id)))
	if r.status != abi.StatusOK {
		return decodeError(r.payload)
	}
	return nil
}

// WebhookOptions configures CreateWebhook.
type WebhookOptions struct {
	// RespondWith is the response every request gets at once; nil means
	// 202 Accepted with no body. Ignored when Manual is set.
	RespondWith *Response
	// Manual: the body answers each request with Request.Respond.
	Manual bool
}

// Response is an HTTP response a webhook gives.
type Response = abi.HTTPResponse

// Request is a request a webhook received.
type Request struct {
	abi.WebhookRequest
	hook uint32
}

// Bytes returns the request body, decoded when it came base64-encoded.
func (r Request) Bytes() []byte {
	if r.BodyEncoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(r.Body)
		if err == nil {
			return b
		}
	}
	return []byte(r.Body)
}

// JSON decodes the request body as JSON into v.
func (r Request) JSON(v any) error { return json.Unmarshal(r.Bytes(), v) }

// Respond answers a request to a manual webhook. Each request is
// answered once.
func (r Request) Respond(ctx *Context, resp Response) error {
	b, err := json.Marshal(abi.WebhookResponse{Hook: r.hook, Request: r.Index, HTTPResponse: resp})
	if err != nil {
		return err
	}
	if res := doOp(abi.OpWebhookRespond, "", b); res.status != abi.StatusOK {
		return decodeError(res.payload)
	}
	return nil
}

// Webhook receives HTTP requests at a URL the host serves (JavaScript's
// createWebhook): hand out URL, and await Next for each request.
type Webhook struct {
	id  uint32
	url string
}

// CreateWebhook creates a webhook with a random, unguessable URL.
func CreateWebhook(ctx *Context, opts WebhookOptions) (*Webhook, error) {
	spec := &abi.WebhookSpec{Manual: opts.Manual}
	if !opts.Manual {
		spec.RespondWith = opts.RespondWith
	}
	b, err := json.Marshal(abi.HookRequest{Webhook: spec})
	if err != nil {
		return nil, err
	}
	r := doOp(abi.OpHookCreate, "", b)
	if r.status != abi.StatusOK {
		return nil, decodeError(r.payload)
	}
	var hc abi.HookCreated
	if err := json.Unmarshal(r.payload, &hc); err != nil {
		return nil, fmt.Errorf("sandflow: bad hook_create answer: %w", err)
	}
	return &Webhook{id: r.future, url: hc.URL}, nil
}

// URL is where the webhook receives requests: the host's base URL (when
// it has one) and the path /.well-known/workflow/v1/webhook/<token>.
func (w *Webhook) URL() string { return w.url }

// Next returns a future for the webhook's next request.
func (w *Webhook) Next(ctx *Context) *Future[Request] {
	f := newFuture[Request](doOp(abi.OpHookNext, "", []byte(fmt.Sprintf(`{"hook":%d}`, w.id))))
	f.val.hook = w.id
	return f
}

// Dispose stops the webhook: its URL answers 404 from then on.
func (w *Webhook) Dispose(ctx *Context) error {
	r := doOp(abi.OpHookDispose, "", []byte(fmt.Sprintf(`{"hook":%d}`, w.id)))
	if r.status != abi.StatusOK {
		return decodeError(r.payload)
	}
	return nil
}
