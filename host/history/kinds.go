package history

// One type per event kind: the fields abi/HISTORY.md lists for the kind,
// with Data's names, types and JSON tags, in Data's order, so that such a
// value marshals to the bytes the host writes for that event.
// TestKindTypesMatchTheSchema holds them to the document and to Data: a
// field added to one and not the others fails it.

import (
	"encoding/json"
	"time"

	"github.com/sandflow/sandflow/abi"
)

// RunCreated is the data of a run_created event: the first event of every
// run.
type RunCreated struct {
	Tool       string          `json:"tool,omitempty"`
	Plugin     string          `json:"plugin,omitempty"`
	Version    int             `json:"version,omitempty"`
	ModuleHash string          `json:"moduleHash,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	Seed       string          `json:"seed,omitempty"`
	NoAsk      bool            `json:"noAsk,omitempty"`
	Serve      bool            `json:"serve,omitempty"`
	SharedInit bool            `json:"sharedInit,omitempty"`
	Agents     []abi.AgentInfo `json:"agents,omitempty"`
	URL        string          `json:"url,omitempty"`
	BaseURL    string          `json:"baseUrl,omitempty"`
}

// EventKind implements Payload.
func (RunCreated) EventKind() string { return KindRunCreated }

// RunResumed is the data of a run_resumed event: begins an activation.
type RunResumed struct {
	Activation int `json:"activation,omitempty"`
}

// EventKind implements Payload.
func (RunResumed) EventKind() string { return KindRunResumed }

// StepStarted is the data of a step_started event: an attempt of a step
// begins.
type StepStarted struct {
	Input   json.RawMessage  `json:"input,omitempty"`
	Op      uint32           `json:"op,omitempty"`
	Name    string           `json:"name,omitempty"`
	Attempt int              `json:"attempt,omitempty"`
	Retry   *abi.RetryPolicy `json:"retry,omitempty"`
}

// EventKind implements Payload.
func (StepStarted) EventKind() string { return KindStepStarted }

// StepCompleted is the data of a step_completed event: an attempt of a step
// returned a result (its `step_complete`).
type StepCompleted struct {
	Op      uint32          `json:"op,omitempty"`
	Attempt int             `json:"attempt,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
}

// EventKind implements Payload.
func (StepCompleted) EventKind() string { return KindStepCompleted }

// StepFailed is the data of a step_failed event: an attempt of a step ended
// without a result.
type StepFailed struct {
	Op      uint32           `json:"op,omitempty"`
	Attempt int              `json:"attempt,omitempty"`
	RetryAt *time.Time       `json:"retryAt,omitempty"`
	Error   *abi.ErrorObject `json:"error,omitempty"`
}

// EventKind implements Payload.
func (StepFailed) EventKind() string { return KindStepFailed }

// TimerSet is the data of a timer_set event: the guest's `sleep` op.
type TimerSet struct {
	Op        uint32     `json:"op,omitempty"`
	FireAt    *time.Time `json:"fireAt,omitempty"`
	Immediate bool       `json:"immediate,omitempty"`
}

// EventKind implements Payload.
func (TimerSet) EventKind() string { return KindTimerSet }

// TimerFired is the data of a timer_fired event: a sleep's timer came due
// and the scheduler fired it (`sandflow serve`'s scheduler, `Host.FireDue`,
// `FireDueOf`).
type TimerFired struct {
	Op uint32 `json:"op,omitempty"`
}

// EventKind implements Payload.
func (TimerFired) EventKind() string { return KindTimerFired }

// AskOpened is the data of an ask_opened event: the guest's `ask` op.
type AskOpened struct {
	Op      uint32          `json:"op,omitempty"`
	AskID   string          `json:"askId,omitempty"`
	Request json.RawMessage `json:"request,omitempty"`
	Answer  *abi.AskAnswer  `json:"answer,omitempty"`
}

// EventKind implements Payload.
func (AskOpened) EventKind() string { return KindAskOpened }

// AskSettled is the data of an ask_settled event: an open question settled.
type AskSettled struct {
	Op     uint32         `json:"op,omitempty"`
	AskID  string         `json:"askId,omitempty"`
	Answer *abi.AskAnswer `json:"answer,omitempty"`
}

// EventKind implements Payload.
func (AskSettled) EventKind() string { return KindAskSettled }

// HookCreated is the data of a hook_created event: the guest's `hook_create`
// op.
type HookCreated struct {
	URL      string           `json:"url,omitempty"`
	Op       uint32           `json:"op,omitempty"`
	Token    string           `json:"token,omitempty"`
	Metadata json.RawMessage  `json:"metadata,omitempty"`
	Conflict string           `json:"conflict,omitempty"`
	Webhook  *abi.WebhookSpec `json:"webhook,omitempty"`
}

// EventKind implements Payload.
func (HookCreated) EventKind() string { return KindHookCreated }

// HookNext is the data of a hook_next event: the guest's `hook_next` op.
type HookNext struct {
	Op   uint32 `json:"op,omitempty"`
	Hook uint32 `json:"hook,omitempty"`
}

// EventKind implements Payload.
func (HookNext) EventKind() string { return KindHookNext }

// HookReceived is the data of a hook_received event: a payload arrived for a
// hook the run holds.
type HookReceived struct {
	Hook    uint32          `json:"hook,omitempty"`
	Index   int             `json:"index,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// EventKind implements Payload.
func (HookReceived) EventKind() string { return KindHookReceived }

// HookDisposed is the data of a hook_disposed event: a hook was disposed.
type HookDisposed struct {
	Op   uint32 `json:"op,omitempty"`
	Hook uint32 `json:"hook,omitempty"`
}

// EventKind implements Payload.
func (HookDisposed) EventKind() string { return KindHookDisposed }

// WebhookResponded is the data of a webhook_responded event: the guest's
// `webhook_respond` op.
type WebhookResponded struct {
	Op       uint32            `json:"op,omitempty"`
	Hook     uint32            `json:"hook,omitempty"`
	Response *abi.HTTPResponse `json:"response,omitempty"`
	Index    int               `json:"index,omitempty"`
}

// EventKind implements Payload.
func (WebhookResponded) EventKind() string { return KindWebhookResponded }

// AgentSent is the data of an agent_sent event: the guest's `agent` op.
type AgentSent struct {
	Input        json.RawMessage   `json:"input,omitempty"`
	Op           uint32            `json:"op,omitempty"`
	Name         string            `json:"name,omitempty"`
	Request      json.RawMessage   `json:"request,omitempty"`
	AgentRequest *abi.AgentRequest `json:"agentRequest,omitempty"`
}

// EventKind implements Payload.
func (AgentSent) EventKind() string { return KindAgentSent }

// AgentSettled is the data of an agent_settled event: an agent turn ended.
type AgentSettled struct {
	Op    uint32           `json:"op,omitempty"`
	Agent *abi.AgentResult `json:"agent,omitempty"`
}

// EventKind implements Payload.
func (AgentSettled) EventKind() string { return KindAgentSettled }

// Progress is the data of a progress event: the guest's `progress` op.
type Progress struct {
	Op    uint32          `json:"op,omitempty"`
	Value json.RawMessage `json:"value,omitempty"`
}

// EventKind implements Payload.
func (Progress) EventKind() string { return KindProgress }

// Output is the data of an output event: what the guest wrote to stdout or
// stderr.
type Output struct {
	Stream   string `json:"stream,omitempty"`
	Data     string `json:"data,omitempty"`
	Produced int64  `json:"produced,omitempty"`
	Step     uint32 `json:"step,omitempty"`
	Cut      bool   `json:"cut,omitempty"`
}

// EventKind implements Payload.
func (Output) EventKind() string { return KindOutput }

// RunCompleted is the data of a run_completed event: the guest's `complete`
// op with a result that stands.
type RunCompleted struct {
	Op     uint32          `json:"op,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// EventKind implements Payload.
func (RunCompleted) EventKind() string { return KindRunCompleted }

// RunFailed is the data of a run_failed event: the run has failed.
type RunFailed struct {
	Op     uint32           `json:"op,omitempty"`
	Result json.RawMessage  `json:"result,omitempty"`
	Error  *abi.ErrorObject `json:"error,omitempty"`
}

// EventKind implements Payload.
func (RunFailed) EventKind() string { return KindRunFailed }

// RunCancelled is the data of a run_cancelled event: the run has been
// cancelled.
type RunCancelled struct {
	Op     uint32           `json:"op,omitempty"`
	Result json.RawMessage  `json:"result,omitempty"`
	Error  *abi.ErrorObject `json:"error,omitempty"`
	Reason string           `json:"reason,omitempty"`
}

// EventKind implements Payload.
func (RunCancelled) EventKind() string { return KindRunCancelled }

// RunUpgraded is the data of a run_upgraded event: `Upgrade` (`sandflow runs
// upgrade RUN --version N`, the console) moved the run to another version of
// its plugin, after checking that the version replays the run's history.
type RunUpgraded struct {
	Version     int    `json:"version,omitempty"`
	ModuleHash  string `json:"moduleHash,omitempty"`
	FromVersion int    `json:"fromVersion,omitempty"`
	FromHash    string `json:"fromHash,omitempty"`
}

// EventKind implements Payload.
func (RunUpgraded) EventKind() string { return KindRunUpgraded }

// OpRefused is the data of an op_refused event: a recorded op the host
// refused for its payload (a question without a prompt, a sleep without a
// time, a value over the limit, a hook that does not exist).
type OpRefused struct {
	Op     uint32           `json:"op,omitempty"`
	Kind   string           `json:"kind,omitempty"`
	Name   string           `json:"name,omitempty"`
	Status uint32           `json:"status,omitempty"`
	Error  *abi.ErrorObject `json:"error,omitempty"`
}

// EventKind implements Payload.
func (OpRefused) EventKind() string { return KindOpRefused }

// CallReceived is the data of a call_received event: another call of a serve
// run's task.
type CallReceived struct {
	Input  json.RawMessage `json:"input,omitempty"`
	Index  int             `json:"index,omitempty"`
	CallID string          `json:"callId,omitempty"`
}

// EventKind implements Payload.
func (CallReceived) EventKind() string { return KindCallReceived }

// Receive is the data of a receive event: the guest's `receive` op, in a
// serve run.
type Receive struct {
	Op uint32 `json:"op,omitempty"`
}

// EventKind implements Payload.
func (Receive) EventKind() string { return KindReceive }

// Replied is the data of a replied event: the guest's `reply` op, in a serve
// run.
type Replied struct {
	Op       uint32          `json:"op,omitempty"`
	Index    int             `json:"index,omitempty"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	Answered int             `json:"answered,omitempty"`
}

// EventKind implements Payload.
func (Replied) EventKind() string { return KindReplied }

// AbortRequested is the data of an abort_requested event: `Abort` (`POST
// /v1/runs/{id}/abort`; a session's `task_cancel`, a cancelled or ended
// turn, a steer; the console) asked the run to stop its work and unwind
// (README.md).
type AbortRequested struct {
	Index  int    `json:"index,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// EventKind implements Payload.
func (AbortRequested) EventKind() string { return KindAbortRequested }

// Signal is the data of a signal event: the guest's `signal` op.
type Signal struct {
	Op     uint32 `json:"op,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// EventKind implements Payload.
func (Signal) EventKind() string { return KindSignal }

// typed is d as the type of its kind, or false for a kind it does not know.
func (d *Data) typed(kind string) (Payload, bool) {
	switch kind {
	case KindRunCreated:
		return &RunCreated{Tool: d.Tool, Plugin: d.Plugin, Version: d.Version, ModuleHash: d.ModuleHash, Input: d.Input, Seed: d.Seed, NoAsk: d.NoAsk, Serve: d.Serve, SharedInit: d.SharedInit, Agents: d.Agents, URL: d.URL, BaseURL: d.BaseURL}, true
	case KindRunResumed:
		return &RunResumed{Activation: d.Activation}, true
	case KindStepStarted:
		return &StepStarted{Input: d.Input, Op: d.Op, Name: d.Name, Attempt: d.Attempt, Retry: d.Retry}, true
	case KindStepCompleted:
		return &StepCompleted{Op: d.Op, Attempt: d.Attempt, Result: d.Result}, true
	case KindStepFailed:
		return &StepFailed{Op: d.Op, Attempt: d.Attempt, RetryAt: d.RetryAt, Error: d.Error}, true
	case KindTimerSet:
		return &TimerSet{Op: d.Op, FireAt: d.FireAt, Immediate: d.Immediate}, true
	case KindTimerFired:
		return &TimerFired{Op: d.Op}, true
	case KindAskOpened:
		return &AskOpened{Op: d.Op, AskID: d.AskID, Request: d.Request, Answer: d.Answer}, true
	case KindAskSettled:
		return &AskSettled{Op: d.Op, AskID: d.AskID, Answer: d.Answer}, true
	case KindHookCreated:
		return &HookCreated{URL: d.URL, Op: d.Op, Token: d.Token, Metadata: d.Metadata, Conflict: d.Conflict, Webhook: d.Webhook}, true
	case KindHookNext:
		return &HookNext{Op: d.Op, Hook: d.Hook}, true
	case KindHookReceived:
		return &HookReceived{Hook: d.Hook, Index: d.Index, Payload: d.Payload}, true
	case KindHookDisposed:
		return &HookDisposed{Op: d.Op, Hook: d.Hook}, true
	case KindWebhookResponded:
		return &WebhookResponded{Op: d.Op, Hook: d.Hook, Response: d.Response, Index: d.Index}, true
	case KindAgentSent:
		return &AgentSent{Input: d.Input, Op: d.Op, Name: d.Name, Request: d.Request, AgentRequest: d.AgentRequest}, true
	case KindAgentSettled:
		return &AgentSettled{Op: d.Op, Agent: d.Agent}, true
	case KindProgress:
		return &Progress{Op: d.Op, Value: d.Value}, true
	case KindOutput:
		return &Output{Stream: d.Stream, Data: d.Data, Produced: d.Produced, Step: d.Step, Cut: d.Cut}, true
	case KindRunCompleted:
		return &RunCompleted{Op: d.Op, Result: d.Result}, true
	case KindRunFailed:
		return &RunFailed{Op: d.Op, Result: d.Result, Error: d.Error}, true
	case KindRunCancelled:
		return &RunCancelled{Op: d.Op, Result: d.Result, Error: d.Error, Reason: d.Reason}, true
	case KindRunUpgraded:
		return &RunUpgraded{Version: d.Version, ModuleHash: d.ModuleHash, FromVersion: d.FromVersion, FromHash: d.FromHash}, true
	case KindOpRefused:
		return &OpRefused{Op: d.Op, Kind: d.Kind, Name: d.Name, Status: d.Status, Error: d.Error}, true
	case KindCallReceived:
		return &CallReceived{Input: d.Input, Index: d.Index, CallID: d.CallID}, true
	case KindReceive:
		return &Receive{Op: d.Op}, true
	case KindReplied:
		return &Replied{Op: d.Op, Index: d.Index, Payload: d.Payload, Answered: d.Answered}, true
	case KindAbortRequested:
		return &AbortRequested{Index: d.Index, Reason: d.Reason}, true
	case KindSignal:
		return &Signal{Op: d.Op, Reason: d.Reason}, true
	}
	return nil, false
}
