package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
)

// ScriptedAgent answers every turn from its configuration: the first rule
// whose pattern the message matches, else its own reply. It is for demos
// and tests that must run offline.
type ScriptedAgent struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Response
	// Rules are tried in order; the first that matches answers.
	Rules []Rule `json:"rules,omitempty"`
}

// Response is how a scripted agent answers.
type Response struct {
	// Reply is the reply text; {message} in it is replaced by the
	// message.
	Reply string `json:"reply,omitempty"`
	// Data is the structured output of a turn that asks for one.
	Data json.RawMessage `json:"data,omitempty"`
	// DelayMs delays the answer.
	DelayMs int `json:"delayMs,omitempty"`
	// Fail, when set, fails the turn with this message.
	Fail string `json:"fail,omitempty"`
}

// Rule answers the messages it matches.
type Rule struct {
	// Contains matches a message that contains it.
	Contains string `json:"contains,omitempty"`
	// Match is a regular expression (RE2) a message must match.
	Match string `json:"match,omitempty"`
	Response
	re *regexp.Regexp
}

// Scripted is a backend of scripted agents.
type Scripted struct {
	agents []ScriptedAgent
}

var _ host.AgentBackend = (*Scripted)(nil)

// NewScripted checks the agents (names, rules) and makes a backend of them.
func NewScripted(agents []ScriptedAgent) (*Scripted, error) {
	s := &Scripted{}
	for _, a := range agents {
		if a.Name == "" {
			return nil, fmt.Errorf("a scripted agent has no name")
		}
		for i := range a.Rules {
			r := &a.Rules[i]
			if r.Contains == "" && r.Match == "" {
				return nil, fmt.Errorf("agent %s: rule %d has neither contains nor match", a.Name, i+1)
			}
			if r.Match != "" {
				re, err := regexp.Compile(r.Match)
				if err != nil {
					return nil, fmt.Errorf("agent %s: rule %d: %v", a.Name, i+1, err)
				}
				r.re = re
			}
			if r.Data != nil && !json.Valid(r.Data) {
				return nil, fmt.Errorf("agent %s: rule %d: data is not JSON", a.Name, i+1)
			}
		}
		s.agents = append(s.agents, a)
	}
	return s, nil
}

// Agents implements host.AgentBackend.
func (s *Scripted) Agents(context.Context) ([]host.AgentInfo, error) {
	out := make([]host.AgentInfo, len(s.agents))
	for i, a := range s.agents {
		out[i] = host.AgentInfo{Name: a.Name, Description: a.Description}
	}
	return out, nil
}

// Turn implements host.AgentBackend.
func (s *Scripted) Turn(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
	var a *ScriptedAgent
	for i := range s.agents {
		if s.agents[i].Name == t.Agent {
			a = &s.agents[i]
		}
	}
	if a == nil {
		return failed(abi.AgentErrUnavailable, "no agent is called %q", t.Agent), nil
	}
	r := a.Response
	for _, rule := range a.Rules {
		if (rule.Contains == "" || strings.Contains(t.Message, rule.Contains)) && (rule.re == nil || rule.re.MatchString(t.Message)) {
			r = rule.Response
			break
		}
	}
	if r.DelayMs > 0 {
		select {
		case <-time.After(time.Duration(r.DelayMs) * time.Millisecond):
		case <-ctx.Done():
			return abi.AgentResult{}, ctx.Err()
		}
	}
	if r.Fail != "" {
		return failed(abi.AgentErrFailed, "%s", r.Fail), nil
	}
	res := abi.AgentResult{Status: abi.AgentCompleted, Reply: strings.ReplaceAll(r.Reply, "{message}", t.Message)}
	if len(t.OutputSchema) > 0 {
		res.Data = r.Data
	}
	return res, nil
}
