package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandflow/sandflow/internal/sse"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

// startStream starts an event stream on a recorder and checks the
// headers both of the API's streams answer with.
func startStream(t *testing.T) (*sse.Writer, *httptest.ResponseRecorder) {
	t.Helper()
	rec := httptest.NewRecorder()
	sw, err := sse.Start(rec)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if rec.Code != http.StatusOK || !rec.Flushed {
		t.Errorf("status %d, flushed %v", rec.Code, rec.Flushed)
	}
	return sw, rec
}

// A run's stream is framed as it was when the API wrote it by hand: each
// log entry an event with the entry's sequence number as its id and its
// kind as its type, the entry's JSON one data line; then the end event
// with the run's status; a keep-alive a comment.
func TestRunStreamBytesArePinned(t *testing.T) {
	sw, rec := startStream(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	for _, e := range []store.Event{
		{Seq: 1, Time: at, Kind: "run_created", Data: json.RawMessage(`{"tool":"deploy","input":{"service":"api"}}`)},
		{Seq: 2, Time: at, Kind: "step_completed", Data: json.RawMessage("{\n  \"output\": \"a\\nb <&>\"\n}")},
	} {
		if err := sendEvent(sw, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.KeepAlive(); err != nil {
		t.Fatal(err)
	}
	if err := sendEnd(sw, store.StatusCompleted); err != nil {
		t.Fatal(err)
	}
	want := "id: 1\nevent: run_created\ndata: {\"seq\":1,\"time\":\"2026-01-02T03:04:05.000006Z\",\"kind\":\"run_created\",\"data\":{\"tool\":\"deploy\",\"input\":{\"service\":\"api\"}}}\n\n" +
		"id: 2\nevent: step_completed\ndata: {\"seq\":2,\"time\":\"2026-01-02T03:04:05.000006Z\",\"kind\":\"step_completed\",\"data\":{\"output\":\"a\\nb \\u003c\\u0026\\u003e\"}}\n\n" +
		": keep-alive\n\n" +
		"event: end\ndata: {\"status\":\"completed\"}\n\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("the stream:\n%q\nwant\n%q", got, want)
	}
}

// A session's stream is framed likewise: the event's seq its id, its
// type the event's type, the event's JSON one data line.
func TestSessionStreamBytesArePinned(t *testing.T) {
	sw, rec := startStream(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, e := range []session.Event{
		{Seq: 1, Type: "call.started", Time: at, CallID: "c1", Tool: "deploy"},
		{Seq: 12, Type: "task.settled", Time: at, TaskID: "t1", RunID: "r1", Status: "completed", Output: json.RawMessage(`{"text":"line one\nline two"}`)},
	} {
		if err := sendSessionEvent(sw, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.KeepAlive(); err != nil {
		t.Fatal(err)
	}
	want := "id: 1\nevent: call.started\ndata: {\"seq\":1,\"type\":\"call.started\",\"time\":\"2026-01-02T03:04:05Z\",\"callId\":\"c1\",\"tool\":\"deploy\"}\n\n" +
		"id: 12\nevent: task.settled\ndata: {\"seq\":12,\"type\":\"task.settled\",\"time\":\"2026-01-02T03:04:05Z\",\"taskId\":\"t1\",\"runId\":\"r1\",\"status\":\"completed\",\"output\":{\"text\":\"line one\\nline two\"}}\n\n" +
		": keep-alive\n\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("the stream:\n%q\nwant\n%q", got, want)
	}
}
