package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/sandflow/sandflow/internal/sse"
	"github.com/sandflow/sandflow/session"
)

// Sessions: the model-facing layer (package session). A platform's agent
// loop lists a session's tools, calls them (task_wait and task_cancel
// included), takes the task results that arrived, and reads the [Tasks]
// note.

// Sessions is the server's session manager, for other views of the same
// sessions (the console's sessions pages).
func (s *Server) Sessions() *session.Manager { return s.sessions }

func (s *Server) openSession(r *http.Request) (*session.Session, error) {
	ss, err := s.sessions.Open(r.Context(), r.PathValue("id"))
	return ss, sessionError(err)
}

// sessionTools is GET /v1/sessions/{id}/tools.
func (s *Server) sessionTools(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.openSession(r)
	if err != nil {
		return err
	}
	tools, err := ss.Tools(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tools": tools})
}

// callResponse is what a session call answers.
type callResponse struct {
	// Text is the tool result the model reads.
	Text   string `json:"text"`
	Status string `json:"status"`
	TaskID string `json:"taskId,omitempty"`
	RunID  string `json:"runId,omitempty"`
}

func toResponse(c session.CallResult) callResponse {
	return callResponse{Text: c.Text, Status: c.Status, TaskID: c.TaskID, RunID: c.Run.ID}
}

// sessionCall is POST /v1/sessions/{id}/calls {"tool", "input", "taskId"?}.
// An execute call whose run waits answers status "waiting" with its runId
// (the turn waits: GET .../calls/{runId}?wait= for the result); query wait
// bounds how long the call itself may take first (default 30 s).
func (s *Server) sessionCall(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.openSession(r)
	if err != nil {
		return err
	}
	var req struct {
		Tool   string          `json:"tool"`
		Input  json.RawMessage `json:"input"`
		TaskID string          `json:"taskId"`
	}
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Tool == "" {
		return badRequest("a call needs \"tool\"")
	}
	if len(req.Input) == 0 {
		req.Input = json.RawMessage("{}")
	}
	release, err := s.admitCall(r)
	if err != nil {
		return err
	}
	defer release()
	s.extendDeadlines(w, s.cfg.MaxWait)
	res, err := ss.Call(r.Context(), req.Tool, req.Input, &session.CallOptions{TaskID: req.TaskID})
	if err != nil {
		return sessionError(err)
	}
	return writeJSON(w, http.StatusOK, toResponse(res))
}

// sessionAwait is GET /v1/sessions/{id}/calls/{runId}?wait=: an execute
// call's result once its run ends; 202 with status waiting while it has
// not within wait.
func (s *Server) sessionAwait(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.openSession(r)
	if err != nil {
		return err
	}
	wait, err := s.waitParam(r, 30*time.Second)
	if err != nil {
		return err
	}
	s.extendDeadlines(w, wait)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	res, err := ss.Await(ctx, r.PathValue("runId"))
	if err != nil && ctx.Err() != nil && r.Context().Err() == nil {
		return writeJSON(w, http.StatusAccepted, callResponse{Status: "waiting", RunID: r.PathValue("runId")})
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toResponse(res))
}

// sessionResults is POST /v1/sessions/{id}/results: the task results that
// have not reached the model, as one message ("" when none); each is given
// once.
func (s *Server) sessionResults(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.openSession(r)
	if err != nil {
		return err
	}
	msg, err := ss.Results(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"message": msg})
}

// sessionNote is POST /v1/sessions/{id}/note: the [Tasks] note when the
// tasks changed since the last one.
func (s *Server) sessionNote(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.openSession(r)
	if err != nil {
		return err
	}
	note, changed, err := ss.Note(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"note": note, "changed": changed})
}

// sessionTasks is GET /v1/sessions/{id}/tasks.
func (s *Server) sessionTasks(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.openSession(r)
	if err != nil {
		return err
	}
	tasks := ss.Tasks(r.Context())
	if tasks == nil {
		tasks = []session.Task{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tasks": tasks})
}

func sessionError(err error) error {
	if err == nil {
		return nil
	}
	var se *session.Error
	if errors.As(err, &se) {
		status := http.StatusBadRequest
		switch se.Code {
		case session.CodeUnknownTask:
			status = http.StatusNotFound
		case session.CodeTooManyTasks:
			status = http.StatusConflict
		}
		return &apiError{status, se.Code, se.Message, nil}
	}
	return err
}

// sessionSteer is POST /v1/sessions/{id}/steer: a steering message
// arrived, so the execute calls the turn waits on are aborted (tasks are
// not). It answers {"interrupted": n}.
func (s *Server) sessionSteer(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.openSession(r)
	if err != nil {
		return err
	}
	n, err := ss.Steer(r.Context())
	if err != nil {
		return sessionError(err)
	}
	return writeJSON(w, http.StatusOK, map[string]int{"interrupted": n})
}

// sessionCancel is POST /v1/sessions/{id}/cancel {"reason"}: the turn was
// cancelled (turn_cancelled, the default) or failed or the session ended
// (turn_ended), so every working task is cancelled with that reason.
func (s *Server) sessionCancel(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.openSession(r)
	if err != nil {
		return err
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if r.ContentLength != 0 {
		if err := s.readJSON(w, r, &body); err != nil {
			return err
		}
	}
	switch body.Reason {
	case "":
		body.Reason = "turn_cancelled"
	case "turn_cancelled", "turn_ended":
	default:
		return badRequest("reason %s is not turn_cancelled or turn_ended", quote(body.Reason))
	}
	if err := ss.CancelAll(r.Context(), body.Reason); err != nil {
		return sessionError(err)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tasks": ss.Tasks(r.Context())})
}

// sessionEvents is GET /v1/sessions/{id}/events: the session's event
// stream as Server-Sent Events (id: the event's offset, its seq or
// "seq.sub" for a live event; event: its type; data: the event as JSON),
// from after the Last-Event-ID header or the after query, and on as
// events happen. The stream does not end by itself.
func (s *Server) sessionEvents(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.openSession(r)
	if err != nil {
		return err
	}
	var after session.Offset
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")} {
		if v == "" {
			continue
		}
		o, err := session.ParseOffset(v)
		if err != nil {
			return badRequest("event id %s is not a sequence number", quote(v))
		}
		after = o
	}
	sw, tick, err := s.startStream(w)
	if err != nil {
		return err
	}
	defer tick.Stop()
	for {
		s.streamWrite(w)
		// Watch before reading, so nothing between the two is missed.
		changed, stop := ss.Watch()
		for _, e := range ss.EventsSince(r.Context(), after) {
			if err := sendSessionEvent(sw, e); err != nil {
				stop()
				return nil
			}
			after = e.Offset()
		}
		if err := sw.Flush(); err != nil {
			stop()
			return nil
		}
		select {
		case <-changed:
		case <-tick.C:
			s.streamWrite(w)
			if err := sw.KeepAlive(); err != nil {
				stop()
				return nil
			}
		case <-r.Context().Done():
			stop()
			return nil
		}
		stop()
	}
}

// sendSessionEvent writes a session's event: its id the event's offset
// (its seq, "seq.sub" for a live event), its type the event's, its data
// the event as JSON.
func sendSessionEvent(sw *sse.Writer, e session.Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return sw.Send(sse.Event{ID: e.Offset().String(), Type: e.Type, Data: data})
}
