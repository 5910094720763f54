package sse_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandflow/sandflow/internal/sse"
)

func start(t *testing.T) (*sse.Writer, *httptest.ResponseRecorder) {
	t.Helper()
	rec := httptest.NewRecorder()
	sw, err := sse.Start(rec)
	if err != nil {
		t.Fatal(err)
	}
	return sw, rec
}

// Start sets the stream's headers and sends them before any event.
func TestStartSendsTheHeaders(t *testing.T) {
	_, rec := start(t)
	if !rec.Flushed {
		t.Error("the header was not flushed")
	}
	want := map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
	for k, v := range want {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("status %d, body %q", rec.Code, rec.Body)
	}
}

// A header the caller set before Start is kept.
func TestStartKeepsTheCallersCacheControl(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Cache-Control", "no-store")
	if _, err := sse.Start(rec); err != nil {
		t.Fatal(err)
	}
	if got := rec.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want the caller's no-store", got)
	}
}

// noFlush is a response writer that cannot flush: of the writer it holds
// it has the three methods of http.ResponseWriter only.
type noFlush struct{ http.ResponseWriter }

// wrapped hides a writer's methods but Unwrap, as middleware does.
type wrapped struct{ w http.ResponseWriter }

func (w wrapped) Header() http.Header         { return w.w.Header() }
func (w wrapped) Write(b []byte) (int, error) { return w.w.Write(b) }
func (w wrapped) WriteHeader(code int)        { w.w.WriteHeader(code) }
func (w wrapped) Unwrap() http.ResponseWriter { return w.w }

// A writer that cannot flush is refused before anything is written; one
// that wraps a writer that can (Unwrap) streams.
func TestStartNeedsAWriterThatFlushes(t *testing.T) {
	rec := httptest.NewRecorder()
	sw, err := sse.Start(noFlush{rec})
	if !errors.Is(err, http.ErrNotSupported) || sw != nil {
		t.Fatalf("Start on a writer that cannot flush: %v, %v", sw, err)
	}
	if len(rec.Header()) != 0 || rec.Body.Len() != 0 {
		t.Errorf("Start wrote before refusing: %v %q", rec.Header(), rec.Body)
	}

	rec = httptest.NewRecorder()
	sw, err = sse.Start(wrapped{rec})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Send(sse.Event{Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := sw.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := rec.Body.String(); got != "data: x\n\n" || !rec.Flushed {
		t.Errorf("through a wrapper: %q (flushed %v)", got, rec.Flushed)
	}
}

// An event is framed as a client reads it back: each line of its data is
// a data line, whichever line break ended it.
func TestSendFramesEachLineOfData(t *testing.T) {
	for _, c := range []struct {
		name string
		e    sse.Event
		want string
	}{
		{"all fields", sse.Event{ID: "7", Type: "step", Data: []byte(`{"a":1}`)}, "id: 7\nevent: step\ndata: {\"a\":1}\n\n"},
		{"data alone", sse.Event{Data: []byte("<p>hi</p>")}, "data: <p>hi</p>\n\n"},
		{"empty data is one empty line", sse.Event{Type: "end"}, "event: end\ndata: \n\n"},
		{"LF", sse.Event{Data: []byte("a\nb\nc")}, "data: a\ndata: b\ndata: c\n\n"},
		{"CRLF", sse.Event{Data: []byte("a\r\nb\r\n")}, "data: a\ndata: b\ndata: \n\n"},
		{"a lone CR ends a line too", sse.Event{Data: []byte("a\rb")}, "data: a\ndata: b\n\n"},
		{"CR then CRLF", sse.Event{Data: []byte("a\r\r\nb")}, "data: a\ndata: \ndata: b\n\n"},
		{"empty lines kept", sse.Event{Data: []byte("\n\na")}, "data: \ndata: \ndata: a\n\n"},
		{"a field-like line stays data", sse.Event{Data: []byte("x\nevent: forged\n\nid: 9")}, "data: x\ndata: event: forged\ndata: \ndata: id: 9\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sw, rec := start(t)
			if err := sw.Send(c.e); err != nil {
				t.Fatal(err)
			}
			if got := rec.Body.String(); got != c.want {
				t.Errorf("wrote %q, want %q", got, c.want)
			}
		})
	}
}

// Events written one after another reuse the writer's buffer without
// mixing: a short event after a long one is written whole and alone.
func TestSendAfterALongerEvent(t *testing.T) {
	sw, rec := start(t)
	if err := sw.Send(sse.Event{ID: "1", Type: "long", Data: []byte("0123456789\n0123456789")}); err != nil {
		t.Fatal(err)
	}
	if err := sw.Send(sse.Event{ID: "2", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	want := "id: 1\nevent: long\ndata: 0123456789\ndata: 0123456789\n\nid: 2\ndata: x\n\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
}

// An id or type with a line break is refused and nothing is written: it
// would end its field and start a forged one.
func TestSendRefusesALineBreakInAField(t *testing.T) {
	for _, e := range []sse.Event{
		{ID: "1\nevent: forged", Data: []byte("x")},
		{ID: "1\r", Data: []byte("x")},
		{Type: "a\nb", Data: []byte("x")},
		{Type: "a\rb", Data: []byte("x")},
	} {
		sw, rec := start(t)
		if err := sw.Send(e); !errors.Is(err, sse.ErrLineBreak) {
			t.Errorf("Send(%q, %q): %v, want ErrLineBreak", e.ID, e.Type, err)
		}
		if rec.Body.Len() != 0 {
			t.Errorf("Send(%q, %q) wrote %q", e.ID, e.Type, rec.Body)
		}
	}
}

// A keep-alive is a comment, flushed.
func TestKeepAliveIsAFlushedComment(t *testing.T) {
	sw, rec := start(t)
	rec.Flushed = false
	if err := sw.KeepAlive(); err != nil {
		t.Fatal(err)
	}
	if got := rec.Body.String(); got != ": keep-alive\n\n" || !rec.Flushed {
		t.Errorf("keep-alive %q (flushed %v)", got, rec.Flushed)
	}
}

var errGone = errors.New("the client went away")

// failing is a response writer whose every write and flush fails.
type failing struct{ h http.Header }

func (w *failing) Header() http.Header         { return w.h }
func (w *failing) WriteHeader(int)             {}
func (w *failing) Write(b []byte) (int, error) { return 0, errGone }
func (w *failing) FlushError() error           { return errGone }

// The response's errors are reported, by Send, KeepAlive and Flush; Start
// has sent the header, and leaves its flush's error to the next Flush.
func TestWriteErrorsAreReported(t *testing.T) {
	sw, err := sse.Start(&failing{h: http.Header{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Send(sse.Event{Data: []byte("x")}); !errors.Is(err, errGone) {
		t.Errorf("Send: %v, want the write's error", err)
	}
	if err := sw.KeepAlive(); !errors.Is(err, errGone) {
		t.Errorf("KeepAlive: %v, want the write's error", err)
	}
	if err := sw.Flush(); !errors.Is(err, errGone) {
		t.Errorf("Flush: %v, want the flush's error", err)
	}
}
