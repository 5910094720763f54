package host

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// Event kinds of a run's log. The names are part of the history format.
const (
	EvRunCreated    = "run_created"
	EvRunResumed    = "run_resumed" // starts an activation
	EvStepStarted   = "step_started"
	EvStepCompleted = "step_completed"
	EvStepFailed    = "step_failed"
	EvTimerSet      = "timer_set"
	EvTimerFired    = "timer_fired"
	EvAskOpened     = "ask_opened"
	EvAskSettled    = "ask_settled"
	EvHookCreated   = "hook_created"
	EvHookNext      = "hook_next"
	EvHookReceived  = "hook_received"
	EvHookDisposed  = "hook_disposed"
	EvProgress      = "progress"
	EvOutput        = "output"
	EvRunCompleted  = "run_completed"
	EvRunFailed     = "run_failed"
	EvRunCancelled  = "run_cancelled"
	EvRunUpgraded   = "run_upgraded"
	EvOpRefused     = "op_refused" // a recorded op the host refused

	EvWebhookResponded = "webhook_responded"
	EvAgentSent        = "agent_sent"
	EvAgentSettled     = "agent_settled"

	// A serve run's calls: one sent to the run, a receive op, a reply op.
	EvCallReceived = "call_received"
	EvReceive      = "receive"
	EvReplied      = "replied"

	// An abort (a cancel with time to unwind), and a signal op that waits
	// for the next one.
	EvAbortRequested = "abort_requested"
	EvSignal         = "signal"
)

// evData is the data of every event kind; each kind uses some fields.
type evData struct {
	// run_created
	Tool       string          `json:"tool,omitempty"`
	Plugin     string          `json:"plugin,omitempty"`
	Version    int             `json:"version,omitempty"`
	ModuleHash string          `json:"moduleHash,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	Seed       string          `json:"seed,omitempty"`
	NoAsk      bool            `json:"noAsk,omitempty"`
	Serve      bool            `json:"serve,omitempty"` // the tool's entry is serve
	// SharedInit: the run's instances initialise on the shared sources
	// (preinit.go), not on the run's clock and seed.
	SharedInit bool `json:"sharedInit,omitempty"`
	// Agents are the agents the run may open, as they were at its start.
	Agents  []AgentInfo `json:"agents,omitempty"`
	URL     string      `json:"url,omitempty"`     // the run's (run_created), a webhook's (hook_created)
	BaseURL string      `json:"baseUrl,omitempty"` // where the host served the run from`

	// run_resumed
	Activation int `json:"activation,omitempty"`

	// ops: the position of the op the event belongs to; for a recorded op,
	// its first event carries the op's kind and name.
	Op   uint32 `json:"op,omitempty"`
	Kind string `json:"kind,omitempty"`
	Name string `json:"name,omitempty"`

	// op_refused: the refusal's status
	Status uint32 `json:"status,omitempty"`

	// steps
	Attempt int              `json:"attempt,omitempty"`
	Retry   *abi.RetryPolicy `json:"retry,omitempty"`
	RetryAt *time.Time       `json:"retryAt,omitempty"`

	// timers; Immediate marks a sleep that was due when it was set
	FireAt    *time.Time `json:"fireAt,omitempty"`
	Immediate bool       `json:"immediate,omitempty"`

	// asks
	AskID   string          `json:"askId,omitempty"`
	Request json.RawMessage `json:"request,omitempty"`
	Answer  *abi.AskAnswer  `json:"answer,omitempty"`

	// hooks
	Token    string            `json:"token,omitempty"`
	Metadata json.RawMessage   `json:"metadata,omitempty"`
	Conflict string            `json:"conflict,omitempty"`
	Hook     uint32            `json:"hook,omitempty"`
	Webhook  *abi.WebhookSpec  `json:"webhook,omitempty"`
	Agent    *abi.AgentResult  `json:"agent,omitempty"`
	Response *abi.HTTPResponse `json:"response,omitempty"`
	Index    int               `json:"index,omitempty"`
	Payload  json.RawMessage   `json:"payload,omitempty"`

	// agent_sent: a message's parts, session key and model override
	AgentRequest *abi.AgentRequest `json:"agentRequest,omitempty"`

	// serve calls: call_received's id; replied's count of calls answered
	CallID   string `json:"callId,omitempty"`
	Answered int    `json:"answered,omitempty"`

	// progress, completion
	Value  json.RawMessage  `json:"value,omitempty"`
	Result json.RawMessage  `json:"result,omitempty"`
	Error  *abi.ErrorObject `json:"error,omitempty"`
	Reason string           `json:"reason,omitempty"`

	// output
	Stream   string `json:"stream,omitempty"`
	Data     string `json:"data,omitempty"`
	Produced int64  `json:"produced,omitempty"`
	Step     uint32 `json:"step,omitempty"`
	Cut      bool   `json:"cut,omitempty"`

	// run_upgraded
	FromVersion int    `json:"fromVersion,omitempty"`
	FromHash    string `json:"fromHash,omitempty"`
}

func mkEvent(kind string, t time.Time, d *evData) store.Event {
	if data, ok := encodeHot(d); ok {
		return store.Event{Time: t.UTC(), Kind: kind, Data: data}
	}
	return mkEventJSON(kind, t, *d)
}

// mkEventJSON is mkEvent by encoding/json, on a copy of the data: what
// json.Marshal is given escapes to the heap, and so the callers' evData
// would on every event, which encodeHot nearly always takes.
func mkEventJSON(kind string, t time.Time, d evData) store.Event {
	data, err := json.Marshal(&d)
	if err != nil {
		// evData holds only marshalable fields; RawMessages are validated
		// before they get here.
		panic(fmt.Sprintf("host: encoding %s event: %v", kind, err))
	}
	return store.Event{Time: t.UTC(), Kind: kind, Data: data}
}

func decodeEvData(e store.Event) (*evData, error) {
	d := new(evData)
	if _, err := decodeEvDataInto(&e, d, nil); err != nil {
		return nil, err
	}
	return d, nil
}

// decodeEvDataInto decodes an event's data into a zero evData (but for
// what clearHot clears), interning names in strs (evcodec.go). hot says
// only the fields clearHot clears may be set.
func decodeEvDataInto(e *store.Event, d *evData, strs map[string]string) (hot bool, err error) {
	if ok, full := decodeEvFast(e.Kind, e.Data, d, strs); ok {
		return !full, nil
	}
	if err := json.Unmarshal(e.Data, d); err != nil {
		return false, fmt.Errorf("%w: event %d (%s): %v", ErrBadHistory, e.Seq, e.Kind, err)
	}
	return false, nil
}
