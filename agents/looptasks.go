package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/session"
)

// A loop agent's call of a task tool goes through a session of the turn
// (package session), as a platform's model session does: the model gets
// the task's receipt as the call's result, and the task's result later,
// as a <task_result> user message before a model call. The turn does
// not end while a task works: when the model answers and a task has not
// reported back, the turn waits for it and gives the model its result.
// Each delivery is a step (stepTaskResults), so a replay sees the same
// messages, and Session.Deliver gives a retried attempt the message the
// first one took.

// stepTaskResults is the step that takes the turn's tasks' results.
const stepTaskResults = "tasks:results"

// taskResultsInput is the step's input: whether to wait for a result
// while a task works; taskResults its result.
type taskResultsInput struct {
	Wait bool `json:"wait,omitempty"`
}

type taskResults struct {
	Message string `json:"message,omitempty"`
	Working int    `json:"working"`
}

// turnSessionID is the id of the session a turn's task tools run in.
func turnSessionID(runID string) string { return runIDFrom("loop.", runID) }

// isTaskTool reports whether the host's tool is a task tool.
func isTaskTool(ctx context.Context, h *host.Host, tool string) (bool, error) {
	list, err := h.Tools(ctx)
	if err != nil {
		return false, err
	}
	for _, t := range list {
		if t.Name == tool {
			return t.Entry == host.EntryTask, nil
		}
	}
	return false, nil
}

func (l *Loop) turnSession(ctx context.Context, runID string) (*session.Session, error) {
	l.mu.Lock()
	m := l.sessions
	l.mu.Unlock()
	if m == nil {
		return nil, errors.New("the loop backend is not attached")
	}
	return m.Open(ctx, turnSessionID(runID))
}

// startTask starts a task tool's call as a task of the turn's session,
// under id, and returns its receipt.
func (l *Loop) startTask(ctx context.Context, runID, tool string, args json.RawMessage, id string) (toolOutput, error) {
	ss, err := l.turnSession(ctx, runID)
	if err != nil {
		return toolOutput{}, err
	}
	res, err := ss.Call(ctx, tool, args, &session.CallOptions{NewTaskID: id})
	if err != nil {
		return toolOutput{}, err
	}
	out, _ := json.Marshal(res.Text)
	return toolOutput{Output: out, Task: res.TaskID}, nil
}

// toolCallError is what a tool step answers for an error starting the
// tool's run: the model is told of what it can correct; the rest is
// retried.
func toolCallError(err error) (any, *abi.ErrorObject) {
	var ie *host.InputError
	var se *session.Error
	switch {
	case errors.As(err, &ie):
		return toolOutput{Error: fmt.Sprintf("the arguments do not fit the tool's input schema: %s", strings.Join(ie.Problems, "; "))}, nil
	case errors.Is(err, host.ErrBadInput):
		return toolOutput{Error: err.Error()}, nil
	case errors.Is(err, host.ErrUnknownTool):
		return toolOutput{Error: err.Error()}, nil
	case errors.As(err, &se):
		return toolOutput{Error: se.Message}, nil
	}
	return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: err.Error()}
}

// taskResultsStep takes the results of the turn's tasks that the model
// has not had, waiting for one first when asked to and a task works.
func (l *Loop) taskResultsStep(ctx context.Context, in abi.StepInput) (any, *abi.ErrorObject) {
	var ti taskResultsInput
	if err := json.Unmarshal(in.Input, &ti); err != nil {
		return nil, fatal("the task results step's input: %v", err)
	}
	ss, err := l.turnSession(ctx, in.RunID)
	if err != nil {
		return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: err.Error()}
	}
	if ti.Wait {
		if _, err := ss.TaskWait(ctx, 0); err != nil {
			return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: err.Error()}
		}
	}
	msg, working, err := ss.Deliver(ctx, in.StepID)
	if err != nil {
		return nil, &abi.ErrorObject{Type: abi.ErrTypeRetryable, Message: err.Error()}
	}
	return taskResults{Message: msg, Working: working}, nil
}

// deliverTaskResults runs the step that takes the turn's tasks' results
// and gives them to the model as a user message.
func deliverTaskResults(g *guest, st *loopState, msgs []message, wait bool) []message {
	f := g.step(stepTaskResults, taskResultsInput{Wait: wait}, &abi.RetryPolicy{MaxAttempts: 3})
	g.await(f)
	var r taskResults
	if f.err != nil || json.Unmarshal(f.val, &r) != nil {
		st.tasks = false // the model is not told more than it was
		return msgs
	}
	st.tasks = r.Working > 0
	if r.Message != "" {
		msgs = append(msgs, message{Role: "user", Content: r.Message})
	}
	return msgs
}
