package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

// createTaskMeta marks a call's result as a task's creation: the
// middleware sends its fields instead of the CallToolResult.
const createTaskMeta = "io.sandflow/create-task"

// relatedTask is the _meta key that names a result's task.
const relatedTask = "io.modelcontextprotocol/related-task"

// client is what a request's client can do.
type client struct {
	version string
	// mrtr: questions go back as input requests in the result (2026-07-28).
	mrtr bool
	// elicit: the client declared elicitation.
	elicit bool
	// tasks: the client takes a task instead of a result for this call
	// (2026-07-28: it declared the extension on the request; 2025-11-25:
	// the request asked for a task).
	tasks bool
	// asked: the request has params.task (lifted into _meta), the
	// 2025-11-25 way to ask for a task; ttl is the ttl it asks for.
	asked bool
	ttl   time.Duration
}

func clientOf(ss *sdk.ServerSession, meta sdk.Meta) client {
	var c client
	ip := ss.InitializeParams()
	if ip == nil {
		return c
	}
	c.version = ip.ProtocolVersion
	c.mrtr = c.version >= Version20260728
	if t, ok := meta[taskMeta]; ok {
		c.asked = true
		if m, ok := t.(map[string]any); ok {
			if ms, ok := m["ttl"].(float64); ok && ms > 0 {
				c.ttl = time.Duration(ms * float64(time.Millisecond))
			}
		}
	}
	if caps := ip.Capabilities; caps != nil {
		c.elicit = caps.Elicitation != nil
		if c.mrtr {
			_, c.tasks = caps.Extensions[TasksExtension]
		} else {
			// capabilities.tasks (lifted), or the extension declared at
			// initialize, as some clients of this era do.
			_, declared := caps.Experimental[taskMeta]
			_, ext := caps.Extensions[TasksExtension]
			c.tasks = (declared || ext) && c.asked
		}
	}
	return c
}

// invalidParams is a protocol error for bad input: nothing was created.
func invalidParams(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

// CodeMissingClientCapability is the JSON-RPC error of a 2026-07-28
// request the server cannot serve without a capability the request did
// not declare: here, the tasks extension.
const CodeMissingClientCapability = -32021

// missingTasks is the error of a 2026-07-28 request that needs the tasks
// extension its client capabilities do not declare; its data names the
// extension, as the extension asks. See RATIONALE.md, "Why are only task
// requests refused with -32021?".
func missingTasks(what string) error {
	return &jsonrpc.Error{
		Code: CodeMissingClientCapability,
		Message: fmt.Sprintf("missing required client capability: %s needs the %s extension; declare it in the request's "+
			"_meta[\"io.modelcontextprotocol/clientCapabilities\"].extensions", what, TasksExtension),
		Data: json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + TasksExtension + `":{}}}}`),
	}
}

// callError turns a host's or session's refusal of a call into a
// protocol error; other errors stay internal.
func callError(tool string, err error) error {
	var se *session.Error
	switch {
	case errors.Is(err, host.ErrBadInput), errors.Is(err, host.ErrUnknownTool), errors.Is(err, host.ErrLimit):
		return invalidParams("%s: %v", tool, err)
	case errors.As(err, &se):
		return invalidParams("%s: %s", tool, se.Message)
	}
	return err
}

// sessionOf is the sandflow session of a request: the key in _meta or
// the Sandflow-Session header, else the MCP session's id, else one
// session for every stateless HTTP client and one for stdio.
func (s *Server) sessionOf(ctx context.Context, req *sdk.CallToolRequest) (*session.Session, error) {
	return s.sessionFor(ctx, req.Session, req.Params.Meta, req.Extra)
}

func (s *Server) sessionFor(ctx context.Context, ss *sdk.ServerSession, meta sdk.Meta, extra *sdk.RequestExtra) (*session.Session, error) {
	key, _ := meta[SessionMeta].(string)
	if key == "" && extra != nil && extra.Header != nil {
		key = extra.Header.Get(SessionHeader)
	}
	if key == "" {
		key = ss.ID()
	}
	if key == "" {
		key = "default"
		if extra == nil || extra.Header == nil {
			key = s.opts.StdioSession
		}
	}
	sess, err := s.sessions.Open(ctx, "mcp-"+key)
	if err != nil {
		return nil, invalidParams("session key %q: %v", key, err)
	}
	return sess, nil
}

// callTool runs a tool for a client: see the package doc.
func (s *Server) callTool(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	p := req.Params
	c := clientOf(req.Session, p.Meta)
	if c.mrtr && c.asked && !c.tasks {
		// A task asked for on a request that cannot take one.
		return nil, missingTasks("a tools/call with params.task")
	}
	if p.RequestState != "" {
		return s.resume(ctx, req, c)
	}
	if len(p.Arguments) > s.opts.MaxArgumentBytes {
		return nil, invalidParams("%s: the arguments are %d bytes, more than the %d a call may have", p.Name, len(p.Arguments), s.opts.MaxArgumentBytes)
	}
	args := p.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	t, ok := s.tools.get(p.Name)
	if !ok {
		return nil, invalidParams("unknown tool %q", p.Name)
	}
	sess, err := s.sessionOf(ctx, req)
	if err != nil {
		return nil, err
	}
	switch {
	case t.Name == session.TaskWaitTool || t.Name == session.TaskCancelTool:
		res, err := sess.Call(ctx, t.Name, args, nil)
		if err != nil {
			return nil, callError(t.Name, err)
		}
		return s.withResults(ctx, sess, textResult(res.Text, false)), nil
	case isTaskTool(t):
		o := &session.CallOptions{Tool: &t}
		if c.tasks {
			e := s.expiry(c) // kept with the task, in the same write
			o.Expiry = &e
		}
		res, err := sess.Call(ctx, t.Name, args, o)
		if err != nil {
			return nil, callError(t.Name, err)
		}
		if c.tasks && res.TaskID != "" {
			if tk, ok := sess.Task(ctx, res.TaskID); ok {
				// A started task's run as it started: reading it now would
				// wait for its first activation.
				ri := res.Run
				if ri.ID != tk.RunID {
					if ri, err = s.h.Run(ctx, tk.RunID); err != nil {
						return nil, err
					}
				}
				call := 0
				if res.Status == "sent" {
					call = tk.Calls - 1 // a serve task's later call is a task of its own
				}
				return s.createTask(ctx, req.Session, sess, c, ri, call)
			}
		}
		out := textResult(res.Text, false)
		out.StructuredContent = map[string]any{"status": res.Status, "taskId": res.TaskID}
		return s.withResults(ctx, sess, out), nil
	}
	// An execute call is not a task: the session keeps no record of it
	// (RATIONALE.md, "Why is an MCP execute call not in the session's
	// record?").
	ri, err := s.h.Start(ctx, t.Name, args, nil)
	if err != nil {
		return nil, callError(t.Name, err)
	}
	drove := s.driveInBackground(ri.ID)
	if c.tasks && !c.mrtr {
		// 2025-11-25: the client asked for a task.
		return s.createTask(ctx, req.Session, sess, c, ri, 0)
	}
	return s.settle(ctx, req, c, sess, ri, drove)
}

// driveInBackground drives a run on the server's context; the channel
// gets the run once it waits or ends.
func (s *Server) driveInBackground(runID string) <-chan host.RunInfo {
	ch := make(chan host.RunInfo, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ri, err := s.h.Drive(s.ctx, runID)
		if err != nil {
			ri, err = s.h.Run(s.ctx, runID)
		}
		if err == nil {
			ch <- ri
		}
		close(ch)
	}()
	return ch
}

// resume is a call retried with the answers to its input requests: the
// request state is the run's id.
func (s *Server) resume(ctx context.Context, req *sdk.CallToolRequest, c client) (*sdk.CallToolResult, error) {
	p := req.Params
	ri, err := s.h.Run(ctx, p.RequestState)
	if err != nil || ri.Tool != p.Name {
		return nil, invalidParams("%s: requestState %q names no run of this tool", p.Name, p.RequestState)
	}
	ri, err = s.answer(ctx, ri, p.InputResponses)
	if err != nil {
		return nil, err
	}
	sess, err := s.sessionOf(ctx, req)
	if err != nil {
		return nil, err
	}
	return s.settle(ctx, req, c, sess, ri, nil)
}

// answer delivers a client's responses to a run's open questions; a
// response to a question that is not open in this run is ignored.
func (s *Server) answer(ctx context.Context, ri host.RunInfo, responses sdk.InputResponseMap) (host.RunInfo, error) {
	for key, resp := range responses {
		er, ok := resp.(*sdk.ElicitResult)
		if !ok {
			continue
		}
		q, err := s.h.Question(ctx, key)
		if err != nil || q.RunID != ri.ID || !q.Open {
			continue
		}
		next, err := s.settleAsk(ctx, q, er)
		if err != nil {
			return host.RunInfo{}, err
		}
		ri = next
	}
	return s.h.Run(ctx, ri.ID)
}

// settle waits, within CallWait, for the run to end or ask; questions go
// to the client as elicitations (input requests on 2026-07-28, requests
// of their own on 2025-11-25). A run that waits on anything else past
// CallWait becomes a task, or, for a client without tasks, a result that
// says what the run waits on.
//
// drove, when not nil, gets the run when the drive that started it
// returns: the call waits on it rather than on each change, unless the
// client asked for progress.
func (s *Server) settle(ctx context.Context, req *sdk.CallToolRequest, c client, sess *session.Session, ri host.RunInfo, drove <-chan host.RunInfo) (*sdk.CallToolResult, error) {
	deadline := time.Now().Add(s.opts.CallWait)
	prog := progress{token: req.Params.GetProgressToken()}
	if prog.token != nil {
		drove = nil
	}
	for {
		prog.send(ctx, req.Session, ri)
		if ri.Status.Terminal() {
			return s.withResults(ctx, sess, toolResult(ri)), nil
		}
		asks, err := s.openAsks(ctx, ri)
		if err != nil {
			return nil, err
		}
		if len(asks) > 0 && c.elicit {
			if c.mrtr {
				return inputRequired(ri.ID, asks), nil
			}
			for _, q := range asks {
				er, err := req.Session.Elicit(ctx, elicitParams(q))
				if err != nil {
					return nil, err
				}
				if ri, err = s.settleAsk(ctx, q, er); err != nil {
					return nil, err
				}
			}
			continue
		}
		if len(asks) > 0 || !time.Now().Before(deadline) {
			if c.tasks {
				return s.createTask(ctx, req.Session, sess, c, ri, 0)
			}
			return waitingResult(ri, asks), nil
		}
		if drove != nil {
			if ri, err = s.waitDrive(ctx, ri, drove, deadline); err != nil {
				return nil, err
			}
			drove = nil
			continue
		}
		if ri, err = s.waitChange(ctx, ri, deadline); err != nil {
			return nil, err
		}
	}
}

// waitDrive waits for a drive to return, or the deadline.
func (s *Server) waitDrive(ctx context.Context, ri host.RunInfo, drove <-chan host.RunInfo, deadline time.Time) (host.RunInfo, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case got, ok := <-drove:
		if ok {
			return got, nil
		}
	case <-t.C:
	case <-ctx.Done():
		return host.RunInfo{}, ctx.Err()
	case <-s.ctx.Done():
		return host.RunInfo{}, ErrClosed
	}
	return s.h.Run(ctx, ri.ID)
}

// waitChange returns the run once its log changed, or at the deadline.
// The change is read at once, so that the one that ends the run is
// answered as soon as it is committed; while the run is driven a read is
// the driver's last committed snapshot and takes no lock from it.
func (s *Server) waitChange(ctx context.Context, ri host.RunInfo, deadline time.Time) (host.RunInfo, error) {
	ch, stop := s.h.Watch(ri.ID)
	defer stop()
	now, err := s.h.Run(ctx, ri.ID)
	if err != nil || !now.UpdatedAt.Equal(ri.UpdatedAt) || now.Status != ri.Status {
		return now, err
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		return host.RunInfo{}, ctx.Err()
	case <-s.ctx.Done():
		return host.RunInfo{}, ErrClosed
	}
	return s.h.Run(ctx, ri.ID)
}

// openAsks are the questions the run waits on.
func (s *Server) openAsks(ctx context.Context, ri host.RunInfo) ([]host.Question, error) {
	var out []host.Question
	for _, w := range ri.Waiting {
		if w.Kind != "ask" || w.AskID == "" {
			continue
		}
		q, err := s.h.Question(ctx, w.AskID)
		if err != nil {
			return nil, err
		}
		if q.Open {
			out = append(out, q)
		}
	}
	return out, nil
}

// toolResult is a run's end as a tool result: the output as
// structuredContent and as JSON text; a failed run is a tool error with
// its typed error.
func toolResult(ri host.RunInfo) *sdk.CallToolResult {
	switch ri.Status {
	case store.StatusCompleted:
		var v any
		if len(ri.Result) > 0 {
			_ = json.Unmarshal(ri.Result, &v)
		}
		b, _ := json.Marshal(v)
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}, StructuredContent: v}
	default:
		e := map[string]any{"type": "Cancelled", "message": "the call was cancelled"}
		if ri.Status == store.StatusFailed {
			e = map[string]any{"type": "Error", "message": "the call failed"}
			if ri.Error != nil {
				e = map[string]any{"type": ri.Error.Type, "message": ri.Error.Message, "retryable": ri.Error.Retryable}
			}
		}
		out := map[string]any{"error": e}
		b, _ := json.Marshal(out)
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}, StructuredContent: out}
	}
}

func textResult(text string, isError bool) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: isError, Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

// withResults adds the session's task results that have not reached the
// model, as <task_result> blocks, to a result.
func (s *Server) withResults(ctx context.Context, sess *session.Session, res *sdk.CallToolResult) *sdk.CallToolResult {
	if text, err := sess.Results(ctx); err == nil && text != "" {
		res.Content = append(res.Content, &sdk.TextContent{Text: text})
	}
	return res
}

// waitingResult tells a client without elicitation (or without tasks)
// what the run waits on and how to go on.
func waitingResult(ri host.RunInfo, asks []host.Question) *sdk.CallToolResult {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s of %s is waiting", ri.ID, ri.Tool)
	var qs []any
	for _, q := range asks {
		fmt.Fprintf(&b, "; question %s: %q", q.ID, q.Request.Prompt)
		var opts []string
		for _, o := range q.Request.Options {
			opts = append(opts, fmt.Sprintf("%s (%s)", o.ID, o.Label))
		}
		if len(opts) > 0 {
			fmt.Fprintf(&b, ", options %s", strings.Join(opts, ", "))
		}
		if q.Request.AllowFreeform || len(q.Request.Options) == 0 {
			b.WriteString(", or text")
		}
		qs = append(qs, map[string]any{"id": q.ID, "request": q.Request})
	}
	if len(asks) > 0 {
		b.WriteString(". Answer it with POST /v1/asks/{id}/answer {\"optionId\": ...} or {\"text\": ...}, or `sandflow asks answer ID OPTION`")
	} else {
		for _, w := range ri.Waiting {
			fmt.Fprintf(&b, "; on a %s", w.Kind)
			if w.Until != nil {
				fmt.Fprintf(&b, " until %s", w.Until.UTC().Format(time.RFC3339))
			}
		}
	}
	fmt.Fprintf(&b, ". Its result: GET /v1/runs/%s.", ri.ID)
	out := textResult(b.String(), false)
	out.StructuredContent = map[string]any{"status": "waiting", "runId": ri.ID, "waiting": ri.Waiting, "questions": qs}
	return out
}

// progress sends a run's progress snapshots as progress notifications
// when the client asked for them (a progress token).
type progress struct {
	token any
	last  string
	n     int
}

func (p *progress) send(ctx context.Context, ss *sdk.ServerSession, ri host.RunInfo) {
	if p.token == nil || len(ri.Progress) == 0 || string(ri.Progress) == p.last {
		return
	}
	p.last = string(ri.Progress)
	p.n++
	_ = ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: p.token, Progress: float64(p.n), Message: p.last})
}
