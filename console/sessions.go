package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"

	"github.com/sandflow/sandflow/internal/sse"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

// maxShownEvents bounds the events a session page shows: its newest.
const maxShownEvents = 200

// errNoSessions is returned when the console was made without a session
// manager (Config.Sessions).
var errNoSessions = errors.New("console: sessions are not served here")

func (c *Console) sessionsOn() error {
	if c.cfg.Sessions == nil {
		return errf(http.StatusNotFound, errNoSessions, "this console has no session manager")
	}
	return nil
}

// sessions lists the stored sessions by id, a page at a time (after: the
// last id of the previous page).
func (c *Console) sessions(w http.ResponseWriter, r *http.Request, si *signin) error {
	if err := c.sessionsOn(); err != nil {
		return err
	}
	ids, err := c.h.Store().SessionIDs(r.Context())
	if err != nil {
		return err
	}
	after := r.URL.Query().Get("after")
	i, _ := slices.BinarySearch(ids, after)
	if i < len(ids) && ids[i] == after {
		i++
	}
	ids = ids[i:]
	next := ""
	if len(ids) > c.cfg.PageSize {
		ids = ids[:c.cfg.PageSize]
		next = "/console/sessions?" + url.Values{"after": {ids[len(ids)-1]}}.Encode()
	}
	c.render(w, r, http.StatusOK, "sessions", si, map[string]any{"IDs": ids, "NextURL": next})
	return nil
}

// sessionView is what a session page shows: its tasks, and its newest
// events, newest first.
type sessionView struct {
	ID     string
	Tasks  []session.Task
	Events []session.Event
	Cut    int // older events not shown
}

// openSession opens a session that has a stored record; any other id is
// not found (opening it would make an empty session).
func (c *Console) openSession(ctx context.Context, id string) (*session.Session, error) {
	if err := c.sessionsOn(); err != nil {
		return nil, err
	}
	if _, err := c.h.Store().Session(ctx, id); errors.Is(err, store.ErrSessionNotFound) {
		return nil, errf(http.StatusNotFound, err, "no session %q", id)
	} else if err != nil {
		return nil, err
	}
	return c.cfg.Sessions.Open(ctx, id)
}

func sessionViewOf(ctx context.Context, ss *session.Session) sessionView {
	v := sessionView{ID: ss.ID(), Tasks: ss.Tasks(ctx), Events: ss.Events(ctx, 0)}
	if n := len(v.Events); n > maxShownEvents {
		v.Cut = n - maxShownEvents
		v.Events = v.Events[v.Cut:]
	}
	slices.Reverse(v.Events)
	return v
}

func (c *Console) sessionPage(w http.ResponseWriter, r *http.Request, si *signin) error {
	ss, err := c.openSession(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "session", si, sessionViewOf(r.Context(), ss))
	return nil
}

// sessionStream sends the session's live region after every change to
// its events or its tasks' runs. It does not end by itself.
func (c *Console) sessionStream(w http.ResponseWriter, r *http.Request, si *signin) error {
	ss, err := c.openSession(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return c.stream(w, r, func(sw *sse.Writer) error {
		for {
			// Watch before reading, so nothing between the two is missed.
			ch, stop := ss.Watch()
			html, err := c.fragment("session-live", si, sessionViewOf(r.Context(), ss))
			if err == nil {
				err = sendFragment(sw, "", html)
			}
			if err != nil {
				stop()
				return err
			}
			select {
			case <-ch:
			case <-r.Context().Done():
			case <-c.ctx.Done():
			}
			stop()
			if r.Context().Err() != nil || c.ctx.Err() != nil {
				return nil
			}
		}
	})
}
