package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/mcp"
)

// pushed is a task status notification a client received.
type pushed struct {
	Method string `json:"method"`
	Params struct {
		TaskID        string                     `json:"taskId"`
		Status        string                     `json:"status"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		Result        *toolRes                   `json:"result"`
		Meta          map[string]any             `json:"_meta"`
	} `json:"params"`
}

// sse reads the JSON-RPC messages of a server-sent event stream.
func sse(t testing.TB, resp *http.Response) <-chan json.RawMessage {
	ch := make(chan json.RawMessage, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				ch <- json.RawMessage(line)
			}
		}
	}()
	return ch
}

// get opens a 2025-11-25 session's standalone SSE stream.
func (r *raw) get() <-chan json.RawMessage {
	r.t.Helper()
	req, _ := http.NewRequest("GET", r.url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", r.session)
	req.Header.Set("Mcp-Protocol-Version", r.version)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		r.t.Fatalf("GET: %v %v", err, resp)
	}
	r.t.Cleanup(func() { resp.Body.Close() })
	return sse(r.t, resp)
}

// answerWhenAsked collects a task's pushed statuses until it ends,
// answering its question with yes the first time it is input_required.
func answerWhenAsked(t *testing.T, e *env, id, first, method string, msgs <-chan json.RawMessage) []string {
	t.Helper()
	statuses := []string{first}
	answered := false
	answer := func() {
		qs, err := e.H.Questions(context.Background(), true)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.RunID == id {
				if _, err := e.H.AnswerAsk(context.Background(), q.ID, host.Answer{OptionID: "yes"}); err != nil {
					t.Fatal(err)
				}
				answered = true
			}
		}
	}
	if first == "input_required" {
		answer()
	}
	// first is "" when the client has not seen the task: its first push
	// is its state then.
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("the stream ended after %v", statuses)
			}
			var n pushed
			if json.Unmarshal(m, &n) != nil || n.Method != method || n.Params.TaskID != id {
				continue
			}
			statuses = append(statuses, n.Params.Status)
			switch n.Params.Status {
			case "input_required":
				if method == "notifications/tasks" && len(n.Params.InputRequests) != 1 {
					t.Errorf("input_required without its question: %s", m)
				}
				if !answered {
					answer()
				}
			case "completed", "failed", "cancelled":
				if method == "notifications/tasks" && (n.Params.Result == nil || !strings.Contains(string(n.Params.Result.StructuredContent), `"optionId":"yes"`)) {
					t.Errorf("completed without its result: %s", m)
				}
				return statuses
			}
		case <-timeout:
			t.Fatalf("statuses so far %v", statuses)
		}
	}
}

// inOrder checks a task's statuses, the one it was created with then the
// pushed ones: each differs from the one before and follows the task
// lifecycle, it asked, and it ended completed.
func inOrder(t *testing.T, statuses []string) {
	t.Helper()
	next := map[string][]string{
		"working":        {"input_required", "completed", "failed", "cancelled"},
		"input_required": {"working", "completed", "failed", "cancelled"},
	}
	for i := 1; i < len(statuses); i++ {
		if !slices.Contains(next[statuses[i-1]], statuses[i]) {
			t.Fatalf("statuses %v: %s after %s", statuses, statuses[i], statuses[i-1])
		}
	}
	if !slices.Contains(statuses, "input_required") || statuses[len(statuses)-1] != "completed" {
		t.Fatalf("statuses %v", statuses)
	}
}

// A 2025-11-25 session is pushed its task's status changes, in order, on
// its standalone SSE stream: the question, and the end once answered.
func TestTaskStatusPushed20251125(t *testing.T) {
	e := newEnv(t, nil)
	r := &raw{t: t, url: e.hs.URL}
	r.call("initialize", map[string]any{"protocolVersion": mcp.Version20251125, "clientInfo": map[string]any{"name": "raw", "version": "1"},
		"capabilities": map[string]any{"tasks": map[string]any{"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}}})
	r.version = mcp.Version20251125
	r.notify("notifications/initialized")
	msgs := r.get()
	res := r.call("tools/call", map[string]any{"name": "approval", "arguments": map[string]any{"what": "the push"}, "task": map[string]any{}})
	var ct struct {
		Task struct{ TaskID, Status string } `json:"task"`
	}
	if err := json.Unmarshal(res.Result, &ct); err != nil || ct.Task.TaskID == "" {
		t.Fatalf("tools/call: %v %s", err, res.Result)
	}
	inOrder(t, answerWhenAsked(t, e, ct.Task.TaskID, ct.Task.Status, "notifications/tasks/status", msgs))
}

// taskTransport is an SDK client's stdio transport that declares tasks
// and asks for one on each tools/call (capabilities.tasks and
// params.task, which the SDK's types lack), and
// records the task status notifications (which the SDK does not know).
type taskTransport struct {
	sdk.Transport
	got, results chan json.RawMessage
}

func (t *taskTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	return &taskConn{c, t.got, t.results}, err
}

type taskConn struct {
	sdk.Connection
	got, results chan json.RawMessage
}

func (c *taskConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if req, ok := m.(*jsonrpc.Request); ok && (req.Method == "tools/call" || req.Method == "initialize") {
		var p map[string]any
		if json.Unmarshal(req.Params, &p) == nil {
			if req.Method == "tools/call" {
				p["task"] = map[string]any{}
			} else if caps, ok := p["capabilities"].(map[string]any); ok {
				caps["tasks"] = map[string]any{"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
			}
			req.Params, _ = json.Marshal(p)
		}
	}
	return c.Connection.Write(ctx, m)
}

func (c *taskConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if req, ok := m.(*jsonrpc.Request); ok && err == nil && req.Method == "notifications/tasks/status" {
		b, _ := json.Marshal(map[string]any{"method": req.Method, "params": req.Params})
		c.got <- b
	}
	if resp, ok := m.(*jsonrpc.Response); ok && err == nil && resp.Result != nil {
		c.results <- resp.Result
	}
	return m, err
}

// The same over stdio, with the SDK's client.
func TestTaskStatusPushedOnStdio(t *testing.T) {
	e := newEnv(t, nil)
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.ServeStdio(ctx, st) }()
	got, results := make(chan json.RawMessage, 64), make(chan json.RawMessage, 64)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).
		Connect(context.Background(), &taskTransport{ct, got, results}, &sdk.ClientSessionOptions{ProtocolVersion: mcp.Version20251125})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		cancel()
		<-done
	})
	// The SDK's client reads a CreateTaskResult as an empty
	// CallToolResult: the task is read from the raw result.
	if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "approval", Arguments: map[string]any{"what": "stdio"}}); err != nil {
		t.Fatal(err)
	}
	var created struct {
		Task struct{ TaskID, Status string } `json:"task"`
	}
	for created.Task.TaskID == "" {
		select {
		case r := <-results:
			if err := json.Unmarshal(r, &created); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("the call's result is not a task")
		}
	}
	statuses := answerWhenAsked(t, e, created.Task.TaskID, created.Task.Status, "notifications/tasks/status", got)
	inOrder(t, statuses)
}

// listen opens a 2026-07-28 subscriptions/listen stream for tasks.
func listen(t testing.TB, e *env, tasks bool, ids ...string) (*http.Response, <-chan json.RawMessage) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen",
		"params": map[string]any{"notifications": map[string]any{"taskIds": ids}, "_meta": meta2026(tasks)}})
	req, _ := http.NewRequest("POST", e.hs.URL, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", mcp.Version20260728)
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	return resp, sse(t, resp)
}

// A 2026-07-28 client that listens for its task is pushed the task's
// state, as tasks/get gives it, in order: its question, then its end
// with the result; the listen is acknowledged first and ends with its
// result once the task has. Without the tasks extension the listen is
// refused with -32021.
func TestTaskStatusPushed20260728(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.connect(mcp.Version20260728, nil, true)
	id := taskID(t, call(t, cs, "approval", map[string]any{"what": "the listen"}))

	resp, _ := listen(t, e, false, id)
	var refused rpcResponse
	if err := json.NewDecoder(resp.Body).Decode(&refused); err != nil || refused.Error == nil {
		t.Fatalf("listen without the extension: %d %v %+v", resp.StatusCode, err, refused)
	}
	requiresTasks(t, "subscriptions/listen", refused.Error.Code, refused.Error.Message, refused.Error.Data)

	_, msgs := listen(t, e, true, id, "no-such-task")
	var ack struct {
		Method string `json:"method"`
		Params struct {
			Notifications struct {
				TaskIDs []string `json:"taskIds"`
			} `json:"notifications"`
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal(<-msgs, &ack); err != nil || ack.Method != "notifications/subscriptions/acknowledged" ||
		!slices.Equal(ack.Params.Notifications.TaskIDs, []string{id}) || ack.Params.Meta["io.modelcontextprotocol/subscriptionId"] != float64(7) {
		t.Fatalf("ack %+v %v", ack, err)
	}
	statuses := answerWhenAsked(t, e, id, "", "notifications/tasks", msgs)
	inOrder(t, statuses[1:])
	for m := range msgs {
		var end struct {
			ID     int `json:"id"`
			Result struct {
				ResultType string `json:"resultType"`
			} `json:"result"`
		}
		if json.Unmarshal(m, &end) == nil && end.ID == 7 && end.Result.ResultType == "complete" {
			return
		}
		t.Fatalf("after the end: %s", m)
	}
	t.Fatal("the listen ended without its result")
}

// rawStdio is a 2026-07-28 client speaking JSON-RPC to ServeStdio over
// in-memory pipes, as a desktop client does on sandflow mcp's stdin and
// stdout; msgs are the messages it reads.
type rawStdio struct {
	t    *testing.T
	conn sdk.Connection
	msgs chan json.RawMessage
}

func (e *env) rawStdio() *rawStdio {
	e.t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.ServeStdio(ctx, st) }()
	conn, err := ct.Connect(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	r := &rawStdio{t: e.t.(*testing.T), conn: conn, msgs: make(chan json.RawMessage, 64)}
	go func() {
		defer close(r.msgs)
		for {
			m, err := conn.Read(ctx)
			if err != nil {
				return
			}
			b, err := jsonrpc.EncodeMessage(m)
			if err == nil {
				r.msgs <- b
			}
		}
	}()
	e.t.Cleanup(func() {
		conn.Close()
		cancel()
		<-done
	})
	return r
}

// send writes a request (id > 0) or a notification (id 0), with the
// era's _meta added to its params.
func (r *rawStdio) send(id int64, method string, params map[string]any, tasks bool) {
	r.t.Helper()
	params["_meta"] = meta2026(tasks)
	b, _ := json.Marshal(params)
	req := &jsonrpc.Request{Method: method, Params: b}
	if id > 0 {
		var err error
		if req.ID, err = jsonrpc.MakeID(float64(id)); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := r.conn.Write(context.Background(), req); err != nil {
		r.t.Fatal(err)
	}
}

// response waits for the response to the request with that id.
func (r *rawStdio) response(id int64) rpcResponse {
	r.t.Helper()
	for m := range r.msgs {
		var res rpcResponse
		var got struct {
			ID int64 `json:"id"`
		}
		if json.Unmarshal(m, &got) == nil && got.ID == id && json.Unmarshal(m, &res) == nil {
			return res
		}
	}
	r.t.Fatalf("the connection ended before the response to %d", id)
	return rpcResponse{}
}

// The 2026-07-28 listen over stdio: refused without the tasks extension;
// with it, acknowledged, then the task's state pushed in order (its
// question, then its end with the result), then the listen's result.
func TestTaskStatusPushedOnStdio20260728(t *testing.T) {
	e := newEnv(t, nil)
	r := e.rawStdio()
	r.send(1, "tools/call", map[string]any{"name": "approval", "arguments": map[string]any{"what": "the stdio listen"}}, true)
	var created struct {
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
	}
	if res := r.response(1); res.Error != nil || json.Unmarshal(res.Result, &created) != nil || created.ResultType != "task" || created.TaskID == "" {
		t.Fatalf("tools/call: %+v %s", res.Error, res.Result)
	}
	id := created.TaskID
	listenFor := map[string]any{"notifications": map[string]any{"taskIds": []string{id}}}

	r.send(2, "subscriptions/listen", listenFor, false)
	refused := r.response(2)
	if refused.Error == nil {
		t.Fatalf("listen without the extension: %s", refused.Result)
	}
	requiresTasks(t, "subscriptions/listen", refused.Error.Code, refused.Error.Message, refused.Error.Data)

	r.send(3, "subscriptions/listen", listenFor, true)
	var ack struct {
		Method string `json:"method"`
		Params struct {
			Notifications struct {
				TaskIDs []string `json:"taskIds"`
			} `json:"notifications"`
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	for ack.Method != "notifications/subscriptions/acknowledged" {
		m, ok := <-r.msgs
		if !ok {
			t.Fatal("the connection ended before the listen's acknowledgement")
		}
		if err := json.Unmarshal(m, &ack); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(ack.Params.Notifications.TaskIDs, []string{id}) || ack.Params.Meta["io.modelcontextprotocol/subscriptionId"] != float64(3) {
		t.Fatalf("ack %+v", ack)
	}
	statuses := answerWhenAsked(t, e, id, "", "notifications/tasks", r.msgs)
	inOrder(t, statuses[1:])
	var end struct {
		Result struct {
			ResultType string         `json:"resultType"`
			Meta       map[string]any `json:"_meta"`
		} `json:"result"`
	}
	if res := r.response(3); res.Error != nil || json.Unmarshal(res.Result, &end.Result) != nil || end.Result.ResultType != "complete" ||
		end.Result.Meta["io.modelcontextprotocol/subscriptionId"] != float64(3) {
		t.Fatalf("the listen's result: %+v %s", res.Error, res.Result)
	}
}
