package abi

import "encoding/json"

// The JSON payloads of ops, shared by the host and the Go guest SDK. Field
// names are the wire names; README.md gives the same shapes for other
// languages.

// StepRequest is the payload of OpStep.
type StepRequest struct {
	Input json.RawMessage `json:"input"`
	Retry *RetryPolicy    `json:"retry,omitempty"`
}

// RetryPolicy overrides the host's default step retry policy. Zero fields
// keep the default.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt; 1 disables retries.
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// InitialBackoffMs is the delay before the second attempt.
	InitialBackoffMs int64 `json:"initialBackoffMs,omitempty"`
	// MaxBackoffMs caps the delay.
	MaxBackoffMs int64 `json:"maxBackoffMs,omitempty"`
	// BackoffFactor multiplies the delay after each failed attempt.
	BackoffFactor float64 `json:"backoffFactor,omitempty"`
}

// SleepRequest is the payload of OpSleep: exactly one of Ms or Until.
type SleepRequest struct {
	Ms    *int64 `json:"ms,omitempty"`
	Until *int64 `json:"until,omitempty"` // unix milliseconds
}

// Ask displays.
const (
	DisplayConfirmation = "confirmation"
	DisplaySelect       = "select"
	DisplayText         = "text"
)

// Ask option styles.
const (
	StylePrimary = "primary"
	StyleDanger  = "danger"
	StyleDefault = "default"
)

// AskRequest is the payload of OpAsk.
type AskRequest struct {
	Prompt        string      `json:"prompt"`
	Title         string      `json:"title,omitempty"`
	Display       string      `json:"display,omitempty"`
	Options       []AskOption `json:"options,omitempty"`
	AllowFreeform bool        `json:"allowFreeform,omitempty"`
}

// AskOption is one choice offered with a question.
type AskOption struct {
	ID          string `json:"id"`
	Label       string `json:"label"`
	Description string `json:"description,omitempty"`
	Style       string `json:"style,omitempty"`
}

// Ask answer statuses.
const (
	AnswerAnswered    = "answered"
	AnswerCancelled   = "cancelled"
	AnswerUnavailable = "unavailable"
)

// AskAnswer is the value an OpAsk future fulfils with.
type AskAnswer struct {
	Status   string `json:"status"`
	OptionID string `json:"optionId,omitempty"`
	Text     string `json:"text,omitempty"`
}

// HookRequest is the payload of OpHookCreate. With Webhook set the hook is
// a webhook: its token is random, it is reached over HTTP at its URL, and
// each payload is a WebhookRequest.
type HookRequest struct {
	Token    string          `json:"token,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Webhook  *WebhookSpec    `json:"webhook,omitempty"`
}

// WebhookSpec says how a webhook answers the requests it receives: with
// RespondWith (202 Accepted with no body when it is nil), or, when Manual
// is set, with what the run gives OpWebhookRespond.
type WebhookSpec struct {
	RespondWith *HTTPResponse `json:"respondWith,omitempty"`
	Manual      bool          `json:"manual,omitempty"`
}

// HTTPResponse is a response a webhook gives. BodyEncoding "base64" says
// Body is base64 (for a body that is not UTF-8 text).
type HTTPResponse struct {
	Status       int               `json:"status"`
	Headers      map[string]string `json:"headers,omitempty"`
	Body         string            `json:"body,omitempty"`
	BodyEncoding string            `json:"bodyEncoding,omitempty"`
}

// WebhookRequest is the payload a webhook's hook_next fulfils with.
type WebhookRequest struct {
	// Index is the request's number on its webhook, from 0; a manual
	// webhook's response names it.
	Index   int                 `json:"index"`
	Method  string              `json:"method"`
	URL     string              `json:"url"` // path and query
	Headers map[string][]string `json:"headers,omitempty"`
	Body    string              `json:"body,omitempty"`
	// BodyEncoding is "base64" when the body is not UTF-8 text.
	BodyEncoding string `json:"bodyEncoding,omitempty"`
}

// WebhookResponse is the payload of OpWebhookRespond.
type WebhookResponse struct {
	Hook    uint32 `json:"hook"`
	Request int    `json:"request"`
	HTTPResponse
}

// WebhookPath is where a webhook with the given token is served.
func WebhookPath(token string) string { return "/.well-known/workflow/v1/webhook/" + token }

// HookCreated is the value OpHookCreate answers with. Conflict names the run
// that already holds the token; the hook's waits then reject with
// ErrTypeHookConflict. URL is a webhook's address.
type HookCreated struct {
	Token    string `json:"token"`
	Conflict string `json:"conflict,omitempty"`
	URL      string `json:"url,omitempty"`
}

// ServeCall is the value of an OpReceive future: one call of a serve
// run's task. Index 0 is the call that started the run.
type ServeCall struct {
	Input  json.RawMessage `json:"input"`
	CallID string          `json:"callId"`
	Index  int             `json:"index"`
}

// AbortInfo is the value of an OpSignal future: why the run was aborted
// (task_cancel, turn_cancelled, turn_ended, steer, or the caller's own).
type AbortInfo struct {
	Reason string `json:"reason"`
}

// StepAborted is OpStepAborted's body: whether the run has been aborted
// since the step was called, and the reason of its last abort.
type StepAborted struct {
	Aborted bool   `json:"aborted"`
	Reason  string `json:"reason,omitempty"`
}

// ReplyRequest is OpReply's payload. Received is how many of the run's
// calls the body has received: one past the highest index among the
// ServeCalls its receive futures delivered to it (a future the host
// fulfilled but the body has not read yet does not count). The reply
// answers those calls not yet answered, each with Output.
type ReplyRequest struct {
	Received int             `json:"received"`
	Output   json.RawMessage `json:"output"`
}

// ReplyResult is the answer to OpReply: how many calls it answered.
type ReplyResult struct {
	Answered int `json:"answered"`
}

// HookRef is the payload of OpHookNext and OpHookDispose.
type HookRef struct {
	Hook uint32 `json:"hook"`
}

// Metadata is the value of OpMetadata, what JavaScript's getWorkflowMetadata returns.
type Metadata struct {
	WorkflowName      string `json:"workflowName"`
	WorkflowRunID     string `json:"workflowRunId"`
	WorkflowStartedAt string `json:"workflowStartedAt"` // RFC 3339, UTC
	URL               string `json:"url,omitempty"`
	// StepID is set in a step context: the step's stable id, the same for
	// every attempt, for use as an idempotency key.
	StepID string `json:"stepId,omitempty"`
	// Agents are the agents the run may open (ctx.agents), as they were
	// when the run was created.
	Agents []AgentInfo `json:"agents,omitempty"`
}

// AgentInfo describes an agent a run may open.
type AgentInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// StepInput is the value of OpStepInput.
type StepInput struct {
	Name    string          `json:"name"`
	Input   json.RawMessage `json:"input"`
	StepID  string          `json:"stepId"`
	Attempt int             `json:"attempt"`
	RunID   string          `json:"runId"`
}

// Outcome is the payload of OpComplete and OpStepComplete: exactly one of
// Result or Error. A missing or null Result is the JSON value null.
type Outcome struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ErrorObject    `json:"error,omitempty"`
}

// CapabilityFetch is the host's built-in HTTP capability: a step calls it
// with a FetchRequest and gets a FetchResponse. It reaches only the hosts
// the plugin's manifest lists.
const CapabilityFetch = "http.fetch"

// FetchRequest is the input of CapabilityFetch.
type FetchRequest struct {
	Method       string            `json:"method,omitempty"` // GET by default
	URL          string            `json:"url"`
	Headers      map[string]string `json:"headers,omitempty"`
	Body         string            `json:"body,omitempty"`
	BodyEncoding string            `json:"bodyEncoding,omitempty"` // "base64" for bytes
}

// FetchResponse is the result of CapabilityFetch. A response body over the
// host's limit fails the call instead.
type FetchResponse struct {
	Status       int                 `json:"status"`
	Headers      map[string][]string `json:"headers,omitempty"`
	Body         string              `json:"body,omitempty"`
	BodyEncoding string              `json:"bodyEncoding,omitempty"`
}

// AgentRequest is the payload of OpAgent: one message to a new session with
// the agent the op names.
type AgentRequest struct {
	// Message is the text sent; or Parts, up to MaxAgentParts text and
	// file parts.
	Message string      `json:"message,omitempty"`
	Parts   []AgentPart `json:"parts,omitempty"`
	// OutputSchema, when set, asks the turn for structured output that
	// validates against it (a JSON Schema); the result's Data holds it.
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// Session names a child session of the run (any key the guest
	// chooses, up to 64 bytes): messages with the same key go to one
	// session, which keeps its conversation between turns; a message sent
	// while the session's turn runs starts its next turn. Empty: a new
	// session for this message alone.
	Session string `json:"session,omitempty"`
	// Model overrides the agent's model for the session.
	Model *AgentModel `json:"model,omitempty"`
	// CancelOnAbort ties the turn to the run's abort signal (JavaScript's
	// send option signal): when the run is aborted while the turn runs,
	// or was aborted when it is sent, the turn ends cancelled.
	CancelOnAbort bool `json:"cancelOnAbort,omitempty"`
}

// MaxAgentParts bounds the parts of one message.
const MaxAgentParts = 64

// AgentPart is a part of a message: text, or a file by its http(s) URL
// (inline bytes, base64 and data: URLs are refused).
type AgentPart struct {
	Type      string `json:"type"` // "text" or "file"
	Text      string `json:"text,omitempty"`
	Data      string `json:"data,omitempty"` // a file's URL
	MediaType string `json:"mediaType,omitempty"`
	Filename  string `json:"filename,omitempty"`
}

// AgentModel is a model override: an AI gateway model id, and optionally
// its context window and reasoning effort.
type AgentModel struct {
	Model                    string `json:"model"`
	ModelContextWindowTokens int    `json:"modelContextWindowTokens,omitempty"`
	Reasoning                string `json:"reasoning,omitempty"`
}

// Agent turn statuses.
const (
	AgentCompleted = "completed"
	AgentFailed    = "failed"
	AgentCancelled = "cancelled"
)

// AgentResult is the value an OpAgent future fulfils with (a failed turn
// fulfils too: Status says so, and Error why).
type AgentResult struct {
	Status       string          `json:"status"`
	Reply        string          `json:"reply,omitempty"`
	Data         json.RawMessage `json:"data,omitempty"`
	SessionEnded bool            `json:"sessionEnded,omitempty"`
	Error        *AgentError     `json:"error,omitempty"`
}

// AgentError says why a turn failed.
type AgentError struct {
	// Code is a stable reason: one of the AgentErr constants.
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// Codes of AgentError.
const (
	// AgentErrFailed: the turn itself failed (the agent's error).
	AgentErrFailed = "agent_failed"
	// AgentErrUnavailable: the host has no such agent, or no agents.
	AgentErrUnavailable = "agent_unavailable"
	// AgentErrTimeout: the turn did not end within the host's limit.
	AgentErrTimeout = "agent_timeout"
	// AgentErrReplyTooLarge: the reply was over the host's limit.
	AgentErrReplyTooLarge = "reply_too_large"
	// AgentErrBadOutput: the structured output was missing, not JSON, or
	// did not match the outputSchema.
	AgentErrBadOutput = "bad_structured_output"
)

// EnvelopeBytes is how far the payload of OpComplete may go over the
// payload limit: room for the field names around its result, which is
// itself bounded by the limit.
const EnvelopeBytes = 1024
