package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/httpapi"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

func TestMain(m *testing.M) {
	jsprogram.MaybeWorker() // the workflow tool's programs run in re-executed test binaries
	os.Exit(m.Run())
}

// The workflow tool over HTTP: an admin enables it (an API token may not),
// a bad budget is refused, and a call runs a fan-out program to its result.
func TestWorkflowToolOverHTTP(t *testing.T) {
	js, err := jsprogram.NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Close(context.Background()) })
	agents := host.AgentFunc{List: []host.AgentInfo{{Name: "ticket-triage", Description: "sorts tickets"}},
		Fn: func(_ context.Context, turn host.AgentTurn) (abi.AgentResult, error) {
			return abi.AgentResult{Status: abi.AgentCompleted, Reply: "triaged " + turn.Message}, nil
		}}
	e := newEnv(t, &host.Options{Engines: map[string]host.Engine{jsprogram.EngineName: js}, Agents: agents}, nil)
	if r := e.post("/v1/workflow-tool", `{}`); r.status != http.StatusForbidden && r.status != http.StatusUnauthorized {
		t.Fatalf("enable with an API token: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/workflow-tool", adminToken, strings.NewReader(`{"maxSubagents": 129}`), "application/json"); r.status != http.StatusBadRequest || r.code(t) != "bad_manifest" {
		t.Fatalf("maxSubagents 129: %d %s", r.status, r.body)
	}
	// Every field is optional, so no body is {} (it was 400).
	if r := e.do("POST", "/v1/workflow-tool", adminToken, nil, ""); r.status != http.StatusCreated {
		t.Fatalf("enable with no body: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/workflow-tool", adminToken, strings.NewReader(`{"maxsubagents": 5}`), "application/json"); r.status != http.StatusBadRequest || r.code(t) != "bad_request" {
		t.Fatalf("maxsubagents (misspelt): %d %s", r.status, r.body)
	}
	r := e.do("POST", "/v1/workflow-tool", adminToken, strings.NewReader(`{"maxSubagents": 5}`), "application/json")
	if r.status != http.StatusCreated {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	var tools struct {
		Tools []struct{ Name, Description, Entry string }
	}
	e.get("/v1/tools").json(t, &tools)
	if len(tools.Tools) != 1 || tools.Tools[0].Name != "workflow" || tools.Tools[0].Entry != "task" || !strings.Contains(tools.Tools[0].Description, "ticket-triage: sorts tickets") {
		t.Fatalf("tools: %+v", tools)
	}
	in, _ := json.Marshal(map[string]string{"js": `const rs = await Promise.all([1, 2].map((n) => ctx.agent("ticket-triage", { message: "#" + n }))); return rs;`})
	r = e.post("/v1/tools/workflow/calls?wait=30s", string(in))
	var call struct {
		Run host.RunInfo `json:"run"`
	}
	r.json(t, &call)
	var got []string
	_ = json.Unmarshal(call.Run.Result, &got)
	if r.status != http.StatusOK || len(got) != 2 || got[0] != "triaged #1" || got[1] != "triaged #2" {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
}

// A JavaScript tool is uploaded like a module, with a name instead of a
// manifest: its definition is its manifest. Uploading it again adds a
// version; a script that defines no tool is refused with why.
func TestJSToolUploadOverHTTP(t *testing.T) {
	js, err := jsprogram.NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Close(context.Background()) })
	e := newEnv(t, &host.Options{Engines: map[string]host.Engine{jsprogram.EngineName: js}}, nil)
	script := repoFile(t, "examples/js/remind.js")
	upload := func(token, name string, src []byte) reply {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, _ := mw.CreateFormFile("module", "tool.js")
		fw.Write(src)
		if name != "" {
			mw.WriteField("name", name)
		}
		mw.Close()
		return e.do("POST", "/v1/plugins", token, &buf, mw.FormDataContentType())
	}
	if r := upload(apiToken, "remind", script); r.status != http.StatusForbidden && r.status != http.StatusUnauthorized {
		t.Fatalf("upload with an API token: %d %s", r.status, r.body)
	}
	if r := upload(adminToken, "", script); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `needs a \"name\" field`) {
		t.Fatalf("upload without a name: %d %s", r.status, r.body)
	}
	if r := upload(adminToken, "bad", []byte(`const x = 1;`)); r.status != http.StatusBadRequest || r.code(t) != "plugin_bad_program" || !strings.Contains(string(r.body), "never called defineWorkflowTool") {
		t.Fatalf("a script with no tool: %d %s", r.status, r.body)
	}
	for v := 1; v <= 2; v++ {
		r := upload(adminToken, "remind", script)
		var p host.Plugin
		r.json(t, &p)
		if r.status != http.StatusCreated || p.Version != v || p.Manifest.Engine != jsprogram.EngineName || p.Manifest.Description != "Schedule a reminder." {
			t.Fatalf("upload %d: %d %s", v, r.status, r.body)
		}
	}
	r := e.post("/v1/tools/remind/calls?wait=30s", `{"note":"tea","delay":"0ms"}`)
	var call struct {
		Run host.RunInfo `json:"run"`
	}
	r.json(t, &call)
	if call.Run.ID == "" {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for call.Run.Status != store.StatusCompleted && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		e.get("/v1/runs/"+call.Run.ID).json(t, &call)
	}
	var res map[string]string
	_ = json.Unmarshal(call.Run.Result, &res)
	if call.Run.Status != store.StatusCompleted || res["reminder"] != "tea" || call.Run.Version != 2 {
		t.Fatalf("run: %+v", call.Run)
	}
}

// External agents over HTTP: a run's turn appears as a work item; the
// platform long-polls for it, claims it (a second worker is refused while
// the lease holds), and completes it; the run goes on with the reply.
func TestAgentTurnsOverHTTP(t *testing.T) {
	js, err := jsprogram.NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Close(context.Background()) })
	ext := agents.NewExternal([]host.AgentInfo{{Name: "researcher", Description: "run by the platform"}})
	e := newEnv(t, &host.Options{Engines: map[string]host.Engine{jsprogram.EngineName: js}, Agents: ext}, &httpapi.Config{APITokens: []string{apiToken}, AdminTokens: []string{adminToken}, ExternalAgents: ext})
	if r := e.do("POST", "/v1/workflow-tool", adminToken, strings.NewReader(`{}`), "application/json"); r.status != http.StatusCreated {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	in, _ := json.Marshal(map[string]string{"js": `const r = await ctx.agent("researcher", { message: "find X", outputSchema: { type: "object" } }); return r;`})
	var call struct {
		Run host.RunInfo `json:"run"`
	}
	e.post("/v1/tools/workflow/calls", string(in)).json(t, &call)
	var list struct{ Turns []agents.WorkItem }
	r := e.get("/v1/agent-turns?agent=researcher&unclaimed=true&wait=20s")
	checkCamel(t, "agent turns", r.body)
	r.json(t, &list)
	if len(list.Turns) != 1 || list.Turns[0].Message != "find X" || list.Turns[0].RunID != call.Run.ID || compactJSON(list.Turns[0].OutputSchema) != `{"type":"object"}` {
		t.Fatalf("work items: %+v", list)
	}
	id := list.Turns[0].ID
	if r := e.post("/v1/agent-turns/"+id+"/claim", `{"worker":"w1","leaseSeconds":60}`); r.status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.status, r.body)
	}
	if r := e.post("/v1/agent-turns/"+id+"/claim", `{"worker":"w2"}`); r.status != http.StatusConflict || r.code(t) != "claimed" {
		t.Errorf("second claim: %d %s", r.status, r.body)
	}
	if r := e.post("/v1/agent-turns/"+id+"/claim", `{}`); r.status != http.StatusBadRequest {
		t.Errorf("claim without a worker: %d %s", r.status, r.body)
	}
	if r := e.post("/v1/agent-turns/"+id+"/complete", `{"worker":"w1","reply":"done","data":{"found":true}}`); r.status != http.StatusNoContent {
		t.Fatalf("complete: %d %s", r.status, r.body)
	}
	// Regression: the 204 came before the run had committed the turn's
	// outcome. Read straight after it, the log has it.
	if !hasEvent(t, e.h, call.Run.ID, host.EvAgentSettled) {
		t.Fatal("after the 204 the log has no agent_settled")
	}
	if r := e.post("/v1/agent-turns/"+id+"/fail", `{"message":"late"}`); r.status != http.StatusNotFound {
		t.Errorf("failing a completed item: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !call.Run.Status.Terminal() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		e.get("/v1/runs/"+call.Run.ID).json(t, &call)
	}
	var res map[string]bool
	_ = json.Unmarshal(call.Run.Result, &res)
	if call.Run.Status != store.StatusCompleted || !res["found"] {
		t.Fatalf("run: %+v", call.Run)
	}
	// With no work, a poll waits and returns an empty list.
	start := time.Now()
	r = e.get("/v1/agent-turns?wait=200ms")
	r.json(t, &list)
	if r.status != http.StatusOK || len(list.Turns) != 0 || time.Since(start) < 200*time.Millisecond {
		t.Errorf("empty poll: %d %s after %s", r.status, r.body, time.Since(start))
	}
}

func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

// A session over HTTP: a task tool's receipt, the [Tasks] note, task_wait,
// the question answered, the result taken once, and task_cancel of an
// unknown task.
func TestSessionOverHTTP(t *testing.T) {
	js, err := jsprogram.NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Close(context.Background()) })
	e := newEnv(t, &host.Options{Engines: map[string]host.Engine{jsprogram.EngineName: js}}, nil)
	if _, err := jsprogram.RegisterTool(context.Background(), e.h, "approve-deadline", repoFile(t, "examples/js/approve-deadline.js")); err != nil {
		t.Fatal(err)
	}
	var tools struct{ Tools []host.Tool }
	r := e.get("/v1/sessions/conv-1/tools")
	checkCamel(t, "session tools", r.body)
	r.json(t, &tools)
	if len(tools.Tools) != 3 || tools.Tools[2].Name != "task_cancel" {
		t.Fatalf("tools %+v", tools)
	}
	var c struct{ Text, Status, TaskID, RunID string }
	r = e.post("/v1/sessions/conv-1/calls", `{"tool":"approve-deadline","input":{"service":"api"}}`)
	checkCamel(t, "session call", r.body)
	r.json(t, &c)
	checkCamel(t, "session tasks", e.get("/v1/sessions/conv-1/tasks").body)
	if r.status != http.StatusOK || c.Status != "started" || c.Text != "Started task "+c.TaskID+". Its result will arrive in a <task_result> message." {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	var note struct {
		Note    string
		Changed bool
	}
	e.post("/v1/sessions/conv-1/note", ``).json(t, &note)
	if !note.Changed || !strings.Contains(note.Note, `<task id="`+c.TaskID+`" tool="approve-deadline" status="working"/>`) {
		t.Errorf("note %+v", note)
	}
	var ask string
	deadline := time.Now().Add(20 * time.Second)
	for ask == "" && time.Now().Before(deadline) {
		var asks struct{ Asks []struct{ ID, RunID string } }
		e.get("/v1/asks").json(t, &asks)
		for _, a := range asks.Asks {
			if a.RunID == c.TaskID {
				ask = a.ID
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := e.post("/v1/asks/"+ask+"/answer", `{"optionId":"approve"}`); r.status != http.StatusOK {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	e.post("/v1/sessions/conv-1/calls", `{"tool":"task_wait","input":{"timeoutSeconds":20}}`).json(t, &c)
	if !strings.HasSuffix(c.Text, "completed; its result follows.") {
		t.Errorf("task_wait: %+v", c)
	}
	var res struct{ Message string }
	e.post("/v1/sessions/conv-1/results", ``).json(t, &res)
	if !strings.HasPrefix(res.Message, `<task_result id="approve-deadline-`) || !strings.Contains(res.Message, `"deployed":true`) {
		t.Errorf("results %q", res.Message)
	}
	e.post("/v1/sessions/conv-1/results", ``).json(t, &res)
	if res.Message != "" {
		t.Errorf("a result given twice: %q", res.Message)
	}
	if r := e.post("/v1/sessions/conv-1/calls", `{"tool":"task_cancel","input":{"taskId":"approve-deadline-zzzzzz"}}`); r.status != http.StatusNotFound || r.code(t) != "unknown_task" {
		t.Errorf("cancel unknown: %d %s", r.status, r.body)
	}
	if r := e.get("/v1/sessions/bad%20id/tasks"); r.status != http.StatusBadRequest {
		t.Errorf("bad session id: %d %s", r.status, r.body)
	}
}

// A serve task over HTTP: the receipt names the taskId; a call with it
// revises the plan; the session cancel endpoint leaves the idle task be;
// steer interrupts nothing when no execute call waits; a run abort
// over HTTP fires the run's signal (the task's call ends cancelled).
func TestServeAndAbortOverHTTP(t *testing.T) {
	js, err := jsprogram.NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Close(context.Background()) })
	e := newEnv(t, &host.Options{Engines: map[string]host.Engine{jsprogram.EngineName: js}}, nil)
	if _, err := jsprogram.RegisterTool(context.Background(), e.h, "release-plan", repoFile(t, "examples/js/release-plan.js")); err != nil {
		t.Fatal(err)
	}
	var c struct{ Text, Status, TaskID, RunID string }
	e.post("/v1/sessions/conv-s/calls", `{"tool":"release-plan","input":{"request":"draft"}}`).json(t, &c)
	id := c.TaskID
	if c.Status != "started" || !strings.HasSuffix(c.Text, "call release-plan again with taskId "+id+".") {
		t.Fatalf("receipt %+v", c)
	}
	var res struct{ Message string }
	deadline := time.Now().Add(20 * time.Second)
	for res.Message == "" && time.Now().Before(deadline) {
		e.post("/v1/sessions/conv-s/results", ``).json(t, &res)
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(res.Message, `"revision":1`) {
		t.Fatalf("first result %q", res.Message)
	}
	r := e.post("/v1/sessions/conv-s/calls", `{"tool":"release-plan","input":{"request":"add a canary","taskId":"`+id+`"}}`)
	r.json(t, &c)
	if r.status != http.StatusOK || c.Status != "sent" || c.Text != "Sent to task "+id+". Its reply will arrive in a <task_result> message." {
		t.Fatalf("second call: %d %s", r.status, r.body)
	}
	res.Message = ""
	for res.Message == "" && time.Now().Before(deadline) {
		e.post("/v1/sessions/conv-s/results", ``).json(t, &res)
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(res.Message, `"revision":2`) || !strings.Contains(res.Message, `"a canary"`) {
		t.Fatalf("second result %q", res.Message)
	}
	if r := e.post("/v1/sessions/conv-s/calls", `{"tool":"release-plan","input":{"request":"x","taskId":"release-plan-nosuch"}}`); r.status != http.StatusNotFound || r.code(t) != "unknown_task" {
		t.Errorf("unknown task: %d %s", r.status, r.body)
	}
	var steer struct{ Interrupted int }
	if r := e.post("/v1/sessions/conv-s/steer", ``); r.status != http.StatusOK {
		t.Errorf("steer: %d %s", r.status, r.body)
	} else if r.json(t, &steer); steer.Interrupted != 0 {
		t.Errorf("steer interrupted %d", steer.Interrupted)
	}
	if r := e.post("/v1/sessions/conv-s/cancel", `{"reason":"lunch"}`); r.status != http.StatusBadRequest {
		t.Errorf("a cancel with a bad reason: %d %s", r.status, r.body)
	}
	var tasks struct{ Tasks []struct{ ID, Status string } }
	e.post("/v1/sessions/conv-s/cancel", `{"reason":"turn_ended"}`).json(t, &tasks)
	if len(tasks.Tasks) != 1 || tasks.Tasks[0].Status != "idle" {
		t.Errorf("tasks after the session cancel: %+v", tasks)
	}
	var run struct{ Run host.RunInfo }
	if r := e.post("/v1/runs/"+id+"/abort", `{"reason":"maintenance"}`); r.status != http.StatusOK {
		t.Fatalf("abort: %d %s", r.status, r.body)
	} else if r.json(t, &run); run.Run.Aborted != "maintenance" {
		t.Errorf("abort: %+v", run.Run)
	}
	if r := e.post("/v1/runs/run_nosuchrun/abort", ``); r.status != http.StatusNotFound {
		t.Errorf("abort of no run: %d %s", r.status, r.body)
	}
}

// The session's event stream over SSE: a client reads the serve task's
// events as they happen, is cut off, and resumes from Last-Event-ID with
// the rest, each event once.
func TestSessionEventsOverSSE(t *testing.T) {
	js, err := jsprogram.NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Close(context.Background()) })
	e := newEnv(t, &host.Options{Engines: map[string]host.Engine{jsprogram.EngineName: js}}, nil)
	if _, err := jsprogram.RegisterTool(context.Background(), e.h, "release-plan", repoFile(t, "examples/js/release-plan.js")); err != nil {
		t.Fatal(err)
	}
	open := func(last uint64) *http.Response {
		req, _ := http.NewRequest("GET", e.srv.URL+"/v1/sessions/conv-sse/events", nil)
		req.Header.Set("Authorization", "Bearer "+apiToken)
		if last > 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatUint(last, 10))
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return resp
	}
	var c struct{ TaskID string }
	e.post("/v1/sessions/conv-sse/calls", `{"tool":"release-plan","input":{"request":"draft"}}`).json(t, &c)
	resp := open(0)
	first := readSSE(t, resp.Body, func(ev streamEvent) bool { return ev.kind == "task.settled" })
	resp.Body.Close()
	e.post("/v1/sessions/conv-sse/calls", `{"tool":"release-plan","input":{"request":"add a canary","taskId":"`+c.TaskID+`"}}`)
	resp = open(first[len(first)-1].id)
	rest := readSSE(t, resp.Body, func(ev streamEvent) bool { return ev.kind == "task.settled" })
	resp.Body.Close()
	var kinds []string
	for i, ev := range append(first, rest...) {
		if ev.id != uint64(i+1) {
			t.Errorf("event %d has id %d", i+1, ev.id)
		}
		kinds = append(kinds, ev.kind)
	}
	want := "call.started task.started call.settled task.settled call.started task.started call.settled task.settled"
	if strings.Join(kinds, " ") != want {
		t.Errorf("events %v\nwant   %s", kinds, want)
	}
	var last session.Event
	if err := json.Unmarshal([]byte(rest[len(rest)-1].data), &last); err != nil || last.TaskID != c.TaskID || last.CallID != c.TaskID+":1" || !strings.Contains(string(last.Output), `"revision":2`) {
		t.Errorf("the last event: %+v %v", last, err)
	}
	if r := e.get("/v1/sessions/conv-sse/events?after=x"); r.status != http.StatusBadRequest {
		t.Errorf("a bad after: %d", r.status)
	}
}
