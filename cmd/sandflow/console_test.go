package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
	"github.com/sandflow/sandflow/internal/testhost"
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
	handler, stop, err := withConsole(h, nil, api, api.Sessions(), cfg, nil)
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

// TestWithConsoleShowsTheAPIsSessions: serve's console shows the sessions
// the API made (one session manager, shared), with the runs of their
// calls linked.
func TestWithConsoleShowsTheAPIsSessions(t *testing.T) {
	th := testhost.New(t, nil)
	th.AddJS("upper", `defineWorkflowTool({ description: "upper-cases text",
  inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  async execute({ text }) { "use workflow"; return text.toUpperCase(); } });`)
	const token = "api-token-for-console-test"
	cfg := httpapi.Config{APITokens: []string{token}}
	api, err := httpapi.New(th.H, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.Close(context.Background()) }) // before the host closes
	handler, stop, err := withConsole(th.H, nil, api, api.Sessions(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(context.Background()) })
	srv := testhost.Serve(t, handler)

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/sessions/conv-api/calls", strings.NewReader(`{"tool":"upper","input":{"text":"abc"}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var call struct{ Status, RunID string }
	err = json.NewDecoder(resp.Body).Decode(&call)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || call.Status != "completed" || call.RunID == "" {
		t.Fatalf("session call: %s %+v %v", resp.Status, call, err)
	}

	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar}
	if resp, err := cl.PostForm(srv.URL+"/console/login", url.Values{"token": {token}}); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	get := func(path string) string {
		resp, err := cl.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, b)
		}
		return string(b)
	}
	if body := get("/console/sessions"); !strings.Contains(body, `href="/console/sessions/conv-api"`) {
		t.Errorf("the console's sessions page does not list the API's session\n%s", body)
	}
	body := get("/console/sessions/conv-api")
	for _, want := range []string{`data-event="call.started"`, `data-event="call.settled"`, `href="/console/runs/` + call.RunID + `"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the session page lacks %s\n%s", want, body)
		}
	}
}
