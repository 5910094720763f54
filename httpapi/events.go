package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/sandflow/sandflow/internal/sse"
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
	ch, stop := s.h.Watch(id)
	defer stop()
	sw, tick, err := s.startStream(w)
	if err != nil {
		return err
	}
	defer tick.Stop()
	for {
		evs, err := s.h.Store().Events(r.Context(), id, after, 1000)
		if err != nil {
			return nil // the stream has begun: a client reconnects and resumes
		}
		s.streamWrite(w)
		for _, e := range evs {
			if err := sendEvent(sw, e); err != nil {
				return nil
			}
			after = e.Seq
		}
		if err := sw.Flush(); err != nil {
			return nil
		}
		if len(evs) == 1000 {
			continue
		}
		run, err := s.h.Store().Run(r.Context(), id)
		if err != nil {
			return nil
		}
		if run.Status.Terminal() && run.LastSeq <= after {
			if sendEnd(sw, run.Status) == nil {
				_ = sw.Flush()
			}
			return nil
		}
		select {
		case <-ch:
		case <-tick.C:
			s.streamWrite(w)
			if err := sw.KeepAlive(); err != nil {
				return nil
			}
		case <-r.Context().Done():
			return nil
		case <-s.ctx.Done():
			return nil
		}
	}
}

// sendEvent writes a log entry as its event: its id the entry's sequence
// number, its type the entry's kind, its data the entry as JSON.
func sendEvent(sw *sse.Writer, e store.Event) error {
	data, err := json.Marshal(struct {
		Seq  uint64          `json:"seq"`
		Time time.Time       `json:"time"`
		Kind string          `json:"kind"`
		Data json.RawMessage `json:"data"`
	}{e.Seq, e.Time, e.Kind, e.Data})
	if err != nil {
		return err
	}
	return sw.Send(sse.Event{ID: strconv.FormatUint(e.Seq, 10), Type: e.Kind, Data: data})
}

// sendEnd writes the event that ends a run's stream, with the run's
// final status: {"status":"completed"}.
func sendEnd(sw *sse.Writer, status store.RunStatus) error {
	data, err := json.Marshal(struct {
		Status store.RunStatus `json:"status"`
	}{status})
	if err != nil {
		return err
	}
	return sw.Send(sse.Event{Type: "end", Data: data})
}

// startStream begins an event stream on w: deadlines per write (a stream
// has no end to set one by), the SSE headers, and the heartbeat's ticker,
// which the caller stops.
func (s *Server) startStream(w http.ResponseWriter) (*sse.Writer, *time.Ticker, error) {
	s.extendDeadlines(w, -1)
	s.streamWrite(w)
	sw, err := sse.Start(w)
	if err != nil {
		return nil, nil, err
	}
	return sw, time.NewTicker(heartbeat), nil
}
