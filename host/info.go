package host

import (
	"encoding/json"
	"github.com/sandflow/sandflow/host/internal/state"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// RunInfo is a run as callers see it.
type RunInfo struct {
	ID         string          `json:"id"`
	Tool       string          `json:"tool"`
	Version    int             `json:"version"`
	ModuleHash string          `json:"moduleHash"`
	Status     store.RunStatus `json:"status"`
	CreatedAt  time.Time       `json:"createdAt"`
	UpdatedAt  time.Time       `json:"updatedAt"`
	// Result is set when the run completed.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is set when the run failed.
	Error *abi.ErrorObject `json:"error,omitempty"`
	// Progress is the last progress snapshot.
	Progress json.RawMessage `json:"progress,omitempty"`
	// Waiting lists what a waiting run waits on.
	Waiting []Wait `json:"waiting,omitempty"`
	// Stalled says why the run could not continue while it stays intact.
	Stalled string `json:"stalled,omitempty"`
	// Calls are a serve run's calls, the first being the one that started
	// it; set once the run has received a call, or been sent one.
	Calls []CallInfo `json:"calls,omitempty"`
	// Aborted is the reason of the run's last abort (Host.Abort), if any.
	Aborted string `json:"aborted,omitempty"`
}

// CallInfo is one call of a serve run.
type CallInfo struct {
	Index  int    `json:"index"`
	CallID string `json:"callId"`
	// Status is "working" until a reply answers the call, "completed"
	// after, or what the run ended as ("failed", "cancelled") when it ended
	// first. A run that completes answers its waiting calls with its
	// result.
	Status string           `json:"status"`
	Output json.RawMessage  `json:"output,omitempty"`
	Error  *abi.ErrorObject `json:"error,omitempty"`
	// Answer is the log sequence number of the event that answered the
	// call (a reply, an abort, the run's end), 0 while it works. Calls
	// answered together (one reply for two calls) share it: a session
	// gives their answer to the model once.
	Answer uint64 `json:"answer,omitempty"`
}

// Working reports whether a call of the run has no answer yet: a serve
// run's task is idle otherwise.
func (ri RunInfo) Working() bool {
	if ri.Calls == nil {
		return !ri.Status.Terminal()
	}
	for _, c := range ri.Calls {
		if c.Status == "working" {
			return true
		}
	}
	return false
}

// Wait is one thing a run waits on.
type Wait struct {
	// Kind is "ask", "sleep", "hook", "webhook", "step" (running) or
	// "step_retry".
	Kind     string     `json:"kind"`
	Position uint32     `json:"position"`
	AskID    string     `json:"askId,omitempty"`
	Prompt   string     `json:"prompt,omitempty"`
	Until    *time.Time `json:"until,omitempty"`
	Token    string     `json:"token,omitempty"`
	URL      string     `json:"url,omitempty"`
	Step     string     `json:"step,omitempty"`
	Agent    string     `json:"agent,omitempty"`
	Attempt  int        `json:"attempt,omitempty"`
}

// Err returns the error a failed run ended with, as a *RunError, or nil.
func (ri RunInfo) Err() error {
	if ri.Status != store.StatusFailed || ri.Error == nil {
		return nil
	}
	return &RunError{Type: ri.Error.Type, Message: ri.Error.Message, Retryable: ri.Error.Retryable}
}

func (h *Host) info(rs *state.Run) RunInfo {
	if rs == nil {
		return RunInfo{}
	}
	ri := RunInfo{
		ID: rs.ID, Tool: rs.Rec.Tool, Version: rs.Rec.Version, ModuleHash: rs.Rec.ModuleHash,
		Status: rs.Rec.Status, CreatedAt: rs.Rec.CreatedAt, UpdatedAt: rs.Rec.UpdatedAt,
		Result: rs.Result, Error: rs.Failure, Progress: rs.LastProgress, Stalled: rs.Detail.Stalled,
	}
	if n := len(rs.Aborts); n > 0 {
		ri.Aborted = rs.Aborts[n-1].Reason
	}
	if (rs.Created != nil && rs.Created.Serve) || len(rs.Receives) > 0 || len(rs.Calls) > 1 {
		ri.Calls = make([]CallInfo, len(rs.Calls))
		for i, c := range rs.Calls {
			ci := CallInfo{Index: i, CallID: c.ID, Status: "working", Answer: c.By}
			switch {
			case c.Cancelled:
				ci.Status = "cancelled"
			case c.Answered:
				ci.Status, ci.Output = "completed", c.Output
			case rs.Status == store.StatusCompleted:
				ci.Status, ci.Output = "completed", rs.Result
			case rs.Status.Terminal():
				ci.Status, ci.Error = string(rs.Status), rs.Failure
			}
			ri.Calls[i] = ci
		}
	}
	if ri.Status.Terminal() {
		return ri
	}
	seen := map[uint32]bool{}
	add := func(p uint32) {
		o := rs.Op(p)
		if o == nil || o.Settled || seen[p] {
			return
		}
		seen[p] = true
		w := Wait{Position: p}
		switch o.Kind {
		case abi.OpAsk:
			w.Kind, w.AskID = "ask", o.AskID
			if req, err := state.AskRequest(o); err == nil {
				w.Prompt = req.Prompt
			}
		case abi.OpSleep:
			t := o.FireAt
			w.Kind, w.Until = "sleep", &t
		case abi.OpHookNext:
			w.Kind = "hook"
			if hk := rs.Hooks[o.Hook]; hk != nil {
				w.Token = hk.Token
				if hk.Webhook != nil {
					w.Kind, w.URL = "webhook", hk.URL
				}
			}
		case abi.OpAgent:
			w.Kind, w.Agent = "agent", o.Name
		case abi.OpReceive:
			w.Kind = "receive"
		case abi.OpSignal:
			return // always there, and only an abort settles it
		case abi.OpStep:
			w.Kind, w.Step, w.Attempt = "step", o.Name, o.Attempt
			if !o.AttemptOpen && !o.RetryAt.IsZero() {
				t := o.RetryAt
				w.Kind, w.Until = "step_retry", &t
			}
		}
		ri.Waiting = append(ri.Waiting, w)
	}
	for _, p := range rs.RunnableSteps() {
		add(p)
	}
	for _, p := range rs.PendingAgents() {
		add(p)
	}
	if ws := rs.Detail.Waiting; ws != nil {
		for _, p := range ws.Futures {
			add(p)
		}
	}
	return ri
}
