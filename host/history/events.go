package history

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// Event kinds of a run's log. The names are part of the history format.
const (
	KindRunCreated    = "run_created"
	KindRunResumed    = "run_resumed" // starts an activation
	KindStepStarted   = "step_started"
	KindStepCompleted = "step_completed"
	KindStepFailed    = "step_failed"
	KindTimerSet      = "timer_set"
	KindTimerFired    = "timer_fired"
	KindAskOpened     = "ask_opened"
	KindAskSettled    = "ask_settled"
	KindHookCreated   = "hook_created"
	KindHookNext      = "hook_next"
	KindHookReceived  = "hook_received"
	KindHookDisposed  = "hook_disposed"
	KindProgress      = "progress"
	KindOutput        = "output"
	KindRunCompleted  = "run_completed"
	KindRunFailed     = "run_failed"
	KindRunCancelled  = "run_cancelled"
	KindRunUpgraded   = "run_upgraded"
	KindOpRefused     = "op_refused" // a recorded op the host refused

	KindWebhookResponded = "webhook_responded"
	KindAgentSent        = "agent_sent"
	KindAgentSettled     = "agent_settled"

	// A serve run's calls: one sent to the run, a receive op, a reply op.
	KindCallReceived = "call_received"
	KindReceive      = "receive"
	KindReplied      = "replied"

	// An abort (a cancel with time to unwind), and a signal op that waits
	// for the next one.
	KindAbortRequested = "abort_requested"
	KindSignal         = "signal"
)

// Data is the data of every event kind as the log stores it: each kind
// uses some of its fields, as abi/HISTORY.md lists for every kind. The
// kernel decodes every event into a Data.
type Data struct {
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
	// (the host's pre-initialised instances), not on the run's clock and seed.
	SharedInit bool `json:"sharedInit,omitempty"`
	// Agents are the agents the run may open, as they were at its start.
	Agents  []abi.AgentInfo `json:"agents,omitempty"`
	URL     string          `json:"url,omitempty"`     // the run's (run_created), a webhook's (hook_created)
	BaseURL string          `json:"baseUrl,omitempty"` // where the host served the run from`

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

// NewEvent makes the event of the given kind, time (kept in UTC) and
// data, with its data encoded as json.Marshal encodes it. The store gives
// it its sequence number when it is appended.
func NewEvent(kind string, t time.Time, d *Data) store.Event {
	if data, ok := encodeHot(d); ok {
		return store.Event{Time: t.UTC(), Kind: kind, Data: data}
	}
	return newEventJSON(kind, t, *d)
}

// newEventJSON is NewEvent by encoding/json, on a copy of the data: what
// json.Marshal is given escapes to the heap, and so the callers' Data
// would on every event, which encodeHot nearly always takes.
func newEventJSON(kind string, t time.Time, d Data) store.Event {
	data, err := json.Marshal(&d)
	if err != nil {
		// Data holds only marshalable fields; RawMessages are validated
		// before they get here.
		panic(fmt.Sprintf("host: encoding %s event: %v", kind, err))
	}
	return store.Event{Time: t.UTC(), Kind: kind, Data: data}
}

// Decode decodes an event's data. Data that is not JSON, or does not fit
// Data's fields, is an error wrapping ErrBadHistory.
func Decode(e store.Event) (*Data, error) {
	d := new(Data)
	if _, err := DecodeInto(&e, d, nil); err != nil {
		return nil, err
	}
	return d, nil
}

// DecodeInto decodes an event's data into a zero Data (but for
// what ClearHot clears), interning names in strs (codec.go). hot says
// only the fields ClearHot clears may be set.
func DecodeInto(e *store.Event, d *Data, strs map[string]string) (hot bool, err error) {
	if ok, full := decodeEvFast(e.Kind, e.Data, d, strs); ok {
		return !full, nil
	}
	if err := json.Unmarshal(e.Data, d); err != nil {
		return false, fmt.Errorf("%w: event %d (%s): %v", ErrBadHistory, e.Seq, e.Kind, err)
	}
	return false, nil
}
