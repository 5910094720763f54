package mcp

import (
	"context"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/session"
)

// A task's ttl is how long after its creation its result is served: a
// client asks for one (2025-11-25's params.task.ttl), bounded by
// Options.MaxTaskTTL, else Options.TaskTTL. A task whose run has not
// ended never expires; one that ended past its ttl is refused with a
// clear error, while the run and its history stay (GET /v1/runs/{id}).
// See RATIONALE.md, "Why does an expired MCP task keep its run?".
//
// The ttl and the task's creation are kept durably in the sandflow
// session's record (session.Expiry): a task call's in the same write as
// the task, an execute call's, when it becomes a task, before the task
// is answered. After a restart a task expires when it was asked to,
// whichever session polls it; one with no record (created before ttls
// were kept, or dropped past the bounds) has Options.TaskTTL from its
// run's creation.

// requestedTTL is the ttl a call asks for, bounded by the maximum; the
// default when it asks for none.
func (s *Server) requestedTTL(c client) time.Duration {
	switch {
	case c.ttl <= 0:
		return s.opts.TaskTTL
	case c.ttl > s.opts.MaxTaskTTL:
		return s.opts.MaxTaskTTL
	}
	return c.ttl
}

// expiry is the expiry of a task a call creates now.
func (s *Server) expiry(c client) session.Expiry {
	return session.Expiry{TTL: s.requestedTTL(c), From: s.opts.Now()}
}

// ttlOf is a task's ttl and when it was created.
func (s *Server) ttlOf(ctx context.Context, ri host.RunInfo, call int) session.Expiry {
	e, ok, err := s.sessions.Expiry(ctx, taskID(ri.ID, call))
	if err != nil {
		s.opts.Logger.Warn("mcp: reading a task's ttl", "task", taskID(ri.ID, call), "err", err)
	}
	if !ok {
		return session.Expiry{TTL: s.opts.TaskTTL, From: ri.CreatedAt}
	}
	return e
}

// expired: the task ended and its ttl has passed.
func (s *Server) expired(ctx context.Context, ri host.RunInfo, call int) bool {
	if !ri.Status.Terminal() {
		return false
	}
	e := s.ttlOf(ctx, ri, call)
	return s.opts.Now().After(e.From.Add(e.TTL))
}
