package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sandflow/sandflow/store"
)

// heartbeat is how often an idle event stream sends a comment, so proxies
// and clients see it is alive.
const heartbeat = 15 * time.Second

// streamEvents streams a run's log as Server-Sent Events: one event per
// log entry, its id the entry's sequence number. A client that reconnects
// with Last-Event-ID (or ?after=N) gets every entry after that one, none
// twice. The stream ends after the run's last entry once it has ended.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	after := uint64(0)
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")} {
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return badRequest("event id %s is not a sequence number", quote(v))
		}
		after = n
	}
	if _, err := s.h.Run(r.Context(), id); err != nil {
		return err
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		return fmt.Errorf("httpapi: the response writer cannot stream")
	}
	ch, stop := s.h.Watch(id)
	defer stop()
	// A stream has no end to set a deadline by: each write gets its own.
	s.extendDeadlines(w, -1)
	s.streamWrite(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		evs, err := s.h.Store().Events(r.Context(), id, after, 1000)
		if err != nil {
			return nil // the stream has begun: a client reconnects and resumes
		}
		s.streamWrite(w)
		for _, e := range evs {
			if err := writeEvent(w, e); err != nil {
				return nil
			}
			after = e.Seq
		}
		fl.Flush()
		if len(evs) == 1000 {
			continue
		}
		run, err := s.h.Store().Run(r.Context(), id)
		if err != nil {
			return nil
		}
		if run.Status.Terminal() && run.LastSeq <= after {
			fmt.Fprintf(w, "event: end\ndata: {\"status\":%q}\n\n", run.Status)
			fl.Flush()
			return nil
		}
		select {
		case <-ch:
		case <-tick.C:
			s.streamWrite(w)
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
			fl.Flush()
		case <-r.Context().Done():
			return nil
		case <-s.ctx.Done():
			return nil
		}
	}
}

func writeEvent(w http.ResponseWriter, e store.Event) error {
	data, err := json.Marshal(struct {
		Seq  uint64          `json:"seq"`
		Time time.Time       `json:"time"`
		Kind string          `json:"kind"`
		Data json.RawMessage `json:"data"`
	}{e.Seq, e.Time, e.Kind, e.Data})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Kind, data)
	return err
}
