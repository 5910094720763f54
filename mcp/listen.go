package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A 2026-07-28 client listens for task statuses with subscriptions/listen
// naming tasks (notifications.taskIds). The SDK serves subscriptions/listen
// but its types have no taskIds, so such a request is served here, over
// streamable HTTP: an SSE stream whose first event acknowledges the tasks
// it follows (those that exist and have not expired) and, when asked,
// the tool list's changes; then each task's state as tasks/get would
// give it, once at the start and again each time its status or questions
// change, as notifications/tasks; every message carries the listen
// request's id as _meta["io.modelcontextprotocol/subscriptionId"]. The
// stream ends with the request's result once every task it follows has
// ended (unless it follows the tool list too), or when the server
// closes; a client that wants no more closes it.

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

// listen serves a subscriptions/listen that names tasks.
func (s *Server) listen(w http.ResponseWriter, r *http.Request, lr listenRequest) {
	if !declaresTasks(lr.Params.Meta) {
		writeRPCError(w, lr.ID, missingTasks("subscriptions/listen with notifications.taskIds"))
		return
	}
	ctx := r.Context()
	c := client{version: Version20260728, mrtr: true, tasks: true}
	type followed struct {
		id   string
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
		agreed = append(agreed, followed{id, ri.ID, call})
		ids = append(ids, id)
	}
	meta := map[string]any{subscriptionID: lr.ID}
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
	notes := map[string]any{"taskIds": ids}
	if lr.Params.Notifications.ToolsListChanged {
		notes["toolsListChanged"] = true
	}
	if send(map[string]any{"method": "notifications/subscriptions/acknowledged",
		"params": map[string]any{"notifications": notes, "_meta": meta}}) != nil {
		return
	}
	gone := r.Context().Done()
	var wg sync.WaitGroup
	for _, f := range agreed {
		wg.Add(1)
		s.wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.wg.Done()
			s.follow(f.run, f.call, c, "", gone, func(t map[string]any) error {
				t["_meta"] = meta
				return send(map[string]any{"method": "notifications/tasks", "params": t})
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
			if send(map[string]any{"method": "notifications/tools/list_changed", "params": map[string]any{"_meta": meta}}) != nil {
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
	_ = send(map[string]any{"id": lr.ID, "result": map[string]any{"resultType": "complete", "_meta": meta}})
}
