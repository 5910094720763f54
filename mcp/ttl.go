package mcp

import (
	"sync"
	"time"

	"github.com/sandflow/sandflow/host"
)

// A task's ttl is how long after its creation its result is served: a
// client asks for one (2025-11-25's params.task.ttl), bounded by
// Options.MaxTaskTTL, else Options.TaskTTL. A task whose run has not
// ended never expires; one that ended past its ttl is refused with a
// clear error, while the run and its history stay (GET /v1/runs/{id}).
// See RATIONALE.md, "Why does an expired MCP task keep its run?".

// maxTTLEntries bounds the ttls held: past it the oldest go, and their
// tasks take Options.TaskTTL from their run's creation.
const maxTTLEntries = 100_000

type taskTTL struct {
	ttl     time.Duration
	created time.Time
}

// ttls are the ttls of the tasks this process created, by task id; a
// task created before a restart has Options.TaskTTL from its run's
// creation.
type ttls struct {
	mu    sync.Mutex
	byID  map[string]taskTTL
	order []string // ids by creation, for eviction
}

// record sets a task's ttl when it is created; a task's later views
// (tasks/get, a repeated createTask) keep the first.
func (t *ttls) record(id string, ttl time.Duration, now time.Time) taskTTL {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byID[id]; ok {
		return e
	}
	if t.byID == nil {
		t.byID = map[string]taskTTL{}
	}
	e := taskTTL{ttl: ttl, created: now}
	t.byID[id] = e
	t.order = append(t.order, id)
	for len(t.order) > maxTTLEntries {
		delete(t.byID, t.order[0])
		t.order = t.order[1:]
	}
	return e
}

func (t *ttls) get(id string) (taskTTL, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.byID[id]
	return e, ok
}

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

// ttlOf is a task's ttl and when it was created.
func (s *Server) ttlOf(ri host.RunInfo, call int) taskTTL {
	if e, ok := s.ttls.get(taskID(ri.ID, call)); ok {
		return e
	}
	return taskTTL{ttl: s.opts.TaskTTL, created: ri.CreatedAt}
}

// expired: the task ended and its ttl has passed.
func (s *Server) expired(ri host.RunInfo, call int) bool {
	if !ri.Status.Terminal() {
		return false
	}
	e := s.ttlOf(ri, call)
	return s.opts.Now().After(e.created.Add(e.ttl))
}
