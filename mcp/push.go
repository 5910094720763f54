package mcp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandflow/sandflow/host"
)

// A task's status is pushed as it is committed, besides being polled:
// 2025-11-25 sends notifications/tasks/status to the session that created
// or polled the task, on its standalone SSE stream (HTTP) or its pipe
// (stdio); 2026-07-28 sends notifications/tasks on a subscriptions/listen
// stream that names the task (listen.go). Both follow the run with
// host.Watch, the change feed the HTTP API's event stream uses, and
// push when the task's status (or, while it asks, its questions) differ
// from what the client last saw. The SDK can neither send nor route a
// notification it has no type for, so pushes are written beside it: on
// the session's GET stream, one whole event at a time (sseWriter), or on
// the stdio connection. See RATIONALE.md, "Why are MCP task statuses
// pushed beside the SDK?".

// sseWriter is a standalone SSE stream's response writer, shared by the
// SDK's events and the pushes: each Write is one whole event.
type sseWriter struct {
	w      http.ResponseWriter
	mu     sync.Mutex
	closed bool
}

func (s *sseWriter) Header() http.Header { return s.w.Header() }

func (s *sseWriter) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.WriteHeader(code)
}

func (s *sseWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (s *sseWriter) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = http.NewResponseController(s.w).Flush()
}

func (s *sseWriter) Unwrap() http.ResponseWriter { return s.w }

// event writes one server-sent event of a JSON-RPC message.
func (s *sseWriter) event(msg []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return http.ErrHandlerTimeout
	}
	if _, err := fmt.Fprintf(s.w, "event: message\ndata: %s\n\n", msg); err != nil {
		return err
	}
	return http.NewResponseController(s.w).Flush()
}

func (s *sseWriter) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// pushes are where a 2025-11-25 session's pushes go: its GET stream, by
// session id, or its stdio connection; and the tasks each session
// follows.
type pushes struct {
	mu      sync.Mutex
	streams map[string]*sseWriter                 // by MCP session id
	stdio   map[*sdk.ServerSession]sdk.Connection // stdio sessions
	ended   map[*sdk.ServerSession]chan struct{}  // closed when the session ends
	follows map[followKey]bool
}

type followKey struct {
	ss   *sdk.ServerSession
	task string
}

// serveGET serves a 2025-11-25 session's standalone SSE stream, where its
// pushes go while it is open.
func (s *Server) serveGET(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		s.stateful.ServeHTTP(w, r)
		return
	}
	sw := &sseWriter{w: w}
	s.pushes.mu.Lock()
	if s.pushes.streams == nil {
		s.pushes.streams = map[string]*sseWriter{}
	}
	s.pushes.streams[id] = sw
	s.pushes.mu.Unlock()
	defer func() {
		sw.close()
		s.pushes.mu.Lock()
		if s.pushes.streams[id] == sw {
			delete(s.pushes.streams, id)
		}
		s.pushes.mu.Unlock()
	}()
	s.stateful.ServeHTTP(sw, r)
}

// notify sends a notification to a 2025-11-25 session, if it can be
// reached now; a session without an open stream misses it (it polls).
func (s *Server) notify(ss *sdk.ServerSession, method string, params any) error {
	b, err := json.Marshal(params)
	if err != nil {
		return err
	}
	s.pushes.mu.Lock()
	conn := s.pushes.stdio[ss]
	sw := s.pushes.streams[ss.ID()]
	s.pushes.mu.Unlock()
	switch {
	case conn != nil:
		return conn.Write(s.ctx, &jsonrpc.Request{Method: method, Params: b})
	case sw != nil && ss.ID() != "":
		msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": json.RawMessage(b)})
		if err != nil {
			return err
		}
		return sw.event(msg)
	}
	return nil
}

// sessionEnded is closed when a session ends.
func (s *Server) sessionEnded(ss *sdk.ServerSession) <-chan struct{} {
	s.pushes.mu.Lock()
	defer s.pushes.mu.Unlock()
	if ch, ok := s.pushes.ended[ss]; ok {
		return ch
	}
	if s.pushes.ended == nil {
		s.pushes.ended = map[*sdk.ServerSession]chan struct{}{}
	}
	ch := make(chan struct{})
	s.pushes.ended[ss] = ch
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = ss.Wait()
		close(ch)
		s.pushes.mu.Lock()
		delete(s.pushes.ended, ss)
		delete(s.pushes.stdio, ss)
		s.pushes.mu.Unlock()
	}()
	return ch
}

// followSession pushes a 2025-11-25 task's status changes to the session
// until the task ends or the session does; seen is the status the
// session was last told.
func (s *Server) followSession(ss *sdk.ServerSession, c client, ri host.RunInfo, call int, seen string) {
	if ss == nil || c.mrtr {
		return
	}
	key := followKey{ss, taskID(ri.ID, call)}
	s.pushes.mu.Lock()
	if s.pushes.follows[key] {
		s.pushes.mu.Unlock()
		return
	}
	if s.pushes.follows == nil {
		s.pushes.follows = map[followKey]bool{}
	}
	s.pushes.follows[key] = true
	s.pushes.mu.Unlock()
	ended := s.sessionEnded(ss)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.pushes.mu.Lock()
			delete(s.pushes.follows, key)
			s.pushes.mu.Unlock()
		}()
		s.follow(ri.ID, call, c, seen, ended, func(f map[string]any) error {
			return s.notify(ss, "notifications/tasks/status", f)
		})
	}()
}

// follow calls send with a task's fields each time its status, or the
// questions it waits on, change from seen, until the task ends (after
// sending its end), done closes, the server closes, or send fails.
//
// Each change is read at once: the change that ends the run is pushed as
// soon as it is committed. A busy run changes many times a millisecond (a
// fan-out's agent calls), and while it is driven a read is the driver's
// last committed snapshot, so a change costs a copy and a comparison; the
// task's fields are built only when what the client sees may differ
// (runKey). See RATIONALE.md, "Why are MCP task statuses pushed beside
// the SDK?".
func (s *Server) follow(runID string, call int, c client, seen string, done <-chan struct{}, send func(map[string]any) error) {
	changed, stop := s.h.Watch(runID)
	defer stop()
	last := ""
	for first := true; ; first = false {
		if !first {
			select {
			case <-changed:
			case <-done:
				return
			case <-s.ctx.Done():
				return
			}
		}
		ri, err := s.h.Run(s.ctx, runID)
		if err != nil {
			return
		}
		ri = view(ri, call)
		k := runKey(ri)
		if k == last {
			continue
		}
		last = k
		f, err := s.taskFields(s.ctx, c, ri, call)
		if err != nil {
			return
		}
		if st := statusKey(f); st != seen {
			if err := send(f); err != nil {
				return
			}
			seen = st
		}
		if ri.Status.Terminal() {
			return
		}
	}
}

// runKey is what of a run a task's status is made of: its status and the
// questions it waits on. Two reads with the same key give the same task
// status; a different key may (a question answered meanwhile, say).
func runKey(ri host.RunInfo) string {
	k := string(ri.Status)
	for _, w := range ri.Waiting {
		if w.Kind == "ask" {
			k += "," + w.AskID
		}
	}
	return k
}

// statusKey is what a client is told again when it changes: the status
// and the questions the task waits on.
func statusKey(f map[string]any) string {
	st, _ := f["status"].(string)
	if reqs, ok := f["inputRequests"].(sdk.InputRequestMap); ok && len(reqs) > 0 {
		keys := make([]string, 0, len(reqs))
		for k := range reqs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		st += ":" + strings.Join(keys, ",")
	}
	return st
}

// stdioConn registers a stdio session's connection for its pushes.
func (s *Server) stdioConn(ss *sdk.ServerSession, conn sdk.Connection) {
	s.pushes.mu.Lock()
	if s.pushes.stdio == nil {
		s.pushes.stdio = map[*sdk.ServerSession]sdk.Connection{}
	}
	s.pushes.stdio[ss] = conn
	s.pushes.mu.Unlock()
	s.sessionEnded(ss)
}
