package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
)

// OpenAI runs agent turns with an OpenAI-compatible chat-completions API:
// each turn is one request with the agent's instructions as the system
// message and the turn's message as the user message. An output schema is
// sent as a JSON-schema response format, and the reply's JSON becomes the
// turn's structured data (which the host validates against the schema).
type OpenAI struct {
	// BaseURL is the API's base, such as https://api.openai.com/v1; empty
	// means the OPENAI_BASE_URL environment variable.
	BaseURL string
	// Model is the default model; an agent may name its own.
	Model string
	// APIKeyEnv names the environment variable that holds the API key
	// (OPENAI_API_KEY when empty). The key is read for each request and
	// never stored. An empty key sends no Authorization header (a local
	// server, say).
	APIKeyEnv string
	// Timeout bounds one turn, retries included (2 minutes when zero).
	Timeout time.Duration
	// MaxRetries is how many times a request that failed with 429, a 5xx,
	// or a broken connection is sent again (2 when zero; -1 for none).
	MaxRetries int
	// Client makes the requests; nil means a client of its own.
	Client *http.Client
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

// Default limits of the OpenAI backend.
const (
	defaultOpenAITimeout = 2 * time.Minute
	defaultOpenAIRetries = 2
	// maxResponseBytes bounds a response body read from the API.
	maxResponseBytes = 16 << 20
)

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

// chatRequest is the body of a chat-completions request.
type chatRequest struct {
	Model          string          `json:"model"`
	Messages       []chatMessage   `json:"messages"`
	ResponseFormat *responseFormat `json:"response_format,omitempty"`
	User           string          `json:"user,omitempty"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type responseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *jsonSchema `json:"json_schema,omitempty"`
}

type jsonSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict"`
}

// chatResponse is what this backend reads of a response.
type chatResponse struct {
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
			Refusal string  `json:"refusal"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
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
	base := strings.TrimRight(o.BaseURL, "/")
	if base == "" {
		base = strings.TrimRight(os.Getenv("OPENAI_BASE_URL"), "/")
	}
	if base == "" {
		return failed(abi.AgentErrUnavailable, "agent %s: the OpenAI backend has no base URL (set it, or OPENAI_BASE_URL)", t.Agent), nil
	}
	model := a.Model
	if model == "" {
		model = o.Model
	}
	if model == "" {
		return failed(abi.AgentErrUnavailable, "agent %s: no model is configured", t.Agent), nil
	}
	req := chatRequest{Model: model, User: t.RunID}
	if a.Instructions != "" {
		req.Messages = append(req.Messages, chatMessage{Role: "system", Content: a.Instructions})
	}
	req.Messages = append(req.Messages, chatMessage{Role: "user", Content: t.Message})
	if len(t.OutputSchema) > 0 {
		req.ResponseFormat = &responseFormat{Type: "json_schema", JSONSchema: &jsonSchema{Name: "output", Schema: t.OutputSchema}}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return failed(abi.AgentErrFailed, "agent %s: encoding the request: %v", t.Agent, err), nil
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = defaultOpenAITimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := o.send(ctx, base+"/chat/completions", t.TurnID, body)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return abi.AgentResult{}, fmt.Errorf("agent %s: no answer within %s: %w", t.Agent, timeout, err)
		}
		if ctx.Err() != nil {
			return abi.AgentResult{}, ctx.Err()
		}
		return failed(abi.AgentErrFailed, "agent %s: %v", t.Agent, err), nil
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
	case c.Message.Content == nil:
		return failed(abi.AgentErrFailed, "agent %s: the reply has no text", t.Agent), nil
	}
	res := abi.AgentResult{Status: abi.AgentCompleted, Reply: *c.Message.Content}
	if len(t.OutputSchema) > 0 {
		text := strings.TrimSpace(res.Reply)
		if !json.Valid([]byte(text)) {
			return failed(abi.AgentErrBadOutput, "agent %s: the structured reply is not JSON: %.200s", t.Agent, text), nil
		}
		res.Data = json.RawMessage(text)
	}
	return res, nil
}

// send posts body, retrying what is worth retrying, and decodes the
// answer.
func (o *OpenAI) send(ctx context.Context, url, turnID string, body []byte) (*chatResponse, error) {
	retries := o.MaxRetries
	if retries == 0 {
		retries = defaultOpenAIRetries
	}
	client := o.Client
	if client == nil {
		client = http.DefaultClient
	}
	envName := o.APIKeyEnv
	if envName == "" {
		envName = "OPENAI_API_KEY"
	}
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", turnID)
		if key := os.Getenv(envName); key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		out, retryAfter, err := o.once(client, req)
		if err == nil {
			return out, nil
		}
		if retryAfter < 0 || attempt >= retries || ctx.Err() != nil {
			return nil, err
		}
		wait := max(retryAfter, time.Duration(500<<attempt)*time.Millisecond)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, fmt.Errorf("%v; %w", err, ctx.Err())
		}
	}
}

// once makes one request. retryAfter is -1 when the failure is not worth
// retrying, else the delay the provider asked for (or 0).
func (o *OpenAI) once(client *http.Client, req *http.Request) (*chatResponse, time.Duration, error) {
	resp, err := client.Do(req)
	if err != nil {
		if req.Context().Err() != nil {
			return nil, -1, req.Context().Err()
		}
		return nil, 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		if req.Context().Err() != nil {
			return nil, -1, req.Context().Err()
		}
		return nil, 0, fmt.Errorf("reading the response: %w", err)
	}
	if len(raw) > maxResponseBytes {
		return nil, -1, fmt.Errorf("the response is over %d bytes", maxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(raw))
		var ae apiError
		if json.Unmarshal(raw, &ae) == nil && ae.Error.Message != "" {
			msg = ae.Error.Message
		}
		if len(msg) > 500 {
			msg = msg[:500] + "..."
		}
		err := fmt.Errorf("the provider answered %s: %s", resp.Status, msg)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			var after time.Duration
			if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
				after = time.Duration(s) * time.Second
			}
			return nil, after, err
		}
		return nil, -1, err
	}
	var out chatResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, -1, fmt.Errorf("the response is not a chat completion: %v", err)
	}
	return &out, 0, nil
}

func failed(code, format string, args ...any) abi.AgentResult {
	return abi.AgentResult{Status: abi.AgentFailed, Error: &abi.AgentError{Code: code, Message: fmt.Sprintf(format, args...)}}
}
