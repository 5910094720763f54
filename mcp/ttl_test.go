package mcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/mcp"
)

// clock is a clock the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A task reports the ttl its client asked for, bounded by the server's
// maximum, or the default; once it has ended and its ttl has passed, its
// result is no longer served (invalid params, "expired"), while its run
// and history stay.
func TestTaskTTL20251125(t *testing.T) {
	clk := &clock{now: time.Now()}
	e := newEnv(t, &mcp.Options{TaskTTL: 10 * time.Minute, MaxTaskTTL: time.Hour, Now: clk.Now})
	r := &raw{t: t, url: e.hs.URL}
	r.call("initialize", map[string]any{"protocolVersion": mcp.Version20251125, "clientInfo": map[string]any{"name": "raw", "version": "1"},
		"capabilities": map[string]any{"tasks": map[string]any{"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}}})
	r.version = mcp.Version20251125
	r.notify("notifications/initialized")
	create := func(task map[string]any) (string, int64) {
		t.Helper()
		res := r.call("tools/call", map[string]any{"name": "echo", "arguments": map[string]any{"msg": "m"}, "task": task})
		var ct struct {
			Task struct {
				TaskID string `json:"taskId"`
				TTL    *int64 `json:"ttl"`
			} `json:"task"`
		}
		if err := json.Unmarshal(res.Result, &ct); err != nil || ct.Task.TaskID == "" || ct.Task.TTL == nil {
			t.Fatalf("tools/call %v: %v %s", task, err, res.Result)
		}
		return ct.Task.TaskID, *ct.Task.TTL
	}
	get := func(id string) (status string, ttl int64, rerr *rpcResponse) {
		t.Helper()
		res := r.call("tasks/get", map[string]any{"taskId": id})
		if res.Error != nil {
			return "", 0, &res
		}
		var got struct {
			Status string `json:"status"`
			TTL    int64  `json:"ttl"`
		}
		if err := json.Unmarshal(res.Result, &got); err != nil {
			t.Fatal(err)
		}
		return got.Status, got.TTL, nil
	}
	for _, c := range []struct {
		task map[string]any
		want int64
	}{
		{map[string]any{"ttl": 60000}, 60000},
		{map[string]any{"ttl": 10 * 3600000}, 3600000}, // bounded by MaxTaskTTL
		{map[string]any{}, 600000},                     // TaskTTL
	} {
		id, ttl := create(c.task)
		if ttl != c.want {
			t.Errorf("ttl %v: created with %d, want %d", c.task, ttl, c.want)
		}
		if _, ttl, _ := get(id); ttl != c.want {
			t.Errorf("ttl %v: tasks/get says %d, want %d", c.task, ttl, c.want)
		}
	}

	short, _ := create(map[string]any{"ttl": 60000})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		status, _, rerr := get(short)
		if rerr != nil {
			t.Fatalf("before its ttl: %+v", rerr.Error)
		}
		if status == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s", short, status)
		}
	}
	clk.advance(2 * time.Minute)
	for _, m := range []string{"tasks/get", "tasks/result"} {
		res := r.call(m, map[string]any{"taskId": short})
		if res.Error == nil || res.Error.Code != jsonrpc.CodeInvalidParams || !strings.Contains(res.Error.Message, "expired") {
			t.Errorf("%s past the ttl: %+v %s", m, res.Error, res.Result)
		}
	}
	var list struct {
		Tasks []struct {
			TaskID string `json:"taskId"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(r.call("tasks/list", map[string]any{}).Result, &list); err != nil {
		t.Fatal(err)
	}
	for _, tk := range list.Tasks {
		if tk.TaskID == short {
			t.Errorf("tasks/list lists the expired task")
		}
	}
	// The run and its history stay.
	ri, err := e.H.Run(context.Background(), short)
	if err != nil || !strings.Contains(string(ri.Result), `"msg":"m"`) {
		t.Fatalf("the expired task's run: %v %+v", err, ri)
	}
	if evs, err := e.H.Events(context.Background(), short); err != nil || len(evs) == 0 {
		t.Fatalf("the expired task's history: %v %d events", err, len(evs))
	}
}

// 2026-07-28 has no way to ask for a ttl: a task has the server's
// default, and expires the same way.
func TestTaskTTL20260728(t *testing.T) {
	clk := &clock{now: time.Now()}
	e := newEnv(t, &mcp.Options{TaskTTL: time.Minute, Now: clk.Now})
	cs := e.connect(mcp.Version20260728, nil, true)
	id := taskID(t, call(t, cs, "sum", map[string]any{"a": 1, "b": 2}))
	poll(t, cs, id, "completed")
	var f struct {
		TTLMs int64 `json:"ttlMs"`
	}
	res := (&raw{t: t, url: e.hs.URL, version: mcp.Version20260728}).call("tasks/get", map[string]any{"taskId": id, "_meta": meta2026(true)})
	if err := json.Unmarshal(res.Result, &f); err != nil || f.TTLMs != 60000 {
		t.Fatalf("ttlMs: %v %s", err, res.Result)
	}
	clk.advance(2 * time.Minute)
	if _, err := taskCall(t, cs, "tasks/get", id, nil); wireCode(err) != jsonrpc.CodeInvalidParams || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("past the ttl: %v", err)
	}
	if ri, err := e.H.Run(context.Background(), id); err != nil || !ri.Status.Terminal() {
		t.Fatalf("the expired task's run: %v %+v", err, ri)
	}
}

// A task's ttl is kept with its record: after a restart, polled from a
// new session, a task expires when its client asked, not after the
// default from its run's creation. Both kinds: an execute call that
// became a task (echo) and a task tool's call (sum).
func TestTaskTTLSurvivesRestart(t *testing.T) {
	clk := &clock{now: time.Now()}
	e := newEnv(t, &mcp.Options{TaskTTL: 10 * time.Minute, MaxTaskTTL: 2 * time.Hour, Now: clk.Now})
	open := func() *raw {
		r := &raw{t: t, url: e.hs.URL}
		r.call("initialize", map[string]any{"protocolVersion": mcp.Version20251125, "clientInfo": map[string]any{"name": "raw", "version": "1"},
			"capabilities": map[string]any{"tasks": map[string]any{"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}}})
		r.version = mcp.Version20251125
		r.notify("notifications/initialized")
		return r
	}
	get := func(r *raw, id string) (status string, ttl int64, rerr *rpcResponse) {
		t.Helper()
		res := r.call("tasks/get", map[string]any{"taskId": id})
		if res.Error != nil {
			return "", 0, &res
		}
		var got struct {
			Status string `json:"status"`
			TTL    int64  `json:"ttl"`
		}
		if err := json.Unmarshal(res.Result, &got); err != nil {
			t.Fatal(err)
		}
		return got.Status, got.TTL, nil
	}
	r := open()
	var ids []string
	for _, c := range []struct{ tool, args string }{{"echo", `{"msg":"m"}`}, {"sum", `{"a":1,"b":2}`}} {
		res := r.call("tools/call", map[string]any{"name": c.tool, "arguments": json.RawMessage(c.args), "task": map[string]any{"ttl": 3600000}})
		var ct struct {
			Task struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		}
		if err := json.Unmarshal(res.Result, &ct); err != nil || ct.Task.TaskID == "" {
			t.Fatalf("tools/call %s: %v %s", c.tool, err, res.Result)
		}
		id := ct.Task.TaskID
		testhost.WaitUntil(t, c.tool+" completed", func() bool {
			status, _, rerr := get(r, id)
			return rerr == nil && status == "completed"
		})
		ids = append(ids, id)
	}

	e.restart()
	r = open()                    // a new MCP session: the tasks are not its own
	clk.advance(30 * time.Minute) // past the default ttl, within the one asked for
	for _, id := range ids {
		if status, ttl, rerr := get(r, id); rerr != nil || status != "completed" || ttl != 3600000 {
			t.Errorf("%s after a restart, within its ttl: %s %d %+v", id, status, ttl, rerr)
		}
	}
	clk.advance(31 * time.Minute) // past the ttl asked for
	for _, id := range ids {
		if _, _, rerr := get(r, id); rerr == nil || rerr.Error.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rerr.Error.Message, "expired") {
			t.Errorf("%s after a restart, past its ttl: %+v", id, rerr)
		}
	}
}
