// Package sse writes Server-Sent Events (a text/event-stream response):
// the run and session event streams of the HTTP API and the console's
// live pages. It is the one place the framing is written, so that a value
// with a line break in it cannot end an event early or forge a field.
// Reader reads such a stream back as a client does, for the crash harness
// and the tests; FuzzRoundTrip checks the two against each other. See
// RATIONALE.md, "Why does one package write every event stream?".
//
// A Writer is not safe for concurrent use: one handler goroutine writes
// its stream. It sets no deadlines; a handler that streams for long moves
// its connection's deadlines itself.
package sse

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrLineBreak is returned by Send when an event's id or type holds a
// line break (CR or LF), which would end the field early and start
// another.
var ErrLineBreak = errors.New("sse: a line break in an event's id or type")

// Event is one event of a stream.
type Event struct {
	// ID is the event's id, which a client that reconnects sends back as
	// Last-Event-ID; "" writes no id line, and the client keeps the
	// last one it was sent.
	ID string
	// Type is the event's type; "" writes no event line, and a client
	// reads the event as a "message".
	Type string
	// Data is the event's data. Each of its lines (ended by LF, CRLF or a
	// lone CR, as a client reads them) is written as a data line of its
	// own, which the client joins again with LF: Data arrives as sent,
	// its line breaks made LF. Empty data is one empty data line, since
	// a client drops an event that has none.
	Data []byte
}

// Writer writes one event stream. Make one with Start.
type Writer struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte // reused: an event is framed here and written at once
}

// Start begins an event stream on w: it sets Content-Type to
// text/event-stream, and Cache-Control to no-cache and X-Accel-Buffering
// to no (proxies that buffer responses pass a stream through as it comes)
// unless the caller has set them, sends status 200 and flushes it, so that
// the client sees the stream open before the first event.
//
// When w cannot flush, Start writes nothing and returns an error that is
// http.ErrNotSupported; that is its only error. Once the status is sent,
// the connection's errors are the stream's: the next Flush reports a
// failed first flush.
func Start(w http.ResponseWriter) (*Writer, error) {
	if !canFlush(w) {
		return nil, fmt.Errorf("sse: the response writer cannot flush: %w", http.ErrNotSupported)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	for _, kv := range [...][2]string{{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}} {
		if h.Get(kv[0]) == "" {
			h.Set(kv[0], kv[1])
		}
	}
	w.WriteHeader(http.StatusOK)
	s := &Writer{w: w, rc: http.NewResponseController(w)}
	_ = s.Flush()
	return s, nil
}

// canFlush reports whether http.ResponseController can flush w: w, or a
// writer it wraps (Unwrap), has FlushError or Flush.
func canFlush(w http.ResponseWriter) bool {
	for {
		switch t := w.(type) {
		case interface{ FlushError() error }, http.Flusher:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return false
		}
	}
}

// Send writes an event, in one write; it stays in the response's buffer
// until Flush. It returns ErrLineBreak, having written nothing, for an id
// or type with a line break, and otherwise the response's write error.
func (s *Writer) Send(e Event) error {
	if strings.ContainsAny(e.ID, "\r\n") || strings.ContainsAny(e.Type, "\r\n") {
		return ErrLineBreak
	}
	b := s.buf[:0]
	if e.ID != "" {
		b = append(append(append(b, "id: "...), e.ID...), '\n')
	}
	if e.Type != "" {
		b = append(append(append(b, "event: "...), e.Type...), '\n')
	}
	data := e.Data
	for {
		b = append(b, "data: "...)
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			b = append(append(b, data...), '\n')
			break
		}
		b = append(append(b, data[:i]...), '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	b = append(b, '\n')
	s.buf = b
	_, err := s.w.Write(b)
	return err
}

// KeepAlive writes a comment a client ignores and flushes it, so that an
// idle stream shows proxies and the client it is alive, and a client that
// went away is found by the write's error.
func (s *Writer) KeepAlive() error {
	if _, err := s.w.Write([]byte(": keep-alive\n\n")); err != nil {
		return err
	}
	return s.Flush()
}

// Flush sends what was written to the client, and returns the error of
// the write, if any.
func (s *Writer) Flush() error { return s.rc.Flush() }
