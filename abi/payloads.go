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

// HookRequest is the payload of OpHookCreate.
type HookRequest struct {
	Token    string          `json:"token,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// HookCreated is the value OpHookCreate answers with. Conflict names the run
// that already holds the token; the hook's waits then reject with
// ErrTypeHookConflict.
type HookCreated struct {
	Token    string `json:"token"`
	Conflict string `json:"conflict,omitempty"`
}

// HookRef is the payload of OpHookNext and OpHookDispose.
type HookRef struct {
	Hook uint32 `json:"hook"`
}

// Metadata is the value of OpMetadata, the spec's getWorkflowMetadata.
type Metadata struct {
	WorkflowName      string `json:"workflowName"`
	WorkflowRunID     string `json:"workflowRunId"`
	WorkflowStartedAt string `json:"workflowStartedAt"` // RFC 3339, UTC
	URL               string `json:"url,omitempty"`
	// StepID is set in a step context: the step's stable id, the same for
	// every attempt, for use as an idempotency key.
	StepID string `json:"stepId,omitempty"`
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
