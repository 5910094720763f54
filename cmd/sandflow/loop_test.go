package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// scriptedModel is an OpenAI-compatible chat-completions server whose
// replies depend on which tool results the conversation holds. It counts
// the requests of each stage.
type scriptedModel struct {
	mu      sync.Mutex
	stages  map[string]int
	reached chan struct{} // closed when the final stage is first asked
	release chan struct{} // the first final request answers when closed
	first   bool
}

func (m *scriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    any    `json:"content"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	res := map[string]string{}
	for _, msg := range req.Messages {
		if msg.Role == "tool" {
			s, _ := msg.Content.(string)
			res[msg.ToolCallID] = s
		}
	}
	stage := "final"
	switch {
	case res["c1"] == "":
		stage = "wasm"
	case res["c2"] == "":
		stage = "js"
	}
	m.mu.Lock()
	m.stages[stage]++
	first := stage == "final" && !m.first
	if first {
		m.first = true
		close(m.reached)
	}
	m.mu.Unlock()
	if first {
		<-m.release
		http.Error(w, "gone", 500)
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil}
	finish := "tool_calls"
	switch stage {
	case "wasm":
		msg["tool_calls"] = []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "remind", "arguments": `{"note":"tea","delay":"1ms"}`}}}
	case "js":
		msg["tool_calls"] = []any{map[string]any{"id": "c2", "type": "function", "function": map[string]any{"name": "upper", "arguments": `{"text":"abc"}`}}}
	default:
		msg["content"], finish = "remind "+res["c1"]+", upper "+res["c2"], "stop"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": "m",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
}

func (m *scriptedModel) counts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.stages {
		out[k] = v
	}
	return out
}

func apiDo(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testAPIToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// A loop agent's turn in a real `sandflow serve`, killed (SIGKILL) while
// its third model call is out, then started again: the turn resumes
// where it was. The fake model counts its requests per stage: the two
// completed model calls are not sent again, and each tool (a WebAssembly
// one and a JavaScript one) ran once.
func TestCLILoopAgentResumesAfterKill(t *testing.T) {
	m := &scriptedModel{stages: map[string]int{}, reached: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(m)
	defer srv.Close()
	defer func() {
		select {
		case <-m.release:
		default:
			close(m.release)
		}
	}()
	c := newCLI(t)
	c.addExample("examples/remind")
	js := filepath.Join(t.TempDir(), "upper.js")
	os.WriteFile(js, []byte(`defineWorkflowTool({ description: "upper-cases text",
  inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  async execute({ text }) { "use workflow"; return text.toUpperCase(); } });`), 0o600)
	c.ok("plugin", "add", js, "--name", "upper")
	agentsFile := filepath.Join(t.TempDir(), "agents.json")
	os.WriteFile(agentsFile, fmt.Appendf(nil, `{"openai": {"baseURL": %q, "model": "m", "apiKeyEnv": "SANDFLOW_TEST_NO_KEY"},
	  "agents": [{"name": "helper", "kind": "loop", "instructions": "Use the tools.", "tools": [{"tool": "remind"}, {"tool": "upper"}],
	    "modelRetry": {"initialBackoffMs": 10, "maxBackoffMs": 20}}]}`, srv.URL+"/v1"), 0o600)

	serve, addr := startServe(t, c, "--agents", agentsFile)
	code, body := apiDo(t, "POST", "http://"+addr+"/v1/tools/agent-helper/calls?runId=turn1", `{"message":"go"}`)
	if code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("call: %d %s", code, body)
	}
	select {
	case <-m.reached:
	case <-time.After(60 * time.Second):
		t.Fatalf("the third model call never came; stages %v", m.counts())
	}
	serve.Process.Signal(syscall.SIGKILL)
	serve.Wait()
	close(m.release)

	serve, addr = startServe(t, c, "--agents", agentsFile)
	var ri host.RunInfo
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && !ri.Status.Terminal(); time.Sleep(50 * time.Millisecond) {
		_, body := apiDo(t, "GET", "http://"+addr+"/v1/runs/turn1", "")
		var got struct{ Run host.RunInfo }
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		ri = got.Run
	}
	serve.Process.Signal(syscall.SIGTERM)
	serve.Wait()
	var compact bytes.Buffer
	json.Compact(&compact, ri.Result)
	if ri.Status != store.StatusCompleted || !strings.Contains(compact.String(), `"reply":"remind {\"reminder\":\"tea\"}, upper \"ABC\""`) {
		t.Fatalf("turn run %s %s %+v", ri.Status, ri.Result, ri.Error)
	}
	if got := m.counts(); got["wasm"] != 1 || got["js"] != 1 || got["final"] != 2 {
		t.Errorf("model requests per stage %v, want wasm 1, js 1, final 2 (the one out at the kill, sent again)", got)
	}
	for _, tool := range []string{"remind", "upper"} {
		var runs []store.Run
		out := c.ok("runs", "list", "--tool", tool, "--json")
		if err := json.Unmarshal([]byte(out), &runs); err != nil {
			t.Fatalf("runs list: %v\n%s", err, out)
		}
		if len(runs) != 1 {
			t.Errorf("%d runs of %s, want 1", len(runs), tool)
		}
	}
}

// A loop agent's tool call that needs approval waits as a question in a
// real `sandflow serve`; an answer without the API token is refused, and
// one from this process (not the server's) with the token approves the
// call, which then runs.
func TestCLILoopApprovalFromAnotherProcess(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content any    `json:"content"`
			} `json:"messages"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		calls++
		mu.Unlock()
		msg := map[string]any{"role": "assistant", "content": nil,
			"tool_calls": []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "upper", "arguments": `{"text":"ship it"}`}}}}
		finish := "tool_calls"
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			msg = map[string]any{"role": "assistant", "content": "tool said " + last.Content.(string)}
			finish = "stop"
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": "m",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}})
	}))
	defer srv.Close()
	c := newCLI(t)
	js := filepath.Join(t.TempDir(), "upper.js")
	os.WriteFile(js, []byte(`defineWorkflowTool({ description: "upper-cases text",
  inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  async execute({ text }) { "use workflow"; return text.toUpperCase(); } });`), 0o600)
	c.ok("plugin", "add", js, "--name", "upper")
	agentsFile := filepath.Join(t.TempDir(), "agents.json")
	os.WriteFile(agentsFile, fmt.Appendf(nil, `{"openai": {"baseURL": %q, "model": "m", "apiKeyEnv": "SANDFLOW_TEST_NO_KEY"},
	  "agents": [{"name": "helper", "kind": "loop", "tools": [{"tool": "upper", "approval": "always"}]}]}`, srv.URL+"/v1"), 0o600)
	serve, addr := startServe(t, c, "--agents", agentsFile)
	base := "http://" + addr
	if code, body := apiDo(t, "POST", base+"/v1/tools/agent-helper/calls?runId=turn1&wait=5s", `{"message":"go"}`); code != http.StatusOK {
		t.Fatalf("call: %d %s", code, body)
	}
	var asks struct{ Asks []host.Question }
	_, body := apiDo(t, "GET", base+"/v1/asks", "")
	if err := json.Unmarshal(body, &asks); err != nil || len(asks.Asks) != 1 || !strings.Contains(asks.Asks[0].Request.Prompt, `"text": "ship it"`) {
		t.Fatalf("asks: %s", body)
	}
	id := asks.Asks[0].ID
	req, _ := http.NewRequest("POST", base+"/v1/asks/"+id+"/answer", strings.NewReader(`{"optionId":"approve"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an answer without the token: %d", resp.StatusCode)
	}
	if code, body := apiDo(t, "POST", base+"/v1/asks/"+id+"/answer?wait=10s", `{"optionId":"approve"}`); code != http.StatusOK {
		t.Fatalf("answer: %d %s", code, body)
	}
	var ri host.RunInfo
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !ri.Status.Terminal(); time.Sleep(50 * time.Millisecond) {
		_, body := apiDo(t, "GET", base+"/v1/runs/turn1", "")
		var got struct{ Run host.RunInfo }
		json.Unmarshal(body, &got)
		ri = got.Run
	}
	serve.Process.Signal(syscall.SIGTERM)
	serve.Wait()
	var compact bytes.Buffer
	json.Compact(&compact, ri.Result)
	if ri.Status != store.StatusCompleted || !strings.Contains(compact.String(), `"reply":"tool said \"SHIP IT\""`) || !strings.Contains(compact.String(), `"signature":"`) {
		t.Fatalf("turn run %s %s %+v", ri.Status, compact.String(), ri.Error)
	}
	if st, err := os.Stat(filepath.Join(c.data, "approval-secret")); err != nil || st.Mode().Perm() != 0o600 || st.Size() != 32 {
		t.Errorf("the approval secret file: %v %v", st, err)
	}
}
