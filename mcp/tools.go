package mcp

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/session"
)

// toolSet is what the SDK server lists: the host's tools and the
// session's task_wait and task_cancel, by name. Its lock is held while
// the SDK's list is brought up to date, so two syncs do not interleave.
type toolSet struct {
	mu    sync.Mutex
	tools map[string]host.Tool
	// sig is the list's versions, to see it changed.
	sig string
}

func (ts *toolSet) get(name string) (host.Tool, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.tools[name]
	return t, ok
}

// syncTools brings the SDK's tool list up to the host's plugins; the SDK
// tells connected clients the list changed.
func (s *Server) syncTools(ctx context.Context) error {
	ss, err := s.sessions.Open(ctx, "mcp-tools")
	if err != nil {
		return err
	}
	tools, err := ss.Tools(ctx) // adds task_wait, task_cancel and a serve tool's taskId
	if err != nil {
		return err
	}
	plugins, err := s.h.Plugins(ctx)
	if err != nil {
		return err
	}
	outputs := map[string]json.RawMessage{}
	for _, p := range plugins {
		if len(p.Manifest.OutputSchema) > 0 {
			outputs[p.Manifest.Name+"@"+strconv.Itoa(p.Version)] = p.Manifest.OutputSchema
		}
	}
	var sig strings.Builder
	next := map[string]host.Tool{}
	for _, t := range tools {
		next[t.Name] = t
		sig.WriteString(t.Name + "@" + strconv.Itoa(t.Version) + ",")
	}
	s.tools.mu.Lock()
	defer s.tools.mu.Unlock()
	if sig.String() == s.tools.sig {
		return nil
	}
	var gone []string
	for name := range s.tools.tools {
		if _, ok := next[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		s.sdk.RemoveTools(gone...)
	}
	for name, t := range next {
		if old, ok := s.tools.tools[name]; ok && old.Version == t.Version && old.Entry == t.Entry {
			continue
		}
		st := &sdk.Tool{Name: t.Name, Description: t.Description, InputSchema: objectSchema(t.InputSchema)}
		if out := outputs[t.Name+"@"+strconv.Itoa(t.Version)]; out != nil {
			st.OutputSchema = out
		}
		s.sdk.AddTool(st, s.callTool)
	}
	first := s.tools.sig == ""
	s.tools.tools, s.tools.sig = next, sig.String()
	if !first {
		s.toolsChanged.Range(func(k, _ any) bool {
			select {
			case k.(chan struct{}) <- struct{}{}:
			default:
			}
			return true
		})
	}
	return nil
}

// objectSchema is a tool's input schema as the SDK takes it: an object.
func objectSchema(raw json.RawMessage) json.RawMessage {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil || m["type"] != "object" {
		return json.RawMessage(`{"type":"object"}`)
	}
	return raw
}

// pollTools syncs the tool list every ToolPoll, so that a plugin upload
// reaches connected clients as a list-changed notification.
func (s *Server) pollTools() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.ToolPoll)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if err := s.syncTools(s.ctx); err != nil && s.ctx.Err() == nil {
				s.opts.Logger.Warn("mcp: reading the tools", "err", err)
			}
		}
	}
}

// middleware adds to the SDK's answers what it has no types for: the
// tasks capability of 2025-11-25 (initialize), each tool's taskSupport
// (tools/list), and a task's creation (tools/call); a call of a tool the
// server has not listed yet syncs the list first.
func (s *Server) middleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if e := req.GetExtra(); e != nil {
			ctx = context.WithValue(ctx, extraKey{}, e)
		}
		switch method {
		case "tools/list":
			if err := s.syncTools(ctx); err != nil {
				return nil, err
			}
		case "tools/call":
			if p, ok := req.GetParams().(*sdk.CallToolParamsRaw); ok {
				if _, known := s.tools.get(p.Name); !known {
					if err := s.syncTools(ctx); err != nil {
						return nil, err
					}
				}
			}
		}
		res, err := next(ctx, method, req)
		if err != nil || res == nil {
			return res, err
		}
		switch method {
		case "initialize":
			if ir, ok := res.(*sdk.InitializeResult); ok {
				return &extended{Result: ir, add: func(m map[string]any) {
					caps, _ := m["capabilities"].(map[string]any)
					if caps == nil {
						caps = map[string]any{}
						m["capabilities"] = caps
					}
					caps["tasks"] = map[string]any{"list": map[string]any{}, "cancel": map[string]any{},
						"requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
				}}, nil
			}
		case "tools/list":
			// 2026-07-28 has no taskSupport: the server decides.
			if ss, ok := req.GetSession().(*sdk.ServerSession); ok && clientOf(ss, nil).mrtr {
				break
			}
			if lr, ok := res.(*sdk.ListToolsResult); ok {
				return &extended{Result: lr, add: s.addTaskSupport}, nil
			}
		case "tools/call":
			if cr, ok := res.(*sdk.CallToolResult); ok {
				if t, ok := cr.Meta[createTaskMeta].(map[string]any); ok {
					return &rawResult{fields: t}, nil
				}
			}
		}
		return res, err
	}
}

// addTaskSupport marks each tool's taskSupport (2025-11-25): every tool
// may run as a task; a task or serve tool's call is one.
func (s *Server) addTaskSupport(m map[string]any) {
	tools, _ := m["tools"].([]any)
	for _, t := range tools {
		tm, _ := t.(map[string]any)
		if tm == nil {
			continue
		}
		tm["execution"] = map[string]any{"taskSupport": "optional"}
	}
}

// extended is an SDK result with fields added as it is marshalled.
type extended struct {
	sdk.Result
	add func(map[string]any)
}

func (e *extended) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(e.Result)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	e.add(m)
	return json.Marshal(m)
}

// rawResult is a result of fields the SDK has no type for.
type rawResult struct {
	sdk.ResultBase
	fields map[string]any
}

func (r *rawResult) MarshalJSON() ([]byte, error) {
	m := maps.Clone(r.fields)
	if m == nil {
		m = map[string]any{}
	}
	if len(r.Meta) > 0 {
		meta := map[string]any{}
		if own, ok := m["_meta"].(map[string]any); ok {
			maps.Copy(meta, own)
		}
		maps.Copy(meta, r.Meta)
		m["_meta"] = meta
	}
	return json.Marshal(m)
}

// isTaskTool: a task or serve tool's call runs as a task; the session's
// own tools never do.
func isTaskTool(t host.Tool) bool {
	return (t.Entry == host.EntryTask || t.Entry == host.EntryServe) && t.Name != session.TaskWaitTool && t.Name != session.TaskCancelTool
}
