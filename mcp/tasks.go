package mcp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

// A task is a run: its id is the run's id, so a task outlives the
// process that created it, and tasks/get after a restart reads the run.
// The SDK has no tasks; they are custom methods, one handler for both
// eras, shaped by the era of the request:
//
//	2026-07-28 (extension)  tasks/get, tasks/update, tasks/cancel
//	2025-11-25 (core)       tasks/get, tasks/result, tasks/list, tasks/cancel

// pollInterval is the polling interval tasks suggest.
const pollInterval = 500

type taskParams struct {
	sdk.ParamsBase
	TaskID         string               `json:"taskId"`
	InputResponses sdk.InputResponseMap `json:"inputResponses,omitempty"`
	Cursor         string               `json:"cursor,omitempty"`
}

type extraKey struct{}

// extraOf is the HTTP request's extra a custom method's handler does not
// get: the middleware puts it in the context.
func extraOf(ctx context.Context) *sdk.RequestExtra {
	e, _ := ctx.Value(extraKey{}).(*sdk.RequestExtra)
	return e
}

func (s *Server) addTaskMethods() error {
	type handler = func(context.Context, *sdk.ServerSession, *taskParams) (*rawResult, error)
	for name, h := range map[string]handler{
		"tasks/get": s.taskGet, "tasks/update": s.taskUpdate, "tasks/cancel": s.taskCancel,
		"tasks/result": s.taskResult, "tasks/list": s.taskList,
	} {
		if err := sdk.AddReceivingCustomMethod(s.sdk, name, s.needsTasks(name, h)); err != nil {
			return err
		}
	}
	return nil
}

// needsTasks refuses a 2026-07-28 task request whose client capabilities
// do not declare the tasks extension, as the extension requires.
func (s *Server) needsTasks(method string, h func(context.Context, *sdk.ServerSession, *taskParams) (*rawResult, error)) func(context.Context, *sdk.ServerSession, *taskParams) (*rawResult, error) {
	return func(ctx context.Context, ss *sdk.ServerSession, p *taskParams) (*rawResult, error) {
		var meta sdk.Meta
		if p != nil {
			meta = p.Meta
		}
		if c := clientOf(ss, meta); c.mrtr && !c.tasks {
			return nil, missingTasks(method)
		}
		return h(ctx, ss, p)
	}
}

// run is a task's run as the task sees it, and the task's call: a serve
// run's first task is its run's id, each later call's the session's call
// id (run:N); such a task ends when its call is answered. An unknown task
// is a protocol error.
func (s *Server) run(ctx context.Context, p *taskParams) (host.RunInfo, int, error) {
	if p == nil || p.TaskID == "" {
		return host.RunInfo{}, 0, invalidParams("a task request needs \"taskId\"")
	}
	runID, call := p.TaskID, 0
	ri, err := s.h.Run(ctx, runID)
	if errors.Is(err, host.ErrRunNotFound) {
		if i := strings.LastIndexByte(p.TaskID, ':'); i > 0 {
			if n, nerr := strconv.Atoi(p.TaskID[i+1:]); nerr == nil && n > 0 {
				runID, call = p.TaskID[:i], n
				ri, err = s.h.Run(ctx, runID)
				if err == nil && n >= len(ri.Calls) {
					err = host.ErrRunNotFound
				}
			}
		}
	}
	if errors.Is(err, host.ErrRunNotFound) {
		return host.RunInfo{}, 0, invalidParams("unknown task %q", p.TaskID)
	}
	if err != nil {
		return host.RunInfo{}, 0, err
	}
	ri = view(ri, call)
	if s.expired(ctx, ri, call) {
		return host.RunInfo{}, 0, taskExpired(p.TaskID, ri.ID)
	}
	return ri, call, nil
}

// taskExpired is the error of a request for a task past its ttl.
func taskExpired(id, runID string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
		"task %q has expired: its ttl has passed and its result is no longer served over MCP; the run and its history stay (GET /v1/runs/%s)", id, runID)}
}

// view is a run as the task of one of its calls sees it: a serve run's
// call ends when a reply answers it, while the run goes on.
func view(ri host.RunInfo, call int) host.RunInfo {
	if call >= len(ri.Calls) {
		return ri
	}
	c := ri.Calls[call]
	switch c.Status {
	case "completed":
		ri.Status, ri.Result, ri.Error = store.StatusCompleted, c.Output, nil
	case "failed":
		ri.Status = store.StatusFailed
		if c.Error != nil {
			ri.Error = c.Error
		}
	case "cancelled":
		ri.Status = store.StatusCancelled
	}
	return ri
}

// taskID is the task id of a run's call.
func taskID(runID string, call int) string {
	if call == 0 {
		return runID
	}
	return runID + ":" + strconv.Itoa(call)
}

// taskFields is a run as an era's Task: its status, and on 2026-07-28 the
// questions as input requests and the result inlined.
func (s *Server) taskFields(ctx context.Context, c client, ri host.RunInfo, call int) (map[string]any, error) {
	f := map[string]any{
		"taskId":        taskID(ri.ID, call),
		"createdAt":     ri.CreatedAt.UTC().Format(time.RFC3339Nano),
		"lastUpdatedAt": ri.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
	ttl := s.ttlOf(ctx, ri, call).TTL.Milliseconds()
	if c.mrtr {
		f["ttlMs"], f["pollIntervalMs"] = ttl, pollInterval
	} else {
		f["ttl"], f["pollInterval"] = ttl, pollInterval
	}
	switch ri.Status {
	case store.StatusCompleted:
		f["status"] = "completed"
	case store.StatusFailed:
		// 2026-07-28 keeps failed for protocol errors: a failed run is a
		// completed task whose result is a tool error.
		f["status"] = "failed"
		if c.mrtr {
			f["status"] = "completed"
		}
		if ri.Error != nil {
			f["statusMessage"] = ri.Error.Message
		}
	case store.StatusCancelled:
		f["status"] = "cancelled"
	default:
		f["status"] = "working"
		asks, err := s.openAsks(ctx, ri)
		if err != nil {
			return nil, err
		}
		if len(asks) > 0 {
			f["status"] = "input_required"
			f["statusMessage"] = asks[0].Request.Prompt
			if c.mrtr {
				reqs := sdk.InputRequestMap{}
				for _, q := range asks {
					reqs[q.ID] = elicitParams(q)
				}
				f["inputRequests"] = reqs
			}
		}
	}
	if c.mrtr && ri.Status.Terminal() && ri.Status != store.StatusCancelled {
		f["result"] = toolResult(ri)
	}
	return f, nil
}

// createTask is the answer to a call that became a task, once the
// task's ttl is durable in sess (a task call's was written with its
// task: Keep does nothing then).
func (s *Server) createTask(ctx context.Context, ss *sdk.ServerSession, sess *session.Session, c client, ri host.RunInfo, call int) (*sdk.CallToolResult, error) {
	ri = view(ri, call)
	if err := sess.Keep(ctx, taskID(ri.ID, call), s.expiry(c)); err != nil {
		return nil, err
	}
	f, err := s.taskFields(ctx, c, ri, call)
	if err != nil {
		return nil, err
	}
	s.followSession(ss, c, ri, call, statusKey(f))
	delete(f, "result")
	delete(f, "inputRequests")
	out := f
	if c.mrtr {
		f["resultType"] = "task"
	} else {
		out = map[string]any{"task": f}
	}
	id := taskID(ri.ID, call)
	out["_meta"] = map[string]any{relatedTask: map[string]any{"taskId": id}}
	return &sdk.CallToolResult{Meta: sdk.Meta{createTaskMeta: out, relatedTask: map[string]any{"taskId": id}}}, nil
}

func complete(f map[string]any, c client) *rawResult {
	if f == nil {
		f = map[string]any{}
	}
	if c.mrtr {
		f["resultType"] = "complete"
	}
	return &rawResult{fields: f}
}

func (s *Server) taskGet(ctx context.Context, ss *sdk.ServerSession, p *taskParams) (*rawResult, error) {
	ri, call, err := s.run(ctx, p)
	if err != nil {
		return nil, err
	}
	c := clientOf(ss, p.Meta)
	f, err := s.taskFields(ctx, c, ri, call)
	if err != nil {
		return nil, err
	}
	s.followSession(ss, c, ri, call, statusKey(f))
	if f["status"] == "input_required" && !c.mrtr && c.elicit {
		// 2025-11-25: a client that only polls is sent the questions as
		// elicitation requests of their own, related to the task.
		asks, err := s.openAsks(ctx, ri)
		if err != nil {
			return nil, err
		}
		for _, q := range asks {
			s.elicitAsync(ss, q)
		}
	}
	return complete(f, c), nil
}

// elicitAsync asks a question through a 2025-11-25 session outside any
// request, once at a time for each question.
func (s *Server) elicitAsync(ss *sdk.ServerSession, q host.Question) {
	if _, busy := s.asking.LoadOrStore(q.ID, true); busy {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.asking.Delete(q.ID)
		ctx, cancel := context.WithTimeout(s.ctx, elicitTimeout)
		defer cancel()
		er, err := ss.Elicit(ctx, elicitParams(q))
		if err != nil {
			return
		}
		if _, err := s.settleAsk(ctx, q, er); err != nil {
			s.opts.Logger.Warn("mcp: answering a question", "ask", q.ID, "err", err)
		}
	}()
}

// elicitTimeout bounds how long a question asked outside a request waits
// for its form; the question stays open after, and is asked again.
const elicitTimeout = 10 * time.Minute

// taskUpdate delivers answers to a task's questions (2026-07-28).
func (s *Server) taskUpdate(ctx context.Context, ss *sdk.ServerSession, p *taskParams) (*rawResult, error) {
	ri, _, err := s.run(ctx, p)
	if err != nil {
		return nil, err
	}
	if _, err := s.answer(ctx, ri, p.InputResponses); err != nil {
		return nil, err
	}
	return complete(nil, clientOf(ss, p.Meta)), nil
}

// taskCancel aborts the run as task_cancel does: its abort signal fires
// and its questions are withdrawn.
func (s *Server) taskCancel(ctx context.Context, ss *sdk.ServerSession, p *taskParams) (*rawResult, error) {
	ri, call, err := s.run(ctx, p)
	if err != nil {
		return nil, err
	}
	c := clientOf(ss, p.Meta)
	sess, err := s.sessionFor(ctx, ss, p.Meta, extraOf(ctx))
	if err != nil {
		return nil, err
	}
	if _, ok := sess.Task(ctx, ri.ID); ok {
		_, err = sess.TaskCancel(ctx, ri.ID)
	} else {
		_, err = s.detached(ctx, func(ctx context.Context) (host.RunInfo, error) { return s.h.Abort(ctx, ri.ID, "task_cancel") })
	}
	if err != nil && !errors.Is(err, host.ErrRunEnded) {
		return nil, err
	}
	if c.mrtr {
		return complete(nil, c), nil
	}
	if ri, err = s.waitEnd(ctx, ri, call, 2*time.Second); err != nil {
		return nil, err
	}
	f, err := s.taskFields(ctx, c, ri, call)
	if err != nil {
		return nil, err
	}
	return complete(f, c), nil
}

// waitEnd waits up to d for the task to end.
func (s *Server) waitEnd(ctx context.Context, ri host.RunInfo, call int, d time.Duration) (host.RunInfo, error) {
	deadline := time.Now().Add(d)
	var err error
	for !ri.Status.Terminal() && time.Now().Before(deadline) {
		if ri, err = s.waitChange(ctx, ri, deadline); err != nil {
			return ri, err
		}
		ri = view(ri, call)
	}
	return ri, nil
}

// taskResult waits for a task's result (2025-11-25), asking its questions
// on the way as elicitations related to the task.
func (s *Server) taskResult(ctx context.Context, ss *sdk.ServerSession, p *taskParams) (*rawResult, error) {
	ri, call, err := s.run(ctx, p)
	if err != nil {
		return nil, err
	}
	c := clientOf(ss, p.Meta)
	for !ri.Status.Terminal() {
		asks, err := s.openAsks(ctx, ri)
		if err != nil {
			return nil, err
		}
		asked := false
		for _, q := range asks {
			if !c.elicit {
				break
			}
			if _, busy := s.asking.LoadOrStore(q.ID, true); busy {
				continue // asked already, outside this request
			}
			er, err := ss.Elicit(ctx, elicitParams(q))
			if err == nil {
				ri, err = s.settleAsk(ctx, q, er)
				ri = view(ri, call)
			}
			s.asking.Delete(q.ID)
			if err != nil {
				return nil, err
			}
			asked = true
		}
		if asked {
			continue
		}
		if ri, err = s.waitChange(ctx, ri, time.Now().Add(time.Minute)); err != nil {
			return nil, err
		}
		ri = view(ri, call)
	}
	res := toolResult(ri)
	res.Meta = sdk.Meta{relatedTask: map[string]any{"taskId": taskID(ri.ID, call)}}
	return &rawResult{fields: map[string]any{"content": res.Content, "structuredContent": res.StructuredContent,
		"isError": res.IsError, "_meta": res.Meta}}, nil
}

// taskList lists the tasks of the request's sandflow session.
func (s *Server) taskList(ctx context.Context, ss *sdk.ServerSession, p *taskParams) (*rawResult, error) {
	c := clientOf(ss, p.Meta)
	sess, err := s.sessionFor(ctx, ss, p.Meta, extraOf(ctx))
	if err != nil {
		return nil, err
	}
	tasks := []any{}
	for _, t := range sess.Tasks(ctx) {
		ri, err := s.h.Run(ctx, t.RunID)
		if err != nil || s.expired(ctx, view(ri, 0), 0) {
			continue
		}
		f, err := s.taskFields(ctx, c, view(ri, 0), 0)
		if err != nil {
			return nil, err
		}
		delete(f, "result")
		tasks = append(tasks, f)
	}
	return complete(map[string]any{"tasks": tasks}, c), nil
}
