package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
	"github.com/sandflow/sandflow/internal/sse"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/internal/wasmtest"
	"github.com/sandflow/sandflow/store"
)

const (
	apiToken   = "api-token-0123456789"
	adminToken = "admin-token-0123456789"
)

// sharedEngine is one wazero engine for the whole test binary, so each
// guest compiles once.
func sharedEngine(t testing.TB) host.Engine { return testhost.Wazero(t) }

type env struct {
	t      testing.TB
	h      *host.Host
	api    *httpapi.Server
	srv    *httptest.Server
	client *http.Client
}

// newEnv serves a fresh host over HTTP; the host's base URL is the test
// server's, so webhook URLs work.
func newEnv(t testing.TB, opts *host.Options, cfg *httpapi.Config) *env {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var o host.Options
	if opts != nil {
		o = *opts
	}
	if o.Engine == nil {
		o.Engine = sharedEngine(t)
	}
	o.BaseURL = "http://" + ln.Addr().String()
	st, err := store.Open(filepath.Join(t.TempDir(), "db"), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.Open(context.Background(), st, &o)
	if err != nil {
		t.Fatal(err)
	}
	c := httpapi.Config{APITokens: []string{apiToken}, AdminTokens: []string{adminToken}}
	if cfg != nil {
		c = *cfg
	}
	api, err := httpapi.New(h, c)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	e := &env{t: t, h: h, api: api, srv: srv, client: srv.Client()}
	t.Cleanup(func() {
		srv.Close()
		api.Close(context.Background())
		h.Close(context.Background())
		st.Close()
	})
	return e
}

type reply struct {
	status int
	body   []byte
}

func (r reply) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("status %d, body %q: %v", r.status, r.body, err)
	}
}

func (r reply) code(t testing.TB) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	r.json(t, &e)
	return e.Error.Code
}

func (e *env) do(method, path, token string, body io.Reader, contentType string) reply {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return reply{resp.StatusCode, b}
}

func (e *env) get(path string) reply { return e.do("GET", path, apiToken, nil, "") }

func (e *env) post(path, body string) reply {
	return e.do("POST", path, apiToken, strings.NewReader(body), "application/json")
}

// upload posts a module and manifest as a multipart form.
func (e *env) upload(token string, wasm, manifest []byte) reply {
	e.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("module", "tool.wasm")
	fw.Write(wasm)
	fw, _ = mw.CreateFormFile("manifest", "manifest.json")
	fw.Write(manifest)
	mw.Close()
	return e.do("POST", "/v1/plugins", token, &buf, mw.FormDataContentType())
}

func repoFile(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testhost.RepoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// guestWasm builds the guest in rel (relative to the repository root).
func guestWasm(t testing.TB, rel string) []byte {
	t.Helper()
	return testhost.Guest(t, rel)
}

type runReply struct {
	Run host.RunInfo
}

// While the server runs, a plugin is uploaded and called at once; version
// 2 is uploaded; a run started on version 1 finishes on version 1.
func TestUploadCallAndVersions(t *testing.T) {
	e := newEnv(t, nil, nil)
	deploy, manifest := guestWasm(t, "examples/deploy"), repoFile(t, "examples/deploy/manifest.json")
	r := e.upload(adminToken, deploy, manifest)
	if r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	var tools struct{ Tools []host.Tool }
	e.get("/v1/tools").json(t, &tools)
	if len(tools.Tools) != 1 || tools.Tools[0].Name != "deploy" || tools.Tools[0].Entry != "execute" || len(tools.Tools[0].InputSchema) == 0 {
		t.Fatalf("tools: %+v", tools)
	}
	r = e.post("/v1/tools/deploy/calls?wait=30s", `{"service":"api"}`)
	var v1 runReply
	r.json(t, &v1)
	if r.status != http.StatusOK || v1.Run.Status != store.StatusWaiting || v1.Run.Version != 1 || len(v1.Run.Waiting) != 1 {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	// Version 2: the same tool, another module.
	v2wasm := guestWasm(t, "host/testdata/guests/deploy-v2")
	if r := e.upload(adminToken, v2wasm, manifest); r.status != http.StatusCreated {
		t.Fatalf("upload v2: %d %s", r.status, r.body)
	}
	var show struct{ Versions []host.Plugin }
	e.get("/v1/plugins/deploy").json(t, &show)
	if len(show.Versions) != 2 || show.Versions[1].Version != 2 || show.Versions[0].ModuleHash == show.Versions[1].ModuleHash {
		t.Fatalf("versions: %+v", show)
	}
	var v2 runReply
	e.post("/v1/tools/deploy/calls?wait=30s", `{"service":"web"}`).json(t, &v2)
	if v2.Run.Version != 2 {
		t.Fatalf("a new call should use version 2: %+v", v2.Run)
	}
	// Version 1 is in use: it cannot be deleted.
	if r := e.do("DELETE", "/v1/plugins/deploy/versions/1", adminToken, nil, ""); r.status != http.StatusConflict {
		t.Fatalf("delete v1 in use: %d %s", r.status, r.body)
	}
	r = e.post("/v1/asks/"+v1.Run.Waiting[0].AskID+"/answer?wait=30s", `{"optionId":"approve"}`)
	var done runReply
	r.json(t, &done)
	if r.status != http.StatusOK || done.Run.Status != store.StatusCompleted || done.Run.Version != 1 {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	// Answered once.
	if r := e.post("/v1/asks/"+v1.Run.Waiting[0].AskID+"/answer", `{"optionId":"approve"}`); r.status != http.StatusConflict {
		t.Fatalf("second answer: %d %s", r.status, r.body)
	}
	// Now no unfinished run uses version 1.
	if r := e.do("DELETE", "/v1/plugins/deploy/versions/1", adminToken, nil, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete v1: %d %s", r.status, r.body)
	}
	if r := e.do("DELETE", "/v1/plugins/deploy/versions/1", adminToken, nil, ""); r.status != http.StatusNotFound {
		t.Fatalf("delete v1 again: %d %s", r.status, r.body)
	}
	var runs struct{ Runs []store.Run }
	e.get("/v1/runs?status=completed").json(t, &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].ID != v1.Run.ID {
		t.Fatalf("runs: %+v", runs)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, nil, nil)
	cases := []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/v1/tools", "", http.StatusUnauthorized},
		{"GET", "/v1/tools", "wrong-token-0123456789", http.StatusUnauthorized},
		{"GET", "/v1/tools", apiToken, http.StatusOK},
		{"GET", "/v1/tools", adminToken, http.StatusOK},
		{"POST", "/v1/plugins", apiToken, http.StatusForbidden},
		{"DELETE", "/v1/plugins/x/versions/1", apiToken, http.StatusForbidden},
		{"POST", "/v1/plugins", "", http.StatusUnauthorized},
	}
	for _, c := range cases {
		r := e.do(c.method, c.path, c.token, nil, "")
		if r.status != c.want {
			t.Errorf("%s %s with %q: %d, want %d (%s)", c.method, c.path, c.token, r.status, c.want, r.body)
		}
		if c.want >= 400 && r.code(t) != "unauthorized" {
			t.Errorf("%s %s: code %q", c.method, c.path, r.code(t))
		}
	}
	if _, err := httpapi.New(e.h, httpapi.Config{}); err == nil {
		t.Errorf("a server with no token was made")
	}
}

// Every refusal is a 4xx naming its cause, and nothing is stored.
func TestUploadRefusals(t *testing.T) {
	e := newEnv(t, &host.Options{MaxModuleBytes: 8 << 20}, &httpapi.Config{APITokens: []string{apiToken}, AdminTokens: []string{adminToken}, MaxUploadBytes: 8 << 20})
	good := guestWasm(t, "examples/deploy")
	manifest := repoFile(t, "examples/deploy/manifest.json")
	version2 := wasmtest.Module{
		Funcs: []wasmtest.Func{
			{Results: []byte{wasmtest.I32}, Body: []byte{0x41, 0x02}},
			{Results: []byte{wasmtest.I32}, Body: wasmtest.ReturnOne},
		},
		Exports: map[string]uint32{"sandflow_abi_version": 0, "sandflow_run": 1, "sandflow_step": 1},
		Memory:  1,
	}.Bytes()
	noVersion := wasmtest.Module{
		Funcs:   []wasmtest.Func{{Results: []byte{wasmtest.I32}, Body: wasmtest.ReturnOne}},
		Exports: map[string]uint32{"sandflow_run": 0, "sandflow_step": 0},
		Memory:  1,
	}.Bytes()
	evil := wasmtest.Guest(wasmtest.ReturnOne, wasmtest.Import{Module: "env", Name: "evil", Results: []byte{wasmtest.I32}})
	badSchema := []byte(`{"name":"deploy","entry":"execute","inputSchema":{"type":"object","properties":{"a":{"type":"strung"}}}}`)
	for _, c := range []struct {
		name           string
		wasm, manifest []byte
		status         int
		code, mention  string
	}{
		{"not wasm", []byte("#!/bin/sh\n"), manifest, 400, "plugin_not_wasm", "not a WebAssembly module"},
		{"truncated", good[:len(good)/3], manifest, 400, "plugin_malformed", "malformed"},
		{"wrong ABI version", version2, manifest, 400, "plugin_abi_version", "version 2"},
		{"missing ABI version", noVersion, manifest, 400, "plugin_abi_version", "sandflow_abi_version"},
		{"disallowed import", evil, manifest, 400, "plugin_import", "env.evil"},
		{"schema does not compile", good, badSchema, 400, "bad_manifest", "inputSchema"},
		{"manifest not JSON", good, []byte("{"), 400, "bad_manifest", ""},
		{"over the size cap", make([]byte, 9<<20), manifest, 413, "too_large", "limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.upload(adminToken, c.wasm, c.manifest)
			if r.status != c.status || r.code(t) != c.code || !strings.Contains(string(r.body), c.mention) {
				t.Errorf("%d %s; want %d %s mentioning %q", r.status, r.body, c.status, c.code, c.mention)
			}
		})
	}
	var ps struct{ Plugins []host.Plugin }
	e.get("/v1/plugins").json(t, &ps)
	if len(ps.Plugins) != 0 {
		t.Errorf("refused uploads stored %d plugins", len(ps.Plugins))
	}
	// Not a multipart form at all.
	if r := e.do("POST", "/v1/plugins", adminToken, strings.NewReader("{}"), "application/json"); r.status != 400 {
		t.Errorf("a JSON upload: %d %s", r.status, r.body)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, nil, nil)
	if r := e.upload(adminToken, guestWasm(t, "examples/deploy"), repoFile(t, "examples/deploy/manifest.json")); r.status != 201 {
		t.Fatal(r.status)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/tools/deploy/calls", `{"service":`, 400, "bad_request"},
		{"POST", "/v1/tools/deploy/calls", `{"service":""}`, 400, "invalid_input"},
		{"POST", "/v1/tools/nope/calls", `{}`, 404, "not_found"},
		{"POST", "/v1/tools/deploy/calls?wait=forever", `{}`, 400, "bad_request"},
		{"GET", "/v1/runs/run_missing", ``, 404, "not_found"},
		{"GET", "/v1/runs?status=happy", ``, 400, "bad_request"},
		{"POST", "/v1/asks/ask_missing/answer", `{"optionId":"x"}`, 404, "not_found"},
		{"POST", "/v1/hooks/no-such-token", `{}`, 404, "not_found"},
		{"POST", "/v1/hooks/no-such-token", `not json`, 400, "bad_request"},
		{"GET", "/v1/nothing", ``, 404, "not_found"},
		{"POST", "/v1/tools/deploy/calls", `{"service":"` + strings.Repeat("x", 3<<20) + `"}`, 413, "too_large"},
	} {
		r := e.do(c.method, c.path, apiToken, strings.NewReader(c.body), "application/json")
		if r.status != c.status || r.code(t) != c.code {
			t.Errorf("%s %s: %d %s; want %d %s", c.method, c.path, r.status, r.body, c.status, c.code)
		}
	}
	var runs struct{ Runs []store.Run }
	e.get("/v1/runs").json(t, &runs)
	if len(runs.Runs) != 0 {
		t.Errorf("bad calls created runs: %+v", runs.Runs)
	}
}

// streamEvent is an event of a run's or a session's stream.
type streamEvent struct {
	id   uint64
	kind string
	data string
}

// readSSE reads the typed events of a stream until stop says so or the
// stream ends.
func readSSE(t *testing.T, body io.Reader, stop func(streamEvent) bool) []streamEvent {
	t.Helper()
	var out []streamEvent
	r := sse.NewReader(body)
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if e.Type == "" {
			continue
		}
		ev := streamEvent{kind: e.Type, data: string(e.Data)}
		if e.ID != "" {
			if ev.id, err = strconv.ParseUint(e.ID, 10, 64); err != nil {
				t.Fatalf("event id %q: %v", e.ID, err)
			}
		}
		out = append(out, ev)
		if stop(ev) {
			return out
		}
	}
}

func (e *env) stream(runID string, lastID uint64) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/runs/"+runID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(lastID, 10))
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		e.t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp
}

// A client cut off mid-run reconnects with Last-Event-ID and receives
// every event exactly once.
func TestEventStreamResumes(t *testing.T) {
	e := newEnv(t, nil, nil)
	if r := e.upload(adminToken, guestWasm(t, "host/testdata/guests/kitchen"), repoFile(t, "host/testdata/guests/kitchen/manifest.json")); r.status != 201 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var started runReply
	e.post("/v1/tools/kitchen/calls", `{"mode":"two-asks"}`).json(t, &started)
	id := started.Run.ID
	// First connection: read until both questions are open, then cut.
	resp := e.stream(id, 0)
	asks := 0
	first := readSSE(t, resp.Body, func(ev streamEvent) bool {
		if ev.kind == host.EvAskOpened {
			asks++
		}
		return asks == 2
	})
	resp.Body.Close()
	// Meanwhile the run moves on: both questions are answered.
	var qs struct{ Asks []host.Question }
	e.get("/v1/asks").json(t, &qs)
	if len(qs.Asks) != 2 {
		t.Fatalf("asks: %+v", qs)
	}
	for i, q := range qs.Asks {
		if r := e.post("/v1/asks/"+q.ID+"/answer?wait=30s", fmt.Sprintf(`{"optionId":%q}`, []string{"a", "b"}[i])); r.status != 200 {
			t.Fatalf("answer: %d %s", r.status, r.body)
		}
	}
	// Second connection, from the last id seen: the rest, to the end.
	resp = e.stream(id, first[len(first)-1].id)
	rest := readSSE(t, resp.Body, func(ev streamEvent) bool { return ev.kind == "end" })
	resp.Body.Close()
	if last := rest[len(rest)-1]; last.kind != "end" || !strings.Contains(last.data, "completed") {
		t.Fatalf("the stream did not end with the run: %+v", last)
	}
	evs, err := e.h.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, ev := range append(first, rest[:len(rest)-1]...) {
		got = append(got, ev.id)
	}
	if len(got) != len(evs) {
		t.Fatalf("received %d events %v, the log has %d", len(got), got, len(evs))
	}
	for i, ev := range evs {
		if got[i] != ev.Seq {
			t.Fatalf("event %d: received seq %d, want %d (all: %v)", i, got[i], ev.Seq, got)
		}
	}
}

func TestHooksAndWebhooks(t *testing.T) {
	e := newEnv(t, nil, nil)
	if r := e.upload(adminToken, guestWasm(t, "host/testdata/guests/kitchen"), repoFile(t, "host/testdata/guests/kitchen/manifest.json")); r.status != 201 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	// resumeHook over HTTP.
	var hooked runReply
	e.post("/v1/tools/kitchen/calls?wait=30s", `{"mode":"hooks","token":"order-7","n":1}`).json(t, &hooked)
	if hooked.Run.Status != store.StatusWaiting {
		t.Fatalf("%+v", hooked.Run)
	}
	r := e.post("/v1/hooks/order-7?wait=30s", `{"paid":true}`)
	var after runReply
	r.json(t, &after)
	var res struct{ Payloads []map[string]bool }
	if json.Unmarshal(after.Run.Result, &res) != nil || after.Run.Status != store.StatusCompleted || len(res.Payloads) != 1 || !res.Payloads[0]["paid"] {
		t.Fatalf("hook: %d %s", r.status, r.body)
	}

	for _, mode := range []string{"webhook", "webhook-manual"} {
		t.Run(mode, func(t *testing.T) {
			var started runReply
			e.post("/v1/tools/kitchen/calls?wait=30s", `{"mode":"`+mode+`","n":2}`).json(t, &started)
			var p struct{ URL string }
			if err := json.Unmarshal(started.Run.Progress, &p); err != nil || !strings.HasPrefix(p.URL, e.srv.URL+"/.well-known/workflow/v1/webhook/whk_") {
				t.Fatalf("webhook url: %s (%v)", started.Run.Progress, err)
			}
			token := strings.TrimPrefix(p.URL, e.srv.URL+"/.well-known/workflow/v1/webhook/")
			if len(token) < len("whk_")+26 {
				t.Errorf("token %q is under 128 bits", token)
			}
			for i, body := range []string{`{"status":"ok"}`, "\xff\xfe binary"} {
				req, _ := http.NewRequest("POST", p.URL, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := e.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want, wantStatus := "thanks", 200
				if mode == "webhook-manual" {
					want, wantStatus = "got "+body, 201
				}
				if resp.StatusCode != wantStatus || string(got) != want {
					t.Errorf("request %d: %d %q, want %d %q", i, resp.StatusCode, got, wantStatus, want)
				}
			}
			// The run ends once it has both requests.
			deadline := time.Now().Add(30 * time.Second)
			var ri host.RunInfo
			for time.Now().Before(deadline) {
				var rr runReply
				e.get("/v1/runs/"+started.Run.ID).json(t, &rr)
				if ri = rr.Run; ri.Status.Terminal() {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			var reqs []struct {
				Method string
				Bytes  []byte // base64 in JSON
				Index  int
			}
			if err := json.Unmarshal(ri.Result, &reqs); err != nil || len(reqs) != 2 || string(reqs[0].Bytes) != `{"status":"ok"}` ||
				string(reqs[1].Bytes) != "\xff\xfe binary" || reqs[0].Method != "POST" || reqs[1].Index != 1 {
				t.Fatalf("result %s (%v)", ri.Result, err)
			}
			// The run ended: the URL is gone.
			resp, err := e.client.Post(p.URL, "text/plain", strings.NewReader("late"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 404 {
				t.Errorf("after the run: %d", resp.StatusCode)
			}
		})
	}
	// An unknown webhook.
	resp, err := e.client.Post(e.srv.URL+"/.well-known/workflow/v1/webhook/whk_nothing", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown webhook: %d", resp.StatusCode)
	}
}

// A server closed while it drives a run loses no committed event, and the
// run continues when the host recovers it.
func TestShutdownLosesNothing(t *testing.T) {
	e := newEnv(t, nil, nil)
	if r := e.upload(adminToken, guestWasm(t, "host/testdata/guests/kitchen"), repoFile(t, "host/testdata/guests/kitchen/manifest.json")); r.status != 201 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var started runReply
	r := e.post("/v1/tools/kitchen/calls?wait=0s", `{"mode":"steps","n":200}`)
	r.json(t, &started)
	if r.status != http.StatusAccepted && r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	e.srv.Close()
	if err := e.api.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, err := e.h.Events(context.Background(), started.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := e.h.Drive(context.Background(), started.Run.ID)
	// A step attempt the shutdown cut off is recorded as interrupted and
	// retried after its backoff: fire the run's timers as they fall due.
	for deadline := time.Now().Add(30 * time.Second); err == nil && ri.Status == store.StatusWaiting && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if _, err = e.h.FireDueOf(context.Background(), started.Run.ID, time.Now()); err == nil {
			ri, err = e.h.Run(context.Background(), started.Run.ID)
		}
	}
	if err != nil || ri.Status != store.StatusCompleted || string(ri.Result) != "19900" {
		t.Fatalf("after recovery: %+v %v", ri, err)
	}
	after, _ := e.h.Events(context.Background(), started.Run.ID)
	for i, ev := range before {
		if after[i].Seq != ev.Seq || after[i].Kind != ev.Kind || !bytes.Equal(after[i].Data, ev.Data) {
			t.Fatalf("event %d changed across the shutdown", ev.Seq)
		}
	}
}
