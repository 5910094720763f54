// Package agents provides backends for the agent turns runs make
// (ctx.agent): scripted agents with canned or rule-based replies, for demos
// and tests that run offline; an OpenAI-compatible chat-completions client;
// external fulfilment, where turns become work items a platform claims and
// completes; and Mux, which routes each turn to its agent's backend. An
// application that embeds sandflow can also give the host a Go function
// (host.AgentFunc).
//
// Load reads an agents file:
//
//	{"openai": {"baseURL": "https://api.example.com/v1", "model": "some-model", "apiKeyEnv": "OPENAI_API_KEY"},
//	 "agents": [
//	   {"name": "ticket-triage", "description": "sorts tickets", "reply": "triaged {message}"},
//	   {"name": "reviewer", "kind": "openai", "instructions": "Review what you are sent."},
//	   {"name": "helper", "kind": "loop", "instructions": "Use the tools.", "tools": [{"tool": "render"}], "maxSteps": 10},
//	   {"name": "researcher", "kind": "external", "description": "run by the platform"}]}
//
// An agent's kind is "scripted" (the default), "openai", "loop" (a tool
// loop on the "openai" settings' model: see Loop) or "external".
// The file never holds a key: the OpenAI backend reads it from the
// environment variable apiKeyEnv names.
package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
)

// Mux routes each turn to the backend that has its agent.
type Mux struct {
	list   []host.AgentInfo
	byName map[string]host.AgentBackend
}

var _ host.AgentBackend = (*Mux)(nil)

// NewMux makes a Mux of backends; an agent name in two backends is an
// error.
func NewMux(ctx context.Context, backends ...host.AgentBackend) (*Mux, error) {
	m := &Mux{byName: map[string]host.AgentBackend{}}
	for _, b := range backends {
		list, err := b.Agents(ctx)
		if err != nil {
			return nil, err
		}
		for _, a := range list {
			if m.byName[a.Name] != nil {
				return nil, fmt.Errorf("agent %q is listed twice", a.Name)
			}
			m.byName[a.Name] = b
			m.list = append(m.list, a)
		}
	}
	return m, nil
}

// Agents implements host.AgentBackend.
func (m *Mux) Agents(context.Context) ([]host.AgentInfo, error) { return m.list, nil }

// Turn implements host.AgentBackend.
func (m *Mux) Turn(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
	b := m.byName[t.Agent]
	if b == nil {
		return failed(abi.AgentErrUnavailable, "no agent is called %q", t.Agent), nil
	}
	return b.Turn(ctx, t)
}

// File is the content of an agents file.
type File struct {
	OpenAI *OpenAIConfig `json:"openai,omitempty"`
	Agents []FileAgent   `json:"agents"`
}

// OpenAIConfig configures the OpenAI backend of an agents file.
type OpenAIConfig struct {
	BaseURL        string `json:"baseURL,omitempty"`
	Model          string `json:"model,omitempty"`
	APIKeyEnv      string `json:"apiKeyEnv,omitempty"`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty"`
	MaxRetries     int    `json:"maxRetries,omitempty"`
}

func (c *OpenAIConfig) endpoint() Endpoint {
	return Endpoint{BaseURL: c.BaseURL, APIKeyEnv: c.APIKeyEnv, MaxRetries: c.MaxRetries}
}

// FileAgent is one agent of an agents file. Kind picks its backend; the
// other fields are those of that backend's agents.
type FileAgent struct {
	Kind string `json:"kind,omitempty"`
	ScriptedAgent
	Instructions string `json:"instructions,omitempty"`
	Model        string `json:"model,omitempty"`
	// The settings of a loop agent (LoopAgent's).
	Tools               []LoopTool       `json:"tools,omitempty"`
	MaxSteps            int              `json:"maxSteps,omitempty"`
	StopWhenToolCalled  []string         `json:"stopWhenToolCalled,omitempty"`
	ToolCallConcurrency int              `json:"toolCallConcurrency,omitempty"`
	ModelTimeoutSeconds int              `json:"modelTimeoutSeconds,omitempty"`
	TurnTimeoutSeconds  int              `json:"turnTimeoutSeconds,omitempty"`
	ModelRetry          *abi.RetryPolicy `json:"modelRetry,omitempty"`
	Stream              bool             `json:"stream,omitempty"`
}

func (a *FileAgent) loopAgent() LoopAgent {
	return LoopAgent{Name: a.Name, Description: a.Description, Instructions: a.Instructions, Model: a.Model, Tools: a.Tools,
		MaxSteps: a.MaxSteps, StopWhenToolCalled: a.StopWhenToolCalled, ToolCallConcurrency: a.ToolCallConcurrency,
		ModelTimeoutSeconds: a.ModelTimeoutSeconds, TurnTimeoutSeconds: a.TurnTimeoutSeconds, ModelRetry: a.ModelRetry, Stream: a.Stream}
}

func (a *FileAgent) hasLoopSettings() bool {
	return len(a.Tools) > 0 || a.MaxSteps != 0 || len(a.StopWhenToolCalled) > 0 || a.ToolCallConcurrency != 0 ||
		a.ModelTimeoutSeconds != 0 || a.TurnTimeoutSeconds != 0 || a.ModelRetry != nil || a.Stream
}

// Backends are what an agents file configures: the backend the host uses,
// and the external backend (nil when no agent is external), which the HTTP
// API serves work items from.
type Backends struct {
	host.AgentBackend
	External *External
	// Loop runs the loop agents (nil when there are none): the host needs
	// its engine (Loop.Engine) and must be attached (Loop.Attach).
	Loop *Loop
}

// Load reads an agents file.
func Load(ctx context.Context, path string) (*Backends, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, err := Parse(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// Parse reads the content of an agents file.
func Parse(ctx context.Context, raw []byte) (*Backends, error) {
	var f File
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	var scripted []ScriptedAgent
	var external []host.AgentInfo
	var oa *OpenAI
	var loop *Loop
	for _, a := range f.Agents {
		kind := a.Kind
		if kind == "" {
			kind = "scripted"
		}
		if kind != "scripted" && (a.Reply != "" || a.Data != nil || a.Fail != "" || a.DelayMs != 0 || len(a.Rules) > 0) {
			return nil, fmt.Errorf("agent %s: reply, data, fail, delayMs and rules are for scripted agents, not %s ones", a.Name, kind)
		}
		if kind != "openai" && kind != "loop" && (a.Instructions != "" || a.Model != "") {
			return nil, fmt.Errorf("agent %s: instructions and model are for openai and loop agents, not %s ones", a.Name, kind)
		}
		if kind != "loop" && a.hasLoopSettings() {
			return nil, fmt.Errorf("agent %s: tools, maxSteps, stopWhenToolCalled, toolCallConcurrency, the timeouts, modelRetry and stream are for loop agents, not %s ones", a.Name, kind)
		}
		switch kind {
		case "scripted":
			scripted = append(scripted, a.ScriptedAgent)
		case "external":
			external = append(external, host.AgentInfo{Name: a.Name, Description: a.Description})
		case "openai":
			if f.OpenAI == nil {
				return nil, fmt.Errorf("agent %s is an openai agent, but the file has no \"openai\" settings", a.Name)
			}
			if oa == nil {
				c := f.OpenAI
				oa = &OpenAI{Endpoint: c.endpoint(), Model: c.Model, Timeout: time.Duration(c.TimeoutSeconds) * time.Second}
			}
			oa.List = append(oa.List, OpenAIAgent{Name: a.Name, Description: a.Description, Instructions: a.Instructions, Model: a.Model})
		case "loop":
			if f.OpenAI == nil {
				return nil, fmt.Errorf("agent %s is a loop agent, but the file has no \"openai\" settings for its model", a.Name)
			}
			la := a.loopAgent()
			if err := la.check(); err != nil {
				return nil, err
			}
			if loop == nil {
				loop = &Loop{Endpoint: f.OpenAI.endpoint(), Model: f.OpenAI.Model}
			}
			loop.List = append(loop.List, la)
		default:
			return nil, fmt.Errorf("agent %s: kind %q is not scripted, openai, loop or external", a.Name, a.Kind)
		}
	}
	s, err := NewScripted(scripted)
	if err != nil {
		return nil, err
	}
	backends := []host.AgentBackend{s}
	out := &Backends{}
	if oa != nil {
		backends = append(backends, oa)
	}
	if loop != nil {
		out.Loop = loop
		backends = append(backends, loop)
	}
	if len(external) > 0 {
		out.External = NewExternal(external)
		backends = append(backends, out.External)
	}
	mux, err := NewMux(ctx, backends...)
	if err != nil {
		return nil, err
	}
	out.AgentBackend = mux
	if loop != nil {
		loop.Delegates = mux
	}
	return out, nil
}
