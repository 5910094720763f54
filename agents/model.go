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

// complete sends one chat-completions request with the official client
// (which retries 429, 5xx and broken connections with backoff, honouring
// Retry-After). idempotencyKey names the request to the provider, so a
// retry is not billed twice. A provider's error answer is a
// *ProviderError; a cancelled or expired ctx returns an error wrapping
// ctx's error.
func (e *Endpoint) complete(ctx context.Context, params openai.ChatCompletionNewParams, idempotencyKey string) (*openai.ChatCompletion, error) {
	base := strings.TrimRight(e.BaseURL, "/")
	if base == "" {
		base = strings.TrimRight(os.Getenv("OPENAI_BASE_URL"), "/")
	}
	if base == "" {
		return nil, errNoBaseURL
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
	client := openai.NewClient(
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
	)
	out, err := client.Chat.Completions.New(ctx, params)
	if err == nil {
		return out, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%v: %w", err, ctx.Err())
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
		return nil, &ProviderError{Status: ae.StatusCode, Code: ae.Code, Type: ae.Type, Message: msg,
			Retryable: ae.StatusCode == http.StatusTooManyRequests || ae.StatusCode >= 500}
	}
	return nil, err
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
