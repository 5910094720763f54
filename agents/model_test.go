package agents

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
)

// A provider's error answer is a *ProviderError with its status, code and
// whether it is worth retrying; 5xx is retried MaxRetries times, 400 is
// not retried.
func TestProviderError(t *testing.T) {
	for _, tc := range []struct {
		status    int
		body      string
		code      string
		retryable bool
		requests  int32
	}{
		{503, `{"error": {"message": "overloaded", "type": "server_error", "code": "overloaded"}}`, "overloaded", true, 2},
		{400, `{"error": {"message": "bad model", "type": "invalid_request_error", "code": "model_not_found"}}`, "model_not_found", false, 1},
	} {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After-Ms", "1")
			w.WriteHeader(tc.status)
			io.WriteString(w, tc.body)
		}))
		e := &Endpoint{BaseURL: srv.URL + "/v1", APIKeyEnv: "SANDFLOW_TEST_NO_KEY", MaxRetries: 1}
		_, err := e.complete(context.Background(), openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}, "k")
		srv.Close()
		var pe *ProviderError
		if !errors.As(err, &pe) {
			t.Fatalf("%d: error %v is not a *ProviderError", tc.status, err)
		}
		if pe.Status != tc.status || pe.Code != tc.code || pe.Retryable != tc.retryable || pe.Message == "" {
			t.Errorf("%d: %+v", tc.status, pe)
		}
		if got := n.Load(); got != tc.requests {
			t.Errorf("%d: %d requests, want %d", tc.status, got, tc.requests)
		}
	}
}
