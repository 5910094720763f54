package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A 2026-07-28 client listens for task statuses with subscriptions/listen
// naming tasks (notifications.taskIds). The SDK serves subscriptions/listen
// but its types have no taskIds, so such a request is served here: over
// streamable HTTP as an SSE stream, over stdio as messages on the
// connection. The first message acknowledges the tasks it follows (those
// that exist and have not expired) and, when asked, the tool list's
// changes; then each task's state as tasks/get would give it, once at the
// start and again each time its status or questions change, as
// notifications/tasks; every message carries the listen request's id as
// _meta["io.modelcontextprotocol/subscriptionId"]. The listen ends with the
// request's result once every task it follows has ended (unless it
// follows the tool list too), or when the server closes; a client that
// wants no more closes the stream (HTTP) or cancels the request
// (notifications/cancelled, stdio).

// subscriptionID is the _meta key that ties a message to its listen.
const subscriptionID = "io.modelcontextprotocol/subscriptionId"

type listenRequest struct {
	ID     json.RawMessage `json:"id"`
	Params struct {
		Meta          map[string]json.RawMessage `json:"_meta"`
		Notifications struct {
			TaskIDs          []string `json:"taskIds"`
			ToolsListChanged bool     `json:"toolsListChanged"`
		} `json:"notifications"`
	} `json:"params"`
}

// taskListen reads a body that is a subscriptions/listen naming tasks.
func taskListen(body []byte) (listenRequest, bool) {
	var lr listenRequest
	if !bytes.Contains(body, []byte(`"subscriptions/listen"`)) || !bytes.Contains(body, []byte(`"taskIds"`)) {
		return lr, false
	}
	var m struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &m) != nil || m.Method != "subscriptions/listen" || json.Unmarshal(body, &lr) != nil || len(lr.ID) == 0 {
		return lr, false
	}
	return lr, len(lr.Params.Notifications.TaskIDs) > 0
}

// declaresTasks: the request's client capabilities declare the tasks
// extension.
func declaresTasks(meta map[string]json.RawMessage) bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(meta["io.modelcontextprotocol/clientCapabilities"], &caps) != nil {
		return false
	}
	_, ok := caps.Extensions[TasksExtension]
	return ok
}

func writeRPCError(w http.ResponseWriter, id json.RawMessage, err error) {
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		we = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": we})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest) // as the SDK answers a 2026-07-28 error
	w.Write(b)
}

// listen serves a subscriptions/listen that names tasks over HTTP.
func (s *Server) listen(w http.ResponseWriter, r *http.Request, lr listenRequest) {
	if !declaresTasks(lr.Params.Meta) {
		writeRPCError(w, lr.ID, missingTasks("subscriptions/listen with notifications.taskIds"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w}
	defer sw.close()
	send := func(msg map[string]any) error {
		msg["jsonrpc"] = "2.0"
		b, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		return sw.event(b)
	}
	s.serveListen(r.Context(), lr, listenSink{
		notify: func(method string, params map[string]any) error {
			return send(map[string]any{"method": method, "params": params})
		},
		end: func(res map[string]any) error { return send(map[string]any{"id": lr.ID, "result": res}) },
	})
}

// listenSink is where a listen's messages go: its notifications, and its
// result at the end.
type listenSink struct {
	notify func(method string, params map[string]any) error
	end    func(result map[string]any) error
}

// serveListen follows a listen's tasks until they have ended, ctx is done
// (the client went away) or the server closes.
func (s *Server) serveListen(ctx context.Context, lr listenRequest, out listenSink) {
	c := client{version: Version20260728, mrtr: true, tasks: true}
	type followed struct {
		run  string
		call int
	}
	var agreed []followed
	ids := []string{}
	for _, id := range lr.Params.Notifications.TaskIDs {
		ri, call, err := s.run(ctx, &taskParams{TaskID: id})
		if err != nil {
			continue // unknown or expired: not followed
		}
		agreed = append(agreed, followed{ri.ID, call})
		ids = append(ids, id)
	}
	meta := map[string]any{subscriptionID: lr.ID}
	notes := map[string]any{"taskIds": ids}
	if lr.Params.Notifications.ToolsListChanged {
		notes["toolsListChanged"] = true
	}
	if out.notify("notifications/subscriptions/acknowledged", map[string]any{"notifications": notes, "_meta": meta}) != nil {
		return
	}
	gone := ctx.Done()
	var wg sync.WaitGroup
	for _, f := range agreed {
		wg.Add(1)
		s.wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.wg.Done()
			s.follow(f.run, f.call, c, "", gone, func(t map[string]any) error {
				t["_meta"] = meta
				return out.notify("notifications/tasks", t)
			})
		}()
	}
	allEnded := make(chan struct{})
	go func() {
		wg.Wait()
		close(allEnded)
	}()
	var tools chan struct{}
	if lr.Params.Notifications.ToolsListChanged {
		tools = make(chan struct{}, 1)
		s.toolsChanged.Store(tools, true)
		defer s.toolsChanged.Delete(tools)
		allEnded = nil // the tool list never ends
	}
	for {
		select {
		case <-tools:
			if out.notify("notifications/tools/list_changed", map[string]any{"_meta": meta}) != nil {
				return
			}
			continue
		case <-gone:
			return
		case <-allEnded:
		case <-s.ctx.Done():
		}
		break
	}
	wg.Wait()
	_ = out.end(map[string]any{"resultType": "complete", "_meta": meta})
}

// stdioListens are a stdio connection's listens, by request id, so that
// a client's notifications/cancelled ends one, and the connection's end
// ends them all.
type stdioListens struct {
	mu     sync.Mutex
	cancel map[string]context.CancelFunc
}

func (l *stdioListens) add(id string, cancel context.CancelFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel == nil {
		l.cancel = map[string]context.CancelFunc{}
	}
	l.cancel[id] = cancel
}

// end ends the listen with that id, or every listen when id is "".
func (l *stdioListens) end(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, cancel := range l.cancel {
		if id == "" || k == id {
			cancel()
			delete(l.cancel, k)
		}
	}
}

// stdioListen serves a message a stdio client sent when it is a
// subscriptions/listen naming tasks, and reports whether it did (the SDK
// does not see it then). A notifications/cancelled ends the listen it
// names and goes on to the SDK.
func (s *Server) stdioListen(c *liftConn, req *jsonrpc.Request) bool {
	if req.Method == "notifications/cancelled" {
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(req.Params, &p) == nil && len(p.RequestID) > 0 {
			c.listens.end(string(p.RequestID))
		}
		return false
	}
	if req.Method != "subscriptions/listen" || !req.IsCall() || !bytes.Contains(req.Params, []byte(`"taskIds"`)) {
		return false
	}
	var lr listenRequest
	if json.Unmarshal(req.Params, &lr.Params) != nil || len(lr.Params.Notifications.TaskIDs) == 0 {
		return false
	}
	lr.ID, _ = json.Marshal(req.ID.Raw())
	write := func(m jsonrpc.Message) error { return c.Connection.Write(s.ctx, m) }
	if !declaresTasks(lr.Params.Meta) {
		_ = write(&jsonrpc.Response{ID: req.ID, Error: missingTasks("subscriptions/listen with notifications.taskIds")})
		return true
	}
	ctx, cancel := context.WithCancel(s.ctx)
	c.listens.add(string(lr.ID), cancel)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer c.listens.end(string(lr.ID))
		s.serveListen(ctx, lr, listenSink{
			notify: func(method string, params map[string]any) error {
				b, err := json.Marshal(params)
				if err != nil {
					return err
				}
				return write(&jsonrpc.Request{Method: method, Params: b})
			},
			end: func(res map[string]any) error {
				b, err := json.Marshal(res)
				if err != nil {
					return err
				}
				return write(&jsonrpc.Response{ID: req.ID, Result: b})
			},
		})
	}()
	return true
}
