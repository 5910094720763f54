package mcp_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/sandflow/sandflow/mcp"
)

// meta2026 is a 2026-07-28 request's _meta: its version, client and
// capabilities; tasks declares the tasks extension.
func meta2026(tasks bool) map[string]any {
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{mcp.TasksExtension: map[string]any{}}
	}
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    mcp.Version20260728,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
}

// requiresTasks checks an error is -32021 naming the tasks extension in
// its data.
func requiresTasks(t *testing.T, what string, code int, msg string, data json.RawMessage) {
	t.Helper()
	var d struct {
		RequiredCapabilities struct {
			Extensions map[string]json.RawMessage `json:"extensions"`
		} `json:"requiredCapabilities"`
	}
	if code != mcp.CodeMissingClientCapability || !strings.Contains(msg, mcp.TasksExtension) || json.Unmarshal(data, &d) != nil ||
		d.RequiredCapabilities.Extensions[mcp.TasksExtension] == nil {
		t.Errorf("%s: code %d %q data %s, want -32021 naming %s", what, code, msg, data, mcp.TasksExtension)
	}
}

// On 2026-07-28 a request that needs the tasks extension its client
// capabilities do not declare is refused with -32021 (missing required
// client capability), whose data names the extension; nothing is
// started. Declared, the same requests are served.
func TestTasksNeedTheExtension20260728(t *testing.T) {
	e := newEnv(t, nil)
	r := &raw{t: t, url: e.hs.URL, version: mcp.Version20260728}
	before := e.runs()
	// A task asked for the 2025-11-25 way, without the extension.
	res := r.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"msg": "x"}, "task": map[string]any{"ttl": 1000}, "_meta": meta2026(false)})
	if res.Error == nil {
		t.Fatalf("tools/call with params.task: %s", res.Result)
	}
	requiresTasks(t, "tools/call with params.task", res.Error.Code, res.Error.Message, res.Error.Data)
	if n := e.runs(); n != before {
		t.Errorf("the refused call started %d runs", n-before)
	}
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		res := r.call(m, map[string]any{"taskId": "any", "_meta": meta2026(false)})
		if res.Error == nil {
			t.Fatalf("%s: %s", m, res.Result)
		}
		requiresTasks(t, m, res.Error.Code, res.Error.Message, res.Error.Data)
	}
	// Declared: the call is served (the server decides whether it is a
	// task), and an unknown task is invalid params.
	res = r.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"msg": "x"}, "task": map[string]any{}, "_meta": meta2026(true)})
	if res.Error != nil || !strings.Contains(string(res.Result), `"msg":"x"`) {
		t.Fatalf("declared: %+v %s", res.Error, res.Result)
	}
	if res := r.call("tasks/get", map[string]any{"taskId": "any", "_meta": meta2026(true)}); res.Error == nil || res.Error.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("declared tasks/get: %+v", res.Error)
	}

	// The SDK's client, without the extension, polling a task it got
	// with it.
	with := e.connect(mcp.Version20260728, nil, true)
	id := taskID(t, call(t, with, "approval", map[string]any{"what": "it"}))
	without := e.connect(mcp.Version20260728, nil, false)
	_, err := taskCall(t, without, "tasks/get", id, nil)
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("tasks/get without the extension: %v", err)
	}
	requiresTasks(t, "SDK tasks/get", int(we.Code), we.Message, we.Data)
	poll(t, with, id, "input_required")
}
