package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
)

// OpenAI runs agent turns with an OpenAI-compatible chat-completions API:
// each turn is one request with the agent's instructions as the system
// message and the turn's message as the user message. An output schema is
// sent as a JSON-schema response format, and the reply's JSON becomes the
// turn's structured data (which the host validates against the schema).
type OpenAI struct {
	// Endpoint is the API the requests go to.
	Endpoint
	// Model is the default model; an agent may name its own.
	Model string
	// Timeout bounds one turn, retries included (2 minutes when zero).
	Timeout time.Duration
	// List holds the agents this backend runs.
	List []OpenAIAgent
}

// OpenAIAgent is one agent of an OpenAI backend.
type OpenAIAgent struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Instructions are the system message.
	Instructions string `json:"instructions,omitempty"`
	// Model overrides the backend's model.
	Model string `json:"model,omitempty"`
}

// defaultOpenAITimeout bounds a turn of the OpenAI backend.
const defaultOpenAITimeout = 2 * time.Minute

var _ host.AgentBackend = (*OpenAI)(nil)

// Agents implements host.AgentBackend.
func (o *OpenAI) Agents(context.Context) ([]host.AgentInfo, error) {
	out := make([]host.AgentInfo, len(o.List))
	for i, a := range o.List {
		out[i] = host.AgentInfo{Name: a.Name, Description: a.Description}
	}
	return out, nil
}

func (o *OpenAI) agent(name string) (OpenAIAgent, bool) {
	for _, a := range o.List {
		if a.Name == name {
			return a, true
		}
	}
	return OpenAIAgent{}, false
}

// responseFormat is the JSON-schema response format of an output schema.
func responseFormat(schema json.RawMessage) openai.ChatCompletionNewParamsResponseFormatUnion {
	return openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "output", Schema: schema, Strict: openai.Bool(false)}}}
}

// Turn implements host.AgentBackend. A provider error, a refusal or a cut
// reply is a failed turn that says so; a turn over Timeout returns an
// error wrapping context.DeadlineExceeded, which the host reports as
// agent_timeout.
func (o *OpenAI) Turn(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
	a, ok := o.agent(t.Agent)
	if !ok {
		return failed(abi.AgentErrUnavailable, "no agent is called %q", t.Agent), nil
	}
	model := a.Model
	if model == "" {
		model = o.Model
	}
	if model == "" {
		return failed(abi.AgentErrUnavailable, "agent %s: no model is configured", t.Agent), nil
	}
	params := openai.ChatCompletionNewParams{Model: model, User: openai.String(t.RunID)}
	if a.Instructions != "" {
		params.Messages = append(params.Messages, openai.SystemMessage(a.Instructions))
	}
	params.Messages = append(params.Messages, openai.UserMessage(t.Message))
	if len(t.OutputSchema) > 0 {
		params.ResponseFormat = responseFormat(t.OutputSchema)
	}
	timeout := durationOr(o.Timeout, defaultOpenAITimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := o.complete(ctx, params, t.TurnID)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return abi.AgentResult{}, fmt.Errorf("agent %s: no answer within %s: %w", t.Agent, timeout, err)
		}
		if ctx.Err() != nil {
			return abi.AgentResult{}, ctx.Err()
		}
		code := abi.AgentErrFailed
		if errors.Is(err, errNoBaseURL) {
			code = abi.AgentErrUnavailable
		}
		return failed(code, "agent %s: %v", t.Agent, err), nil
	}
	if len(resp.Choices) == 0 {
		return failed(abi.AgentErrFailed, "agent %s: the provider answered with no choices", t.Agent), nil
	}
	c := resp.Choices[0]
	switch {
	case c.Message.Refusal != "":
		return failed(abi.AgentErrFailed, "agent %s refused: %s", t.Agent, c.Message.Refusal), nil
	case c.FinishReason == "length":
		return failed(abi.AgentErrFailed, "agent %s: the reply was cut at the model's output limit", t.Agent), nil
	case c.FinishReason == "content_filter":
		return failed(abi.AgentErrFailed, "agent %s: the provider's content filter stopped the reply", t.Agent), nil
	case !c.Message.JSON.Content.Valid():
		return failed(abi.AgentErrFailed, "agent %s: the reply has no text", t.Agent), nil
	}
	res := abi.AgentResult{Status: abi.AgentCompleted, Reply: c.Message.Content}
	if len(t.OutputSchema) > 0 {
		text := strings.TrimSpace(res.Reply)
		if !json.Valid([]byte(text)) {
			return failed(abi.AgentErrBadOutput, "agent %s: the structured reply is not JSON: %.200s", t.Agent, text), nil
		}
		res.Data = json.RawMessage(text)
	}
	return res, nil
}

func failed(code, format string, args ...any) abi.AgentResult {
	return abi.AgentResult{Status: abi.AgentFailed, Error: &abi.AgentError{Code: code, Message: fmt.Sprintf(format, args...)}}
}
