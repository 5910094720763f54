package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
)

// TestWithConsoleRoutesAndCounts: serve's handler puts the console, the
// health checks and /metrics beside the API, and counts API requests by
// their route.
func TestWithConsoleRoutesAndCounts(t *testing.T) {
	h, err := host.OpenDir(context.Background(), filepath.Join(t.TempDir(), "data"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	cfg := httpapi.Config{APITokens: []string{"api-token-for-console-test"}, AdminTokens: []string{"admin-token-for-console-test"}}
	api, err := httpapi.New(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close(context.Background())
	handler, stop, err := withConsole(h, nil, api, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	srv := httptest.NewServer(handler)
	defer srv.Close()
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		path, token string
		code        int
	}{
		{"/healthz", "", 200}, {"/readyz", "", 200}, {"/console/inbox", "", 303}, {"/console/login", "", 200},
		{"/v1/tools", "", 401}, {"/v1/tools", "api-token-for-console-test", 200}, {"/v1/tools", "api-token-for-console-test", 200},
	} {
		if code, body := get(c.path, c.token); code != c.code {
			t.Errorf("GET %s: %d %s, want %d", c.path, code, body, c.code)
		}
	}
	_, metrics := get("/metrics", "")
	for _, want := range []string{
		`sandflow_http_requests_total{code="200",method="GET",route="GET /v1/tools"} 2`,
		`sandflow_http_requests_total{code="401",method="GET",route="GET /v1/tools"} 1`,
		`sandflow_http_requests_total{code="303",method="GET",route="GET /console/inbox"} 1`,
		`sandflow_http_requests_total{code="200",method="GET",route="GET /healthz"} 1`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
