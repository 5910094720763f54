package mcp

import (
	"net/http"
	"sync"
	"time"
)

// The 2025-11-25 sessions are bounded (Options.MaxSessions): an
// initialize past the bound closes the session idle the longest, whose
// client is answered 404 and starts a new one, as the transport has a
// client do for a session the server ended. Eviction, not refusal: a
// client that left without closing its session would otherwise hold its
// place until SessionTimeout. See RATIONALE.md, "Why does a new MCP
// session evict the idle-longest?".

// activity is when each 2025-11-25 session, by id, was last used.
type activity struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (a *activity) touch(id string) {
	if id == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = map[string]time.Time{}
	}
	a.last[id] = time.Now()
}

// opened records a session that initialize has just made, unless a later
// request of its own has already been recorded: the client can read the
// initialize response and send its next request before the initialize
// handler returns, and that later use must not be overwritten.
func (a *activity) opened(id string) {
	if id == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = map[string]time.Time{}
	}
	if _, ok := a.last[id]; !ok {
		a.last[id] = time.Now()
	}
}

// makeRoom closes sessions idle the longest until a new one fits.
func (s *Server) makeRoom() {
	live := map[string]bool{}
	for ss := range s.sdk.Sessions() {
		if id := ss.ID(); id != "" {
			live[id] = true
		}
	}
	var evict []string
	s.activity.mu.Lock()
	for id := range s.activity.last {
		if !live[id] {
			delete(s.activity.last, id) // closed, or timed out
		}
	}
	for len(s.activity.last) >= s.opts.MaxSessions {
		var oldest string
		var at time.Time
		for id, t := range s.activity.last {
			if oldest == "" || t.Before(at) {
				oldest, at = id, t
			}
		}
		delete(s.activity.last, oldest)
		evict = append(evict, oldest)
	}
	s.activity.mu.Unlock()
	if len(evict) == 0 {
		return
	}
	gone := map[string]bool{}
	for _, id := range evict {
		gone[id] = true
	}
	for ss := range s.sdk.Sessions() {
		if gone[ss.ID()] {
			s.opts.Logger.Info("mcp: closing the session idle the longest to open a new one", "session", ss.ID(), "max", s.opts.MaxSessions)
			ss.Close()
		}
	}
}

// serveSession serves a 2025-11-25 request, making room for a new session
// and recording each session's use.
func (s *Server) serveSession(w http.ResponseWriter, r *http.Request, initialize bool) {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" && initialize {
		s.makeRoom()
	}
	s.activity.touch(id)
	if r.Method == http.MethodGet {
		s.serveGET(w, r)
		return
	}
	s.stateful.ServeHTTP(w, r)
	if id == "" {
		s.activity.opened(w.Header().Get("Mcp-Session-Id"))
	}
}
