package session

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// Expiry is how long a client is served the result of one of a session's
// calls as a task of its own (an MCP task's ttl): TTL, counted from From.
// It is kept in the session's record with the call, so that it holds
// after a restart; the session itself does nothing with it.
type Expiry struct {
	TTL  time.Duration `json:"ttl"`
	From time.Time     `json:"from"`
}

// Bounds of the expiries kept: a session's record keeps its latest
// maxExpiries, and a manager indexes at most maxIndexedExpiries across
// its sessions; a call whose expiry was dropped has none.
const (
	maxExpiries        = 10_000
	maxIndexedExpiries = 100_000
)

// expiries is a manager's index of its sessions' expiries, by call id,
// filled from the stored records on its first miss (read) and as
// sessions record them.
type expiries struct {
	mu    sync.Mutex
	byID  map[string]Expiry
	order []string // by recording, for eviction
	read  bool
}

func (x *expiries) put(id string, e Expiry) {
	if _, ok := x.byID[id]; ok {
		return
	}
	if x.byID == nil {
		x.byID = map[string]Expiry{}
	}
	x.byID[id] = e
	x.order = append(x.order, id)
	if len(x.order) > maxIndexedExpiries {
		delete(x.byID, x.order[0])
		x.order = x.order[1:]
	}
}

// Expiry is the expiry recorded for a call (a task's id, or a serve
// task's later call, TASK:N) in any of the manager's sessions, before a
// restart too. The first miss reads every stored session record once;
// after that the index is complete.
func (m *Manager) Expiry(ctx context.Context, callID string) (Expiry, bool, error) {
	m.exp.mu.Lock()
	defer m.exp.mu.Unlock()
	if e, ok := m.exp.byID[callID]; ok || m.exp.read {
		return e, ok, nil
	}
	ids, err := m.st.SessionIDs(ctx)
	if err != nil {
		return Expiry{}, false, err
	}
	for _, id := range ids {
		raw, err := m.st.Session(ctx, id)
		if err != nil {
			continue // deleted meanwhile
		}
		var rec struct {
			Expiries map[string]Expiry `json:"expiries"`
		}
		if json.Unmarshal(raw, &rec) != nil {
			continue // a damaged record: Open says so
		}
		for cid, e := range rec.Expiries {
			m.exp.put(cid, e)
		}
	}
	m.exp.read = true
	e, ok := m.exp.byID[callID]
	return e, ok, nil
}

// expire records a call's expiry in the record and the index; callers
// hold s.mu and save. A call's first expiry stays.
func (s *Session) expire(callID string, e *Expiry) {
	if e == nil {
		return
	}
	if _, ok := s.rec.Expiries[callID]; ok {
		return
	}
	if s.rec.Expiries == nil {
		s.rec.Expiries = map[string]Expiry{}
	}
	if len(s.rec.Expiries) >= maxExpiries {
		oldest := ""
		for id, x := range s.rec.Expiries {
			if oldest == "" || x.From.Before(s.rec.Expiries[oldest].From) {
				oldest = id
			}
		}
		delete(s.rec.Expiries, oldest)
	}
	s.rec.Expiries[callID] = *e
	s.m.exp.mu.Lock()
	s.m.exp.put(callID, *e)
	s.m.exp.mu.Unlock()
}

// Keep records the expiry of a call the session has no task for (an MCP
// execute call that became a task), and returns once it is durable; a
// call's first expiry stays.
func (s *Session) Keep(ctx context.Context, callID string, e Expiry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.rec.Expiries[callID]; ok {
		return nil
	}
	s.expire(callID, &e)
	return s.save(ctx)
}
