package agents

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

// Loop runs agents that are tool loops: each turn is a run of the agent's
// own tool on the host, whose body asks an OpenAI-compatible model what to
// do, runs the tools it calls, gives it their results, and asks again
// until it answers without a tool call or a stop condition holds. Every
// model call is a step of that run (recorded, retried per the step's
// policy, never sent again on replay) and every tool call a run of its
// own, started under an id derived from the step, so a turn cut off by a
// restart goes on from where it was and repeats nothing that completed.
//
// A Loop must be attached to its host (Attach) before turns arrive; the
// host must have the loop engine (Engine) among its engines.
type Loop struct {
	// Endpoint is the model API. Its MaxRetries is not used: a failed
	// model call is retried as a step, per the agent's ModelRetry.
	Endpoint
	// Model is the default model; an agent may name its own.
	Model string
	// List holds the agents this backend runs.
	List []LoopAgent
	// Delegates runs the turns of agents that a loop agent calls as
	// tools (LoopTool.Agent); nil means only tools.
	Delegates host.AgentBackend

	// ApprovalSecret signs the approvals turns report (see Approval);
	// empty means SANDFLOW_APPROVAL_SECRET, else the secret in
	// SecretFile (made there on first use), else one made for this
	// process.
	ApprovalSecret []byte
	SecretFile     string

	mu       sync.Mutex
	h        *host.Host
	sessions *session.Manager // on h: the turns' sessions, for task tools
	attached chan struct{}    // closed, and replaced, by each Attach
}

// LoopAgent is one agent of a Loop backend.
type LoopAgent struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Instructions are the system message.
	Instructions string `json:"instructions,omitempty"`
	// Model overrides the backend's model.
	Model string `json:"model,omitempty"`
	// Tools are what the model may call.
	Tools []LoopTool `json:"tools,omitempty"`
	// MaxSteps bounds the model calls of a turn (20 when zero). When the
	// limit stops a model that still calls tools, the run records a
	// warning as its progress and the turn ends with the last reply.
	MaxSteps int `json:"maxSteps,omitempty"`
	// StopWhenToolCalled ends the turn after a step that called one of
	// these tools (by the name the model sees).
	StopWhenToolCalled []string `json:"stopWhenToolCalled,omitempty"`
	// StopWhen, when set, ends the turn after a step for which it returns
	// true. It sees only what the run recorded, so it decides the same on
	// replay. Go API only.
	StopWhen func(LoopStep) bool `json:"-"`
	// ToolCallConcurrency bounds the tool calls of one step that run at
	// once (0: all of them).
	ToolCallConcurrency int `json:"toolCallConcurrency,omitempty"`
	// ModelTimeoutSeconds bounds one model call (60 when zero); a call
	// that times out is retried as a failed step.
	ModelTimeoutSeconds int `json:"modelTimeoutSeconds,omitempty"`
	// TurnTimeoutSeconds bounds a whole turn (none when zero, beyond the
	// host's agent timeout): the turn's run is cancelled at the deadline.
	TurnTimeoutSeconds int `json:"turnTimeoutSeconds,omitempty"`
	// ModelRetry is the retry policy of a model call (the host's step
	// default when nil: 3 attempts, backoff from 1 s).
	ModelRetry *abi.RetryPolicy `json:"modelRetry,omitempty"`
	// Stream asks the model for its reply as a stream, whose pieces a
	// session that runs the turn as a task shows as model.delta events
	// while the call works; the step records the reply they add up to.
	Stream bool `json:"stream,omitempty"`
}

// LoopTool is a tool a loop agent's model may call: a tool of the host
// (WebAssembly, JavaScript, the workflow tool, any other), or another
// agent, which gets the model's message as a new turn.
type LoopTool struct {
	Tool  string `json:"tool,omitempty"`
	Agent string `json:"agent,omitempty"`
	// Name is the name the model sees (the tool's or agent's when empty).
	Name string `json:"name,omitempty"`
	// Description replaces the tool's own for the model.
	Description string `json:"description,omitempty"`
	// Approval is the call's approval policy: never (the default),
	// always or once. A call that needs approval waits as a question
	// showing its input; approved, it runs; denied, the model is told so
	// instead of a result.
	Approval string `json:"approval,omitempty"`
	// ApprovalRules decide the policy from the call's input.
	ApprovalRules []ApprovalRule `json:"approvalRules,omitempty"`
	// Label is what a call is shown as (its approval question's title,
	// and the progress value {"toolCall": label} when it starts): {name}
	// is the tool's name and {ARG} a top-level argument's value.
	Label string `json:"label,omitempty"`
	// ModelOutput, a JSON pointer (RFC 6901) such as /url, gives the
	// model that part of the tool's result instead of all of it; the
	// tool's run keeps the whole result.
	ModelOutput string `json:"modelOutput,omitempty"`
	// EndsTurn ends the turn after a step that called the tool.
	EndsTurn bool `json:"endsTurn,omitempty"`
	// Deferred keeps the tool out of the model's list until the model
	// finds it with the built-in search_tools (by name or description).
	Deferred bool `json:"deferred,omitempty"`
	// HiddenFromDelegates leaves the tool out of a turn that another loop
	// agent delegated (a call of this agent as its tool).
	HiddenFromDelegates bool `json:"hiddenFromDelegates,omitempty"`
}

// LoopStep is what StopWhen sees of a finished step.
type LoopStep struct {
	// Number counts the model calls of the turn, from 1.
	Number int
	// Text is the model's reply text.
	Text string
	// ToolCalls are the tools the model called, by name.
	ToolCalls []string
}

// Loop defaults.
const (
	defaultLoopSteps    = 20
	defaultModelTimeout = 60 * time.Second
)

var modelToolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (t LoopTool) name() string {
	switch {
	case t.Name != "":
		return t.Name
	case t.Tool != "":
		return t.Tool
	}
	return t.Agent
}

func (a *LoopAgent) check() error {
	if a.Name == "" {
		return errors.New("a loop agent has no name")
	}
	if a.MaxSteps < 0 || a.ToolCallConcurrency < 0 || a.ModelTimeoutSeconds < 0 || a.TurnTimeoutSeconds < 0 {
		return fmt.Errorf("agent %s: maxSteps, toolCallConcurrency and the timeouts may not be negative", a.Name)
	}
	seen := map[string]bool{}
	for i, t := range a.Tools {
		if (t.Tool == "") == (t.Agent == "") {
			return fmt.Errorf("agent %s: tool %d names neither or both of tool and agent", a.Name, i+1)
		}
		n := t.name()
		if !modelToolName.MatchString(n) {
			return fmt.Errorf("agent %s: tool name %q is not 1-64 letters, digits, '_' or '-'", a.Name, n)
		}
		if seen[n] {
			return fmt.Errorf("agent %s: two tools are called %q", a.Name, n)
		}
		if err := t.checkApproval(); err != nil {
			return fmt.Errorf("agent %s: %w", a.Name, err)
		}
		if n == searchToolsName {
			return fmt.Errorf("agent %s: %s is the name of the built-in tool that finds deferred tools", a.Name, searchToolsName)
		}
		if t.ModelOutput != "" && !strings.HasPrefix(t.ModelOutput, "/") {
			return fmt.Errorf("agent %s: tool %s: modelOutput %q is not a JSON pointer such as /url", a.Name, n, t.ModelOutput)
		}
		seen[n] = true
	}
	return nil
}

func (a *LoopAgent) tool(name string) (LoopTool, bool) {
	for _, t := range a.Tools {
		if t.name() == name {
			return t, true
		}
	}
	return LoopTool{}, false
}

func (a *LoopAgent) maxSteps() int {
	if a.MaxSteps > 0 {
		return a.MaxSteps
	}
	return defaultLoopSteps
}

// LoopToolName is the name of the host tool a loop agent's turns run as.
func LoopToolName(agent string) string { return "agent-" + agent }

var _ host.AgentBackend = (*Loop)(nil)

// Engine returns the engine the agents' tools run on, for
// host.Options.Engines under LoopEngineName.
func (l *Loop) Engine() host.Engine { return loopEngine{l: l} }

// Attach registers each agent's tool on h (a new version only when the
// agent's configuration changed) and sends the turns there from now on.
func (l *Loop) Attach(ctx context.Context, h *host.Host) error {
	ps, err := h.Plugins(ctx)
	if err != nil {
		return err
	}
	latest := map[string]host.Plugin{}
	for _, p := range ps {
		if p.Version > latest[p.Name].Version {
			latest[p.Name] = p
		}
	}
	for i := range l.List {
		a := &l.List[i]
		if err := a.check(); err != nil {
			return err
		}
		module, err := json.Marshal(a)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(module)
		name := LoopToolName(a.Name)
		if p, ok := latest[name]; ok && p.ModuleHash == hex.EncodeToString(sum[:]) {
			continue
		}
		desc := a.Description
		if desc == "" {
			desc = "Agent " + a.Name
		}
		m := host.Manifest{Name: name, Description: desc + " (a turn of the loop agent " + a.Name + ")", Entry: host.EntryTask, Engine: LoopEngineName,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"},"outputSchema":{"type":"object"},"history":{"type":"array"}},"required":["message"]}`)}
		if _, err := h.AddPlugin(ctx, module, m); err != nil {
			return fmt.Errorf("agent %s: %w", a.Name, err)
		}
	}
	l.mu.Lock()
	if l.sessions != nil && l.h != h {
		l.sessions.Close()
		l.sessions = nil
	}
	if l.sessions == nil {
		l.sessions = session.NewManager(h)
	}
	l.h = h
	if l.attached != nil {
		close(l.attached)
	}
	l.attached = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// hostOtherThan returns the attached host, once there is one other than
// stale (nil, or a host that turned out closed): a process may drive runs
// (recovering them, say) before it attaches the loop backend, and a
// backend outlives a host that is closed and opened again.
func (l *Loop) hostOtherThan(ctx context.Context, stale *host.Host) (*host.Host, error) {
	for {
		l.mu.Lock()
		h, ch := l.h, l.attached
		if ch == nil {
			ch = make(chan struct{})
			l.attached = ch
		}
		l.mu.Unlock()
		if h != nil && h != stale {
			return h, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// call runs a tool's run under id on the attached host, as host.Call
// does (a run that ends in its first activation is one commit), until it
// ends or waits; a run that exists already (an attempt after a restart)
// is found, not started again. It returns the host and the run as far as
// it got.
func (l *Loop) call(ctx context.Context, tool string, input json.RawMessage, id string) (*host.Host, host.RunInfo, error) {
	var stale *host.Host
	for {
		h, err := l.hostOtherThan(ctx, stale)
		if err != nil {
			return nil, host.RunInfo{}, err
		}
		ri, err := h.Call(ctx, tool, input, &host.CallOptions{RunID: id})
		switch {
		case errors.Is(err, host.ErrClosed):
			stale = h
			continue
		case errors.Is(err, host.ErrRunExists):
			ri, err = h.Run(ctx, id)
		}
		return h, ri, err
	}
}

// start starts a run of tool under id on the attached host, and returns
// the host; a run that exists already is not an error.
func (l *Loop) start(ctx context.Context, tool string, input json.RawMessage, id string) (*host.Host, error) {
	var stale *host.Host
	for {
		h, err := l.hostOtherThan(ctx, stale)
		if err != nil {
			return nil, err
		}
		_, err = h.Start(ctx, tool, input, &host.CallOptions{RunID: id})
		switch {
		case errors.Is(err, host.ErrClosed):
			stale = h
			continue
		case err == nil, errors.Is(err, host.ErrRunExists):
			return h, nil
		}
		return h, err
	}
}

func (l *Loop) agent(name string) (*LoopAgent, bool) {
	for i := range l.List {
		if l.List[i].Name == name {
			return &l.List[i], true
		}
	}
	return nil, false
}

// Agents implements host.AgentBackend.
func (l *Loop) Agents(context.Context) ([]host.AgentInfo, error) {
	out := make([]host.AgentInfo, len(l.List))
	for i, a := range l.List {
		out[i] = host.AgentInfo{Name: a.Name, Description: a.Description}
	}
	return out, nil
}

// loopInput is the input of a turn's run.
type loopInput struct {
	Message      string          `json:"message"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	History      []exchange      `json:"history,omitempty"`
	// Delegated marks a turn another loop agent sent (its tool call).
	Delegated bool `json:"delegated,omitempty"`
}

// exchange is an earlier turn of the session: what was sent, the reply,
// and the approvals given during it, signed.
type exchange struct {
	Messages  []string   `json:"messages,omitempty"`
	Reply     string     `json:"reply,omitempty"`
	Approvals []Approval `json:"approvals,omitempty"`
}

// loopResult is the result of a turn's run.
type loopResult struct {
	Reply string          `json:"reply"`
	Data  json.RawMessage `json:"data,omitempty"`
	Usage Usage           `json:"usage"`
	Steps int             `json:"steps"`
	// Stop says why the loop ended: "answered", "step_limit",
	// "tool_called" or "stop_when".
	Stop string `json:"stop"`
	// Approvals are the calls a person approved, signed, for a later
	// turn's history.
	Approvals []Approval `json:"approvals,omitempty"`
}

// Usage is the tokens a turn's model calls used, summed.
type Usage struct {
	PromptTokens     int64 `json:"promptTokens"`
	CompletionTokens int64 `json:"completionTokens"`
	TotalTokens      int64 `json:"totalTokens"`
}

func (u *Usage) add(v Usage) {
	u.PromptTokens += v.PromptTokens
	u.CompletionTokens += v.CompletionTokens
	u.TotalTokens += v.TotalTokens
}

// TurnRunID is the id of the run a loop agent's turn runs as, for the
// turn's host.AgentTurn.TurnID (the sending run's id and the agent op's
// position, "runID:position"): stable across a retried delivery of the
// turn, so a turn sent again after a restart finds its run, and a view of
// the sending run can link it.
func TurnRunID(turnID string) string { return runIDFrom(turnRunPrefix, turnID) }

// stepRunID is the id of the run a loop agent's tool call starts, for the
// step that makes it (stepID is the host's, "runID:position"); a call to
// an agent sends the turn delegatedTurnPrefix+stepRunID instead.
func stepRunID(runID, stepID string) string { return runIDFrom("", runID+"."+stepID) }

// StepRunIDs are the ids of the runs a step of a loop agent's turn run
// may have started, for the run's id and the step op's position: the
// run of the tool it called, and the run of the turn it sent, when the
// tool is another loop agent. A view of the turn's run can link them.
func StepRunIDs(runID string, op uint32) []string {
	id := stepRunID(runID, fmt.Sprintf("%s:%d", runID, op))
	return []string{id, TurnRunID(delegatedTurnPrefix + id)}
}

// turnRunPrefix begins the id of every turn's run; delegatedTurnPrefix
// the turn id of a turn a loop agent sends another as its tool call.
const (
	turnRunPrefix       = "agent."
	delegatedTurnPrefix = "delegated."
)

// runIDFrom makes a run id of prefix and key: the key's characters that a
// run id may not hold become '_', and a key too long is hashed.
func runIDFrom(prefix, key string) string {
	id := prefix + strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r == ':' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, key)
	if len(id) > 128 {
		sum := sha256.Sum256([]byte(key))
		id = prefix + hex.EncodeToString(sum[:20])
	}
	return id
}

// Turn implements host.AgentBackend: it starts the turn's run (or finds
// it, for a turn sent again) and waits for it to end.
func (l *Loop) Turn(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
	a, ok := l.agent(t.Agent)
	if !ok {
		return failed(abi.AgentErrUnavailable, "no agent is called %q", t.Agent), nil
	}
	msg := t.Message
	for _, p := range t.Parts {
		if p.Text != "" {
			msg += p.Text
		}
	}
	for _, m := range t.More {
		msg += "\n\n" + m.Message
	}
	li := loopInput{Message: msg, OutputSchema: t.OutputSchema, Delegated: strings.HasPrefix(t.TurnID, delegatedTurnPrefix)}
	for _, x := range t.History {
		e := exchange{Reply: x.Reply}
		for _, m := range x.Messages {
			e.Messages = append(e.Messages, m.Message)
		}
		li.History = append(li.History, e)
	}
	in, err := json.Marshal(li)
	if err != nil {
		return abi.AgentResult{}, err
	}
	id := TurnRunID(t.TurnID)
	if a.TurnTimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(a.TurnTimeoutSeconds)*time.Second)
		defer cancel()
	}
	h, err := l.start(ctx, LoopToolName(a.Name), in, id)
	if err != nil {
		if ctx.Err() != nil {
			return abi.AgentResult{}, err
		}
		return failed(abi.AgentErrFailed, "agent %s: starting the turn: %v", t.Agent, err), nil
	}
	ri, err := waitRun(ctx, h, id)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && a.TurnTimeoutSeconds > 0 {
			_, _ = h.Cancel(context.WithoutCancel(ctx), id, "the turn timed out")
		}
		return abi.AgentResult{}, err
	}
	switch ri.Status {
	case store.StatusCompleted:
	case store.StatusCancelled:
		return abi.AgentResult{Status: abi.AgentCancelled}, nil
	default:
		code, msg := abi.AgentErrFailed, "the turn failed"
		if ri.Error != nil {
			msg = ri.Error.Message
			if ri.Error.Type == abi.AgentErrBadOutput {
				code = abi.AgentErrBadOutput
			}
		}
		return failed(code, "agent %s: %s", t.Agent, msg), nil
	}
	var r loopResult
	if err := json.Unmarshal(ri.Result, &r); err != nil {
		return failed(abi.AgentErrFailed, "agent %s: the turn's result: %v", t.Agent, err), nil
	}
	return abi.AgentResult{Status: abi.AgentCompleted, Reply: r.Reply, Data: r.Data}, nil
}

// waitRun drives a run and waits until it ends.
func waitRun(ctx context.Context, h *host.Host, id string) (host.RunInfo, error) {
	changed, stop := h.Watch(id)
	defer stop()
	ri, err := h.Drive(ctx, id)
	for err == nil && !ri.Status.Terminal() {
		select {
		case <-changed:
		case <-ctx.Done():
			return ri, ctx.Err()
		}
		ri, err = h.Run(ctx, id)
	}
	return ri, err
}
