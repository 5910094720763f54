package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sandflow/sandflow/agents"
)

// Agent turns for a platform that runs its own agents (an external agent
// backend, Config.ExternalAgents): it lists the work items, claims one,
// and completes it with the reply, or fails it.

func (s *Server) externalAgents() (*agents.External, error) {
	if s.cfg.ExternalAgents == nil {
		return nil, &apiError{http.StatusNotFound, "not_found", "this server has no external agents (an agents file with \"kind\": \"external\" agents configures them)", nil}
	}
	return s.cfg.ExternalAgents, nil
}

// listAgentTurns is GET /v1/agent-turns?agent=&unclaimed=true&wait=30s:
// the work items, oldest first; with wait, an empty list waits up to that
// long for one to arrive.
func (s *Server) listAgentTurns(w http.ResponseWriter, r *http.Request) error {
	ext, err := s.externalAgents()
	if err != nil {
		return err
	}
	wait, err := s.waitParam(r, 0)
	if err != nil {
		return err
	}
	agent, unclaimed := r.URL.Query().Get("agent"), r.URL.Query().Get("unclaimed") == "true"
	s.extendDeadlines(w, wait)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		changed := ext.Wait()
		items := ext.Items(agent, unclaimed)
		if len(items) > 0 || wait == 0 {
			if items == nil {
				items = []agents.WorkItem{}
			}
			return writeJSON(w, http.StatusOK, map[string]any{"turns": items})
		}
		select {
		case <-changed:
		case <-deadline.C:
			wait = 0
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}
}

// claimAgentTurn is POST /v1/agent-turns/{id}/claim {"worker", "leaseSeconds"?}.
func (s *Server) claimAgentTurn(w http.ResponseWriter, r *http.Request) error {
	ext, err := s.externalAgents()
	if err != nil {
		return err
	}
	var req struct {
		Worker       string `json:"worker"`
		LeaseSeconds int    `json:"leaseSeconds"`
	}
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Worker == "" {
		return badRequest("a claim needs \"worker\", the claiming worker's name")
	}
	it, err := ext.Claim(r.PathValue("id"), req.Worker, time.Duration(req.LeaseSeconds)*time.Second)
	if err != nil {
		return agentTurnError(err)
	}
	return writeJSON(w, http.StatusOK, it)
}

// completeAgentTurn is POST /v1/agent-turns/{id}/complete {"worker"?,
// "reply", "data"?}.
func (s *Server) completeAgentTurn(w http.ResponseWriter, r *http.Request) error {
	ext, err := s.externalAgents()
	if err != nil {
		return err
	}
	var req struct {
		Worker string          `json:"worker"`
		Reply  string          `json:"reply"`
		Data   json.RawMessage `json:"data"`
	}
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	return s.settleTurn(w, r, func() error { return ext.Complete(r.PathValue("id"), req.Worker, req.Reply, req.Data) })
}

// failAgentTurn is POST /v1/agent-turns/{id}/fail {"worker"?, "message"}.
func (s *Server) failAgentTurn(w http.ResponseWriter, r *http.Request) error {
	ext, err := s.externalAgents()
	if err != nil {
		return err
	}
	var req struct {
		Worker  string `json:"worker"`
		Message string `json:"message"`
	}
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	return s.settleTurn(w, r, func() error { return ext.Fail(r.PathValue("id"), req.Worker, req.Message) })
}

// settleTurn hands a turn's outcome to the run (settle) and answers 204
// once the run has committed it. A refusal (an unknown item, another
// worker's lease) comes back at once. When the run has not committed it
// within the webhook timeout, the answer is 504: the outcome may still be
// recorded, and if the process stops first the turn is sent again, under
// the same id, to be completed again.
func (s *Server) settleTurn(w http.ResponseWriter, r *http.Request, settle func() error) error {
	id := r.PathValue("id")
	runID := id // a turn id is runID:position
	if i := strings.LastIndexByte(id, ':'); i > 0 {
		runID = id[:i]
	}
	changed, stop := s.h.Watch(runID)
	defer stop()
	if err := settle(); err != nil {
		return agentTurnError(err)
	}
	s.extendDeadlines(w, s.cfg.WebhookTimeout)
	timeout := time.NewTimer(s.cfg.WebhookTimeout)
	defer timeout.Stop()
	ctx := context.WithoutCancel(r.Context())
	for {
		recorded, err := s.h.AgentTurnRecorded(ctx, id)
		if err != nil {
			return err
		}
		if recorded {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		select {
		case <-changed:
		case <-timeout.C:
			return &apiError{http.StatusGatewayTimeout, "not_recorded", fmt.Sprintf("the run did not record the turn's outcome within %s; if the turn is listed again, settle it again", s.cfg.WebhookTimeout), nil}

		case <-r.Context().Done():
			return r.Context().Err()
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
	}
}

func agentTurnError(err error) error {
	switch {
	case errors.Is(err, agents.ErrUnknownItem):
		return &apiError{http.StatusNotFound, "not_found", err.Error(), nil}
	case errors.Is(err, agents.ErrClaimed):
		return &apiError{http.StatusConflict, "claimed", err.Error(), nil}
	case errors.Is(err, agents.ErrBadResult):
		return badRequest("%s", err.Error())
	}
	return err
}
