package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
	"github.com/sandflow/sandflow/session"
)

var (
	camelCase = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)
	snakeCode = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// userData are members whose values are the tool's or the caller's own
// JSON, in whatever casing they chose.
var userData = map[string]bool{"inputSchema": true, "outputSchema": true, "result": true, "data": true,
	"progress": true, "details": true, "input": true, "problems": true}

// camelKeys reports every member name in v, outside user data, that is
// not camelCase.
func camelKeys(path string, v any, bad *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			if !camelCase.MatchString(k) {
				*bad = append(*bad, path+"."+k)
			}
			if !userData[k] {
				camelKeys(path+"."+k, sub, bad)
			}
		}
	case []any:
		for _, sub := range v {
			camelKeys(path+"[]", sub, bad)
		}
	}
}

func checkCamel(t *testing.T, what string, body []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s: %v: %s", what, err, body)
	}
	var bad []string
	camelKeys("", v, &bad)
	if len(bad) > 0 {
		t.Errorf("%s: members not camelCase: %v\n%s", what, bad, body)
	}
}

// Every answer's members are camelCase: an upload, the plugin listings
// (which answered Name, Version, ModuleHash), tools, runs, questions and
// the events a run's log holds, and they are the same JSON as the event
// stream's (store.Event answered Seq, Time, Kind).
func TestAnswersAreCamelCase(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.upload(adminToken, guestWasm(t, "examples/deploy"), repoFile(t, "examples/deploy/manifest.json"))
	if r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	checkCamel(t, "upload", r.body)
	r = e.post("/v1/tools/deploy/calls?wait=30s", `{"service":"api"}`)
	var call runReply
	r.json(t, &call)
	if r.status != http.StatusOK {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	checkCamel(t, "call", r.body)
	for _, p := range []string{"/v1/plugins", "/v1/plugins/deploy", "/v1/tools", "/v1/runs", "/v1/runs/" + call.Run.ID, "/v1/asks"} {
		r := e.get(p)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", p, r.status, r.body)
		}
		checkCamel(t, "GET "+p, r.body)
	}

	// The stream's data lines are the log's events as encoding/json
	// writes them, which is what `runs show --json` prints.
	evs, err := e.h.Store().Events(context.Background(), call.Run.ID, 0, 100)
	if err != nil || len(evs) == 0 {
		t.Fatalf("events: %d, %v", len(evs), err)
	}
	resp := e.stream(call.Run.ID, 0)
	defer resp.Body.Close()
	got := readSSE(t, resp.Body, func(ev streamEvent) bool { return ev.id == evs[len(evs)-1].Seq })
	if len(got) != len(evs) {
		t.Fatalf("the stream has %d events, the log %d", len(got), len(evs))
	}
	for i, ev := range got {
		want, err := json.Marshal(evs[i])
		if err != nil {
			t.Fatal(err)
		}
		if ev.data != string(want) {
			t.Fatalf("event %d: the stream has %s, encoding/json %s", evs[i].Seq, ev.data, want)
		}
		checkCamel(t, "event", want)
	}
}

// Error codes are snake_case everywhere, the session's too (which were
// UNKNOWN_TASK, TOO_MANY_TASKS, BAD_REQUEST).
func TestErrorCodesAreSnakeCase(t *testing.T) {
	e := newEnv(t, nil, nil)
	if session.CodeUnknownTask != "unknown_task" || session.CodeTooManyTasks != "too_many_tasks" || session.CodeBadRequest != "bad_request" {
		t.Fatalf("session codes: %s %s %s", session.CodeUnknownTask, session.CodeTooManyTasks, session.CodeBadRequest)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/v1/sessions/no%20spaces/tools", "", http.StatusBadRequest, "bad_request"},
		{"POST", "/v1/sessions/s1/calls", `{"tool":"task_cancel","input":{"taskId":"deploy-zzzzzz"}}`, http.StatusNotFound, "unknown_task"},
		{"GET", "/v1/runs/nope", "", http.StatusNotFound, "not_found"},
		{"PUT", "/v1/runs/nope", "", http.StatusMethodNotAllowed, "method_not_allowed"},
	} {
		r := e.do(c.method, c.path, apiToken, strings.NewReader(c.body), "application/json")
		if got := r.code(t); r.status != c.status || got != c.code || !snakeCode.MatchString(got) {
			t.Errorf("%s %s: %d %s, want %d %s", c.method, c.path, r.status, got, c.status, c.code)
		}
	}
}

// A path served under other methods answers 405 with Allow, not 404; a
// path nothing serves is still 404.
func TestWrongMethodIs405(t *testing.T) {
	e := newEnv(t, nil, nil)
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"PUT", "/v1/runs/r1", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"GET", "/v1/plugins/deploy/versions/1", http.StatusMethodNotAllowed, "DELETE"},
		{"DELETE", "/v1/tools", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"GET", "/v1/tools/deploy/calls", http.StatusMethodNotAllowed, "POST"},
		{"GET", "/v1/nothing", http.StatusNotFound, ""},
	} {
		req, err := http.NewRequest(c.method, e.srv.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q, want %d Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.status, c.allow)
		}
	}
}

// A body member that names no field, by its exact case, is refused and
// changes nothing: {"optionid": ...} was taken as optionId.
func TestUnknownFieldsAreRefused(t *testing.T) {
	e := newEnv(t, nil, nil)
	if r := e.upload(adminToken, guestWasm(t, "examples/deploy"), repoFile(t, "examples/deploy/manifest.json")); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	var call runReply
	e.post("/v1/tools/deploy/calls?wait=30s", `{"service":"api"}`).json(t, &call)
	if len(call.Run.Waiting) != 1 || call.Run.Waiting[0].AskID == "" {
		t.Fatalf("call: %+v", call.Run)
	}
	ask := call.Run.Waiting[0].AskID
	for _, body := range []string{`{"optionid":"approve"}`, `{"optionId":"approve","comment":"ok"}`, `["approve"]`} {
		if r := e.post("/v1/asks/"+ask+"/answer", body); r.status != http.StatusBadRequest || r.code(t) != "bad_request" {
			t.Errorf("answer %s: %d %s, want 400 bad_request", body, r.status, r.body)
		}
	}
	if r := e.post("/v1/runs/"+call.Run.ID+"/cancel", `{"reson":"typo"}`); r.status != http.StatusBadRequest {
		t.Errorf("cancel with a misspelt member: %d %s, want 400", r.status, r.body)
	}
	var asks struct{ Asks []host.Question }
	e.get("/v1/asks").json(t, &asks)
	if len(asks.Asks) != 1 || !asks.Asks[0].Open {
		t.Fatalf("the refused answers changed the question: %+v", asks)
	}
	if r := e.post("/v1/asks/"+ask+"/answer?wait=30s", `{"optionId":"approve"}`); r.status != http.StatusOK {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
}

// An upload over the limit reports the module limit that was set
// (Config.MaxUploadBytes, serve's --max-upload), not the form's cap with
// its slack for the manifest on top.
func TestUploadLimitReportedIsTheOneSet(t *testing.T) {
	const limit = 1 << 20
	e := newEnv(t, nil, &httpapi.Config{APITokens: []string{apiToken}, AdminTokens: []string{adminToken}, MaxUploadBytes: limit})
	for _, size := range []int{limit + 1, 6 << 20} {
		r := e.upload(adminToken, bytes.Repeat([]byte{0}, size), repoFile(t, "examples/deploy/manifest.json"))
		var body struct {
			Error struct {
				Code  string
				Limit int64
			}
		}
		r.json(t, &body)
		if r.status != http.StatusRequestEntityTooLarge || body.Error.Code != "too_large" || body.Error.Limit != limit {
			t.Errorf("module of %d bytes: %d %s, want 413 too_large with limit %d", size, r.status, r.body, limit)
		}
	}
}

// records counts the log records at Warn and above.
type records struct {
	mu    sync.Mutex
	warns []string
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.mu.Lock()
		h.warns = append(h.warns, r.Message)
		h.mu.Unlock()
	}
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// A server given only API tokens refuses uploads: it says so when it
// starts instead of leaving it to the first 403.
func TestAPITokenOnlyWarnsThatUploadsAreRefused(t *testing.T) {
	for _, c := range []struct {
		admin []string
		warns int
	}{{nil, 1}, {[]string{adminToken}, 0}} {
		log := &records{}
		e := newEnv(t, nil, &httpapi.Config{APITokens: []string{apiToken}, AdminTokens: c.admin, Logger: slog.New(log)})
		if len(log.warns) != c.warns {
			t.Errorf("admin tokens %d: warnings %q, want %d", len(c.admin), log.warns, c.warns)
		}
		if c.admin == nil {
			if r := e.upload(apiToken, []byte("\x00asm"), []byte("{}")); r.status != http.StatusForbidden {
				t.Errorf("upload with the API token: %d %s, want 403", r.status, r.body)
			}
		}
	}
}

// The OpenAPI document is served, without a token, as committed.
func TestOpenAPIIsServed(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.do("GET", "/v1/openapi.json", "", nil, "")
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	r.json(t, &doc)
	if r.status != http.StatusOK || !strings.HasPrefix(doc.OpenAPI, "3.1.") || doc.Paths["/v1/tools/{name}/calls"] == nil {
		t.Fatalf("GET /v1/openapi.json: %d %.200s", r.status, r.body)
	}
	if want := repoFile(t, "httpapi/openapi.json"); !bytes.Equal(r.body, want) {
		t.Fatalf("the served document is not the committed one")
	}
}
