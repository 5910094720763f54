package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/internal/state"
	"net/url"
	"strings"
	"time"

	"github.com/sandflow/sandflow/host/history"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/internal/schema"
)

// AgentBackend runs agent turns for runs (a program's ctx.agent). The host
// calls Turn outside any guest, after the run recorded that it sends the
// message, and records what it returns; a replay never calls it again.
// After a crash a turn in flight may be sent again with the same TurnID:
// a backend that can should treat the TurnID as an idempotency key.
type AgentBackend interface {
	// Turn sends a message to a new session with the named agent and
	// returns the turn's result. An unknown agent, or any failure of the
	// turn, is a result with Status "failed" and an Error, or an error.
	Turn(ctx context.Context, t AgentTurn) (abi.AgentResult, error)
	// Agents lists the agents runs may open, with their descriptions.
	Agents(ctx context.Context) ([]AgentInfo, error)
}

// AgentTurn is one turn of an agent session.
type AgentTurn struct {
	RunID string
	// TurnID is stable across a retried delivery: runID:position.
	TurnID string
	Agent  string
	// Message is the text of the turn's first message; Parts its parts
	// when it was sent as parts.
	Message string
	Parts   []abi.AgentPart
	// More are the messages sent while the session's previous turn ran,
	// which this turn takes too, in order.
	More         []abi.AgentRequest
	OutputSchema json.RawMessage
	// SessionID names the child session (runID:key) when the run sends
	// it more than one message; History holds its earlier turns, from the
	// run's log, so a backend needs no state of its own to continue it.
	SessionID string
	History   []AgentExchange
	// Model overrides the agent's model, when set.
	Model *abi.AgentModel
}

// AgentExchange is an earlier turn of a session: what was sent, and the
// reply.
type AgentExchange struct {
	Messages []abi.AgentRequest
	Reply    string
	Data     json.RawMessage
}

// AgentInfo describes an agent.
type AgentInfo = abi.AgentInfo

// AgentFunc adapts a function to an AgentBackend with the given agents.
type AgentFunc struct {
	List []AgentInfo
	Fn   func(ctx context.Context, t AgentTurn) (abi.AgentResult, error)
}

// Turn implements AgentBackend. A turn for an agent not in List fails
// with AgentErrUnavailable without calling Fn.
func (a AgentFunc) Turn(ctx context.Context, t AgentTurn) (abi.AgentResult, error) {
	known := false
	for _, ag := range a.List {
		known = known || ag.Name == t.Agent
	}
	if !known {
		return abi.AgentResult{Status: abi.AgentFailed, Error: &abi.AgentError{Code: abi.AgentErrUnavailable, Message: fmt.Sprintf("no agent is called %q", t.Agent)}}, nil
	}
	return a.Fn(ctx, t)
}

// Agents implements AgentBackend.
func (a AgentFunc) Agents(context.Context) ([]AgentInfo, error) { return a.List, nil }

// Default agent limits.
const (
	defaultAgentReplyBytes = 4 << 20
	defaultAgentTimeout    = 10 * time.Minute
)

// Agents lists the agents runs on this host may call (none when the host
// has no agent backend).
func (h *Host) Agents(ctx context.Context) ([]AgentInfo, error) {
	if h.opts.Agents == nil {
		return nil, nil
	}
	return h.opts.Agents.Agents(ctx)
}

// execAgent runs one agent turn through the backend and checks what comes
// back: its size, and its structured output against the turn's schema.
func (h *Host) execAgent(ctx context.Context, t AgentTurn) abi.AgentResult {
	failed := func(code, format string, args ...any) abi.AgentResult {
		return abi.AgentResult{Status: abi.AgentFailed, Error: &abi.AgentError{Code: code, Message: fmt.Sprintf(format, args...)}}
	}
	if h.opts.Agents == nil {
		return failed(abi.AgentErrUnavailable, "this host has no agents: agent %q is unavailable", t.Agent)
	}
	timeout := h.opts.AgentTimeout
	if timeout <= 0 {
		timeout = defaultAgentTimeout
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := h.opts.Agents.Turn(tctx, t)
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return failed(abi.AgentErrTimeout, "agent %s did not answer within %s", t.Agent, timeout)
	case err != nil:
		return failed(abi.AgentErrFailed, "agent %s: %v", t.Agent, err)
	}
	switch res.Status {
	case abi.AgentCompleted, abi.AgentCancelled:
	case abi.AgentFailed:
		if res.Error == nil {
			res.Error = &abi.AgentError{Message: "the turn failed"}
		}
		if res.Error.Code == "" {
			res.Error.Code = abi.AgentErrFailed
		}
		return res
	default:
		return failed(abi.AgentErrFailed, "agent %s answered with status %q", t.Agent, res.Status)
	}
	max := h.opts.AgentReplyBytes
	if max <= 0 {
		max = defaultAgentReplyBytes
	}
	if n := len(res.Reply) + len(res.Data); n > max {
		return failed(abi.AgentErrReplyTooLarge, "agent %s's reply of %d bytes is over the limit of %d", t.Agent, n, max)
	}
	if len(res.Data) > 0 && !json.Valid(res.Data) {
		return failed(abi.AgentErrBadOutput, "agent %s's structured output is not JSON", t.Agent)
	}
	if len(t.OutputSchema) > 0 && res.Status == abi.AgentCompleted {
		if len(res.Data) == 0 {
			return failed(abi.AgentErrBadOutput, "agent %s gave no structured output for the turn's outputSchema", t.Agent)
		}
		sch, err := schema.Compile(t.OutputSchema)
		if err != nil {
			return failed(abi.AgentErrBadOutput, "outputSchema: %v", err)
		}
		v, err := schema.Decode(res.Data)
		if err != nil {
			return failed(abi.AgentErrBadOutput, "agent %s's structured output: %v", t.Agent, err)
		}
		if problems := sch.Validate(v); problems != nil {
			return failed(abi.AgentErrBadOutput, "agent %s's structured output does not match outputSchema: %v", t.Agent, problems)
		}
	}
	return res
}

// agentOutcome is how one turn ended.
type agentOutcome struct {
	p   uint32
	res abi.AgentResult
}

// recordAgents records turns that ended, in one commit.
func (h *Host) recordAgents(ctx context.Context, rh *runHandle, turns []agentOutcome) error {
	rs := rh.rs
	if rs.Status.Terminal() {
		return nil // cancelled while the turns ran
	}
	b := newBatch(rs)
	for _, t := range turns {
		o := rs.Op(t.p)
		if o == nil || o.Kind != abi.OpAgent || o.Settled {
			continue // the run moved on (it was cancelled, say)
		}
		if _, err := b.push(EvAgentSettled, &history.Data{Op: t.p, Agent: &t.res}); err != nil {
			return err
		}
	}
	if len(b.b.Events) == 0 {
		return nil
	}
	return h.commit(ctx, rh, b, nil)
}

// checkAgentRequest checks a message's parts, session key and model
// override, and says what is wrong ("" when nothing is).
func checkAgentRequest(req *abi.AgentRequest) string {
	if len(req.Session) > 64 {
		return fmt.Sprintf("session: a key is at most 64 bytes, not %d", len(req.Session))
	}
	if len(req.Parts) > 0 && req.Message != "" {
		return "give a message or parts, not both"
	}
	if len(req.Parts) > abi.MaxAgentParts {
		return fmt.Sprintf("parts: a message has at most %d parts, not %d", abi.MaxAgentParts, len(req.Parts))
	}
	for i, pt := range req.Parts {
		switch pt.Type {
		case "text":
			if pt.Data != "" {
				return fmt.Sprintf("parts[%d]: a text part has no data", i)
			}
		case "file":
			if m := checkFileURL(pt.Data); m != "" {
				return fmt.Sprintf("parts[%d]: %s", i, m)
			}
		default:
			return fmt.Sprintf("parts[%d]: type %q is not text or file", i, pt.Type)
		}
	}
	if m := req.Model; m != nil {
		switch {
		case m.Model == "" || len(m.Model) > 256:
			return "model: an AI gateway model id such as provider/model, 1-256 bytes"
		case m.ModelContextWindowTokens < 0:
			return "model: modelContextWindowTokens must be positive"
		}
		switch m.Reasoning {
		case "", "minimal", "low", "medium", "high":
		default:
			return fmt.Sprintf("model: reasoning %q is not minimal, low, medium or high", m.Reasoning)
		}
	}
	return ""
}

// checkFileURL accepts a file part's data only as an http(s) URL: inline
// bytes, base64 and data: URLs are refused before anything is sent.
func checkFileURL(data string) string {
	if strings.HasPrefix(strings.ToLower(data), "data:") {
		return "a file's data must be an http(s) URL, not a data: URL; upload the file and send its URL"
	}
	u, err := url.Parse(data)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "a file's data must be an http(s) URL (inline bytes and base64 are refused); upload the file and send its URL"
	}
	return ""
}

// agentTurn is the turn of the agent op at position p, with the session's
// earlier exchanges.
func agentTurn(rs *state.Run, p uint32) AgentTurn {
	o := rs.Op(p)
	req := rs.AgentRequest(p)
	t := AgentTurn{RunID: rs.ID, TurnID: state.StepID(rs.ID, p), Agent: o.Name, Message: req.Message, Parts: req.Parts,
		OutputSchema: o.Request, Model: req.Model}
	key := o.Session()
	cs := rs.Sessions[key]
	if key == "" || cs == nil {
		return t
	}
	t.SessionID = rs.ID + ":" + key
	for _, j := range cs.Joined[p] {
		t.More = append(t.More, rs.AgentRequest(j))
	}
	// A session's model is the one its first message set.
	if t.Model == nil {
		t.Model = rs.AgentRequest(state.FirstOf(cs, p)).Model
	}
	for _, first := range cs.Turns {
		x := AgentExchange{Messages: []abi.AgentRequest{rs.AgentRequest(first)}}
		for _, j := range cs.Joined[first] {
			x.Messages = append(x.Messages, rs.AgentRequest(j))
		}
		var res abi.AgentResult
		_ = json.Unmarshal(rs.Op(first).Value, &res)
		x.Reply, x.Data = res.Reply, res.Data
		t.History = append(t.History, x)
	}
	return t
}
