package console

import (
	"encoding/json"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// entry is one line of a run's timeline: the host's description of the
// event, and the values worth reading whole beside it.
type entry struct {
	Seq        uint64
	Time       time.Time
	Kind       string
	Text       string
	Class      string // activation, step, ask, timer, hook, agent, progress, end, other
	Op         uint32
	Activation int
	In, Out    json.RawMessage // a step's input and output; an agent's message and reply
	InLabel    string
	OutLabel   string
	Error      *abi.ErrorObject
	Due        *time.Time // a timer's due time, a retry's
	AskID      string
	Token      string // a hook's token
	URL        string // a webhook's URL
	Child      string // the run an agent turn ran as, or a loop agent's step started
}

// evFields are the fields of the host's event data the timeline shows.
type evFields struct {
	Activation   int               `json:"activation"`
	Op           uint32            `json:"op"`
	Name         string            `json:"name"`
	Attempt      int               `json:"attempt"`
	Input        json.RawMessage   `json:"input"`
	Result       json.RawMessage   `json:"result"`
	Value        json.RawMessage   `json:"value"`
	Payload      json.RawMessage   `json:"payload"`
	Error        *abi.ErrorObject  `json:"error"`
	RetryAt      *time.Time        `json:"retryAt"`
	FireAt       *time.Time        `json:"fireAt"`
	AskID        string            `json:"askId"`
	Request      json.RawMessage   `json:"request"`
	Answer       *abi.AskAnswer    `json:"answer"`
	Token        string            `json:"token"`
	URL          string            `json:"url"`
	Webhook      *abi.WebhookSpec  `json:"webhook"`
	Agent        *abi.AgentResult  `json:"agent"`
	AgentRequest *abi.AgentRequest `json:"agentRequest"`
}

func rawJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// timeline turns a run's log into entries. A completed or failed step
// shows the input its attempt started with beside its output.
func timeline(evs []store.Event) []entry {
	out := make([]entry, 0, len(evs))
	stepIn := map[uint32]json.RawMessage{}
	agentIn := map[uint32]json.RawMessage{}
	for _, e := range evs {
		var d evFields
		_ = json.Unmarshal(e.Data, &d) // DescribeEvent reports undecodable data
		en := entry{Seq: e.Seq, Time: e.Time, Kind: e.Kind, Text: host.DescribeEvent(e), Op: d.Op, Class: "other"}
		switch e.Kind {
		case host.EvRunCreated:
			en.Class, en.In, en.InLabel = "activation", d.Input, "input"
		case host.EvRunResumed:
			en.Class, en.Activation = "activation", d.Activation
		case host.EvStepStarted:
			stepIn[d.Op] = d.Input
			en.Class, en.In, en.InLabel = "step", d.Input, "input"
		case host.EvStepCompleted:
			en.Class, en.In, en.InLabel, en.Out, en.OutLabel = "step", stepIn[d.Op], "input", d.Result, "output"
		case host.EvStepFailed:
			en.Class, en.In, en.InLabel, en.Error, en.Due = "step", stepIn[d.Op], "input", d.Error, d.RetryAt
		case host.EvTimerSet:
			en.Class, en.Due = "timer", d.FireAt
		case host.EvTimerFired:
			en.Class = "timer"
		case host.EvAskOpened:
			en.Class, en.AskID, en.In, en.InLabel = "ask", d.AskID, d.Request, "question"
			if d.Answer != nil {
				en.Out, en.OutLabel = rawJSON(d.Answer), "answer"
			}
		case host.EvAskSettled:
			en.Class, en.AskID = "ask", d.AskID
			if d.Answer != nil {
				en.Out, en.OutLabel = rawJSON(d.Answer), "answer"
			}
		case host.EvHookCreated, host.EvHookNext, host.EvHookDisposed, host.EvWebhookResponded:
			en.Class, en.Token, en.URL = "hook", d.Token, d.URL
		case host.EvHookReceived:
			en.Class, en.Out, en.OutLabel = "hook", d.Payload, "payload"
		case host.EvAgentSent:
			in := d.Input
			if d.AgentRequest != nil {
				in = rawJSON(d.AgentRequest)
			}
			agentIn[d.Op] = in
			en.Class, en.In, en.InLabel = "agent", in, "message"
		case host.EvAgentSettled:
			en.Class, en.In, en.InLabel = "agent", agentIn[d.Op], "message"
			if d.Agent != nil {
				en.Out, en.OutLabel = rawJSON(d.Agent), "reply"
			}
		case host.EvProgress:
			en.Class, en.Out, en.OutLabel = "progress", d.Value, "progress"
		case host.EvRunCompleted:
			en.Class, en.Out, en.OutLabel = "end", d.Result, "result"
		case host.EvRunFailed:
			en.Class, en.Error = "end", d.Error
		case host.EvRunCancelled:
			en.Class = "end"
		case host.EvOpRefused:
			en.Error = d.Error
		}
		out = append(out, en)
	}
	return out
}
