package mcp_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/mcp"
)

// raw is a JSON-RPC client over streamable HTTP that sends what the Go
// SDK's client has no fields for (2025-11-25 tasks).
type raw struct {
	t       *testing.T
	url     string
	session string
	version string
	id      int
}

type rpcResponse struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (r *raw) call(method string, params any) rpcResponse {
	r.t.Helper()
	r.id++
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": r.id, "method": method, "params": params})
	req, _ := http.NewRequest("POST", r.url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if r.session != "" {
		req.Header.Set("Mcp-Session-Id", r.session)
	}
	if r.version != "" {
		req.Header.Set("Mcp-Protocol-Version", r.version)
	}
	req.Header.Set("Mcp-Method", method)
	if m, ok := params.(map[string]any); ok {
		for _, k := range []string{"name", "taskId"} {
			if v, ok := m[k].(string); ok {
				req.Header.Set("Mcp-Name", v)
			}
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
		r.session = id
	}
	if resp.StatusCode != http.StatusOK {
		// A 2026-07-28 error response is a JSON-RPC error with a 4xx.
		b, _ := io.ReadAll(resp.Body)
		var out rpcResponse
		if json.Unmarshal(b, &out) != nil || out.Error == nil {
			r.t.Fatalf("%s: HTTP %d: %s", method, resp.StatusCode, b)
		}
		return out
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "data: ")
		var out struct {
			rpcResponse
			ID *int `json:"id"`
		}
		if json.Unmarshal([]byte(line), &out) == nil && out.ID != nil && *out.ID == r.id {
			return out.rpcResponse
		}
	}
	r.t.Fatalf("%s: no response", method)
	return rpcResponse{}
}

func (r *raw) notify(method string) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	req, _ := http.NewRequest("POST", r.url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", r.session)
	req.Header.Set("Mcp-Protocol-Version", r.version)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
}

// A 2025-11-25 client declares tasks and asks for one with params.task:
// the server declares the tasks capability, marks its tools' task
// support, answers the call with a task, and gives its result with
// tasks/result.
//
// Regression: a client that declared tasks as the extension (the MCP
// Inspector does, in this era too) got a plain result for a task call.
func TestTaskAugmentedCall20251125(t *testing.T) {
	for name, caps := range map[string]map[string]any{
		"capabilities.tasks": {"tasks": map[string]any{"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}},
		"extension":          {"extensions": map[string]any{mcp.TasksExtension: map[string]any{}}},
	} {
		t.Run(name, func(t *testing.T) { taskAugmentedCall(t, caps) })
	}
}

func taskAugmentedCall(t *testing.T, caps map[string]any) {
	e := newEnv(t, nil)
	r := &raw{t: t, url: e.hs.URL}
	init := r.call("initialize", map[string]any{"protocolVersion": mcp.Version20251125, "clientInfo": map[string]any{"name": "raw", "version": "1"},
		"capabilities": caps})
	var ir struct {
		ProtocolVersion string `json:"protocolVersion"`
		Capabilities    struct {
			Tasks map[string]any `json:"tasks"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(init.Result, &ir); err != nil || ir.ProtocolVersion != mcp.Version20251125 || ir.Capabilities.Tasks["requests"] == nil {
		t.Fatalf("initialize: %v %s", err, init.Result)
	}
	r.version = mcp.Version20251125
	r.notify("notifications/initialized")
	var tl struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.call("tools/list", map[string]any{}).Result, &tl); err != nil || len(tl.Tools) == 0 {
		t.Fatalf("tools/list: %v", err)
	}
	for _, tool := range tl.Tools {
		if tool.Execution.TaskSupport != "optional" {
			t.Errorf("%s: taskSupport %q", tool.Name, tool.Execution.TaskSupport)
		}
	}
	created := r.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"msg": "later"}, "task": map[string]any{"ttl": 60000}})
	var ct struct {
		Task struct {
			TaskID string `json:"taskId"`
			Status string `json:"status"`
		} `json:"task"`
	}
	if err := json.Unmarshal(created.Result, &ct); err != nil || ct.Task.TaskID == "" || ct.Task.Status == "" {
		t.Fatalf("tools/call with a task: %v %s", err, created.Result)
	}
	res := r.call("tasks/result", map[string]any{"taskId": ct.Task.TaskID})
	var tr struct {
		StructuredContent map[string]string `json:"structuredContent"`
		Meta              map[string]struct {
			TaskID string `json:"taskId"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(res.Result, &tr); err != nil || tr.StructuredContent["msg"] != "later" || tr.Meta["io.modelcontextprotocol/related-task"].TaskID != ct.Task.TaskID {
		t.Fatalf("tasks/result: %v %s", err, res.Result)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got struct{ Status string }
		_ = json.Unmarshal(r.call("tasks/get", map[string]any{"taskId": ct.Task.TaskID}).Result, &got)
		if got.Status == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks/get: %s", got.Status)
		}
	}
	// A call without params.task is a plain call.
	plain := r.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"msg": "now"}})
	if !strings.Contains(string(plain.Result), `"structuredContent":{"msg":"now"}`) {
		t.Fatalf("plain call: %s", plain.Result)
	}
}

// Regression: the tools/list answer lost its resultType on 2026-07-28
// (the taskSupport of 2025-11-25 was added to it by re-marshalling), and
// clients of that revision refuse a result without one.
func TestToolsListResultType20260728(t *testing.T) {
	e := newEnv(t, nil)
	r := &raw{t: t, url: e.hs.URL, version: mcp.Version20260728}
	meta := map[string]any{"_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    mcp.Version20260728,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}}
	res := r.call("tools/list", meta)
	var lr struct {
		ResultType string           `json:"resultType"`
		Tools      []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(res.Result, &lr); err != nil || lr.ResultType != "complete" || len(lr.Tools) == 0 {
		t.Fatalf("tools/list: %v %s", err, res.Result)
	}
	if _, ok := lr.Tools[0]["execution"]; ok {
		t.Errorf("taskSupport on 2026-07-28: %v", lr.Tools[0])
	}
}
