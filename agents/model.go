package agents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// ProviderError is a model provider's answer that is not a completion: its
// HTTP status, the error body's code and type (empty when the body has
// none), its message, and whether sending the request again may succeed
// (429 and 5xx).
type ProviderError struct {
	Status    int
	Code      string
	Type      string
	Message   string
	Retryable bool
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("the provider answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Endpoint is an OpenAI-compatible chat-completions API.
type Endpoint struct {
	// BaseURL is the API's base, such as https://api.openai.com/v1; empty
	// means the OPENAI_BASE_URL environment variable.
	BaseURL string
	// APIKeyEnv names the environment variable that holds the API key
	// (OPENAI_API_KEY when empty). The key is read for each request and
	// never stored. An empty key sends no Authorization header (a local
	// server, say).
	APIKeyEnv string
	// MaxRetries is how many times a request that failed with 429, a 5xx,
	// or a broken connection is sent again (2 when zero; -1 for none).
	MaxRetries int
	// Client makes the requests; nil means http.DefaultClient.
	Client *http.Client
}

const (
	defaultOpenAIRetries = 2
	// maxResponseBytes bounds a response body read from the API.
	maxResponseBytes = 16 << 20
)

// errNoBaseURL is a backend without a base URL.
var errNoBaseURL = errors.New("the OpenAI backend has no base URL (set it, or OPENAI_BASE_URL)")

// client is the official client for the endpoint (which retries 429,
// 5xx and broken connections with backoff, honouring Retry-After).
// idempotencyKey names the request to the provider, so a retry is not
// billed twice.
func (e *Endpoint) client(idempotencyKey string) (openai.Client, error) {
	base := strings.TrimRight(e.BaseURL, "/")
	if base == "" {
		base = strings.TrimRight(os.Getenv("OPENAI_BASE_URL"), "/")
	}
	if base == "" {
		return openai.Client{}, errNoBaseURL
	}
	retries := e.MaxRetries
	if retries == 0 {
		retries = defaultOpenAIRetries
	}
	retries = max(retries, 0)
	hc := e.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	envName := e.APIKeyEnv
	if envName == "" {
		envName = "OPENAI_API_KEY"
	}
	key := os.Getenv(envName)
	return openai.NewClient(
		option.WithBaseURL(base+"/"),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(retries),
		option.WithAPIKey(key),
		option.WithHeader("Idempotency-Key", idempotencyKey),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			if key == "" {
				req.Header.Del("Authorization")
			}
			resp, err := next(req)
			if err == nil && resp.Body != nil {
				resp.Body = &limitedBody{ReadCloser: resp.Body, left: maxResponseBytes}
			}
			return resp, err
		}),
	), nil
}

// complete sends one chat-completions request. A provider's error answer
// is a *ProviderError; a cancelled or expired ctx returns an error
// wrapping ctx's error.
func (e *Endpoint) complete(ctx context.Context, params openai.ChatCompletionNewParams, idempotencyKey string) (*openai.ChatCompletion, error) {
	client, err := e.client(idempotencyKey)
	if err != nil {
		return nil, err
	}
	out, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		return nil, providerError(ctx, err)
	}
	return out, nil
}

// stream sends one chat-completions request with streaming, gives
// onDelta each piece of the reply's text as it arrives, and returns the
// completion the pieces add up to (usage included), with complete's
// errors. A stream cut before its end is an error: what arrived is not
// a completion.
func (e *Endpoint) stream(ctx context.Context, params openai.ChatCompletionNewParams, idempotencyKey string, onDelta func(string)) (*openai.ChatCompletion, error) {
	client, err := e.client(idempotencyKey)
	if err != nil {
		return nil, err
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := client.Chat.Completions.NewStreaming(ctx, params)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	finished := false
	for s.Next() {
		chunk := s.Current()
		if !acc.AddChunk(chunk) {
			return nil, errors.New("the provider's stream did not add up to one completion")
		}
		for _, c := range chunk.Choices {
			if c.Index == 0 && c.Delta.Content != "" {
				onDelta(c.Delta.Content)
			}
			finished = finished || c.FinishReason != ""
		}
	}
	if err := s.Err(); err != nil {
		return nil, providerError(ctx, err)
	}
	if !finished {
		return nil, errors.New("the provider's stream ended before the reply did")
	}
	return &acc.ChatCompletion, nil
}

// providerError is the error of a failed request: a *ProviderError for
// the provider's error answer, one wrapping ctx's error when ctx ended.
func providerError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%v: %w", err, ctx.Err())
	}
	var ae *openai.Error
	if errors.As(err, &ae) {
		msg := ae.Message
		if msg == "" {
			msg = ae.RawJSON()
		}
		if len(msg) > 500 {
			msg = msg[:500] + "..."
		}
		return &ProviderError{Status: ae.StatusCode, Code: ae.Code, Type: ae.Type, Message: msg,
			Retryable: ae.StatusCode == http.StatusTooManyRequests || ae.StatusCode >= 500}
	}
	return err
}

// limitedBody fails a read past its limit, so a provider cannot make the
// host buffer an unbounded answer.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("the response is over %d bytes", maxResponseBytes)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, fmt.Errorf("the response is over %d bytes", maxResponseBytes)
	}
	return n, err
}

// durationOr is d, or def when d is not positive.
func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
