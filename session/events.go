package session

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/store"
)

// Event types of a session's stream, as the event stream of a session
// names them.
const (
	EvCallStarted        = "call.started"
	EvCallProgress       = "call.progress"
	EvCallSettled        = "call.settled"
	EvInteractionOpened  = "interaction.opened"
	EvInteractionSettled = "interaction.settled"
	EvTaskStarted        = "task.started"
	EvTaskSettled        = "task.settled"
	EvChildOpened        = "child.opened"
	EvTurnWaiting        = "turn.waiting"
)

// maxEvents is how many of its latest events a session keeps.
const maxEvents = 2000

// Event is one entry of a session's event stream. (taskId, callId)
// names a call; each type fills the fields it needs.
type Event struct {
	Seq int `json:"seq"`
	// Sub numbers a live event among those that followed the kept event
	// Seq (0 for a kept event): see Offset.
	Sub    int       `json:"sub,omitempty"`
	Type   string    `json:"type"`
	Time   time.Time `json:"time"`
	CallID string    `json:"callId,omitempty"`
	TaskID string    `json:"taskId,omitempty"`
	RunID  string    `json:"runId,omitempty"`
	Tool   string    `json:"tool,omitempty"`
	// Kind is a task event's kind: "tool" (agent tools, "agent", are not
	// sessions' own yet).
	Kind string `json:"kind,omitempty"`
	// Status is a settled call's or task's: completed, failed or cancelled.
	Status string           `json:"status,omitempty"`
	Output json.RawMessage  `json:"output,omitempty"`
	Error  *abi.ErrorObject `json:"error,omitempty"`
	// Cancel is set when the session cancelled the work.
	Cancel   *CancelInfo     `json:"cancel,omitempty"`
	Progress json.RawMessage `json:"progress,omitempty"`
	// Interactions: the question, and how it settled (answered, withdrawn,
	// unavailable).
	AskID   string `json:"askId,omitempty"`
	Prompt  string `json:"prompt,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	// child.opened: the agent a call opened a session with.
	Agent string `json:"agent,omitempty"`
	// turn.waiting: the tasks the turn waits on.
	Working []string `json:"working,omitempty"`
	// model.delta: the step (its id, "runId:position") and the piece of
	// the reply's text it streamed.
	Step  string `json:"step,omitempty"`
	Delta string `json:"delta,omitempty"`
	// tool.started, tool.settled: the call.
	ToolCall *ToolCall `json:"toolCall,omitempty"`
}

// CancelInfo says why the session cancelled a call: task_cancel,
// turn_cancelled or turn_ended.
type CancelInfo struct {
	Reason string `json:"reason"`
}

// tracked is a run whose log the session turns into events.
type tracked struct {
	RunID  string `json:"runId"`
	TaskID string `json:"taskId,omitempty"`
	Tool   string `json:"tool"`
	Serve  bool   `json:"serve,omitempty"`
	// Seq is the last event of the run's log translated; Calls how many
	// of a serve run's calls have been reported settled.
	Seq   uint64 `json:"seq"`
	Calls int    `json:"calls,omitempty"`
	// Ended: the run ended and its log is translated. Muted: its end is
	// not reported (the session reported the cancellation of its work).
	Ended bool `json:"ended,omitempty"`
	Muted bool `json:"muted,omitempty"`
	// CancelReason is the session's last cancel of the run's work, which
	// the calls it cancelled report.
	CancelReason string `json:"cancelReason,omitempty"`
}

// emit appends an event; callers hold s.mu.
func (s *Session) emit(e Event) {
	s.rec.NextEvent++
	e.Seq, e.Time = s.rec.NextEvent, time.Now().UTC()
	s.rec.Events = append(s.rec.Events, e)
	// The slice may hold up to twice the events kept, so that trimming
	// it is amortised: copying the kept window on every event past the
	// first maxEvents made each event cost maxEvents copies (a fan-out's
	// call, hundreds of events, grew with the session's history).
	if n := len(s.rec.Events); n > 2*maxEvents {
		s.rec.Events = append(s.rec.Events[:0:0], s.rec.Events[n-maxEvents:]...)
	}
	s.notify()
}

// kept are the latest maxEvents events, those the session keeps;
// callers hold s.mu.
func (s *Session) kept() []Event {
	if n := len(s.rec.Events); n > maxEvents {
		return s.rec.Events[n-maxEvents:]
	}
	return s.rec.Events
}

func (s *Session) notify() {
	for ch := range s.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// track starts translating a run's log; callers hold s.mu.
func (s *Session) track(runID, taskID, tool string, serve bool) {
	s.rec.Runs = append(s.rec.Runs, &tracked{RunID: runID, TaskID: taskID, Tool: tool, Serve: serve})
	s.m.follow(runID, s)
}

// sync translates what the tracked runs logged since the last sync into
// events; callers hold s.mu.
func (s *Session) sync(ctx context.Context) {
	st := s.m.h.Store()
	for _, tr := range s.rec.Runs {
		if tr.Ended || s.starting[tr.RunID] {
			continue
		}
		// A run whose log has not moved has nothing new to report: its
		// calls and its end change only with events.
		evs, err := st.Events(ctx, tr.RunID, tr.Seq, 0)
		if err != nil || len(evs) == 0 {
			continue
		}
		ri, err := s.m.h.Run(ctx, tr.RunID)
		if err != nil {
			continue
		}
		if !ri.Status.Terminal() && endsRun(evs) {
			// Run answers a run being driven from its driver's last
			// published state, which can lag the log just read; the run's
			// record is written with its events. Without this the run's
			// end was translated as not ended, and never again: its
			// events had been read.
			endFromRecord(ctx, st, &ri)
		}
		for _, e := range evs {
			s.translate(tr, ri, e)
			tr.Seq = e.Seq
		}
		if tr.Serve {
			for ; tr.Calls < len(ri.Calls) && ri.Calls[tr.Calls].Status != "working"; tr.Calls++ {
				c := ri.Calls[tr.Calls]
				e := Event{CallID: c.CallID, TaskID: tr.TaskID, RunID: tr.RunID, Tool: tr.Tool, Status: c.Status, Output: c.Output, Error: c.Error}
				if c.Status == Cancelled && tr.CancelReason != "" {
					e.Cancel = &CancelInfo{tr.CancelReason}
				}
				e.Type = EvCallSettled
				s.emit(e)
				e.Type, e.Kind = EvTaskSettled, "tool"
				s.emit(e)
			}
		}
		if ri.Status.Terminal() {
			tr.Ended = true
			if tr.Serve || tr.Muted {
				continue
			}
			e := Event{CallID: tr.RunID, TaskID: tr.TaskID, RunID: tr.RunID, Tool: tr.Tool, Status: runStatus(ri.Status), Error: ri.Error}
			if ri.Status == store.StatusCompleted {
				e.Output = ri.Result
			}
			if ri.Aborted == "steer" && ri.Status != store.StatusCompleted {
				e.Status, e.Output, e.Error = Completed, json.RawMessage(`{"interrupted":true}`), nil
			}
			e.Type = EvCallSettled
			s.emit(e)
			if tr.TaskID != "" {
				e.Type, e.Kind = EvTaskSettled, "tool"
				s.emit(e)
			}
		}
	}
}

func runStatus(st store.RunStatus) string {
	switch st {
	case store.StatusCompleted:
		return Completed
	case store.StatusCancelled:
		return Cancelled
	}
	return Failed
}

// translate turns one event of a tracked run's log into session events.
func (s *Session) translate(tr *tracked, ri host.RunInfo, e store.Event) {
	var d struct {
		AskID   string          `json:"askId"`
		Request json.RawMessage `json:"request"`
		Answer  *abi.AskAnswer  `json:"answer"`
		Value   json.RawMessage `json:"value"`
		Name    string          `json:"name"`
	}
	_ = json.Unmarshal(e.Data, &d)
	base := Event{CallID: tr.RunID, TaskID: tr.TaskID, RunID: tr.RunID, Tool: tr.Tool}
	if tr.Serve && tr.Calls < len(ri.Calls) {
		// The call the serve run works on: the first not yet reported
		// settled.
		base.CallID = ri.Calls[tr.Calls].CallID
	}
	switch e.Kind {
	case host.EvProgress:
		base.Type, base.Progress = EvCallProgress, d.Value
		s.emit(base)
	case host.EvAskOpened:
		if d.AskID == "" {
			return // answered at once (no person could): nothing to offer
		}
		var req abi.AskRequest
		_ = json.Unmarshal(d.Request, &req)
		base.Type, base.AskID, base.Prompt = EvInteractionOpened, d.AskID, req.Prompt
		s.emit(base)
	case host.EvAskSettled:
		base.Type, base.AskID, base.Outcome = EvInteractionSettled, d.AskID, "answered"
		if d.Answer != nil && d.Answer.Status == abi.AnswerCancelled {
			base.Outcome = "withdrawn"
		} else if d.Answer != nil && d.Answer.Status == abi.AnswerUnavailable {
			base.Outcome = "unavailable"
		}
		s.emit(base)
	case host.EvAgentSent:
		base.Type, base.Agent = EvChildOpened, d.Name
		s.emit(base)
	}
}

// Events returns the session's events after seq (0: all it keeps), having
// read what its runs logged since the last call.
func (s *Session) Events(ctx context.Context, after int) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sync(ctx)
	_ = s.save(ctx)
	kept := s.kept()
	i := len(kept)
	for i > 0 && kept[i-1].Seq > after {
		i--
	}
	return append([]Event(nil), kept[i:]...)
}

// Watch returns a channel that receives a value, without blocking, when
// the session may have new events (its own, or a change to one of its
// runs), and the function that stops the watch. Read Events after it.
func (s *Session) Watch() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.watchers == nil {
		s.watchers = map[chan struct{}]bool{}
	}
	s.watchers[ch] = true
	var stops []func()
	for _, tr := range s.rec.Runs {
		if tr.Ended {
			continue
		}
		rc, stop := s.m.h.Watch(tr.RunID)
		stops = append(stops, stop)
		quit := make(chan struct{})
		stops = append(stops, func() { close(quit) })
		go func() {
			for {
				select {
				case <-rc:
					select {
					case ch <- struct{}{}:
					default:
					}
				case <-quit:
					return
				}
			}
		}()
	}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.watchers, ch)
		s.mu.Unlock()
		for _, stop := range stops {
			stop()
		}
	}
}

// endsRun reports whether evs hold the event that ends a run.
func endsRun(evs []store.Event) bool {
	for _, e := range evs {
		switch e.Kind {
		case host.EvRunCompleted, host.EvRunFailed, host.EvRunCancelled:
			return true
		}
	}
	return false
}

// endFromRecord sets ri's status, result and error from the run's record,
// when the record says the run ended.
func endFromRecord(ctx context.Context, st store.Store, ri *host.RunInfo) {
	rec, err := st.Run(ctx, ri.ID)
	if err != nil || !rec.Status.Terminal() {
		return
	}
	var d history.Detail
	_ = json.Unmarshal(rec.Detail, &d) // a summary; absent fields stay empty
	ri.Status, ri.Result, ri.Error = rec.Status, d.Result, d.Error
}
