package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/sse"
	"github.com/sandflow/sandflow/session"
)

// A streaming loop agent's task over the session's SSE stream: its
// model.delta events have ids seq.sub, and a client cut off after a
// delta reconnects with that id as Last-Event-ID and gets the rest of
// the stream, each event once, the deltas adding up to the reply.
func TestSessionStreamResumesFromADelta(t *testing.T) {
	model := httptest.NewServer(&agents.ScriptedModel{Steps: []agents.ScriptedModelStep{{Text: "the quick brown fox"}}})
	t.Cleanup(model.Close)
	loop := &agents.Loop{Endpoint: agents.Endpoint{BaseURL: model.URL + "/v1", APIKeyEnv: "SANDFLOW_TEST_NO_KEY"}, Model: "scripted",
		List: []agents.LoopAgent{{Name: "writer", Stream: true}}}
	e := newEnv(t, &host.Options{Agents: loop, Engines: map[string]host.Engine{agents.LoopEngineName: loop.Engine()}}, nil)
	if err := loop.Attach(context.Background(), e.h); err != nil {
		t.Fatal(err)
	}
	if r := e.post("/v1/sessions/conv-stream/calls", `{"tool":"agent-writer","input":{"message":"go"}}`); r.status != http.StatusOK {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	read := func(last string, stop func(sse.Event) bool) []sse.Event {
		req, _ := http.NewRequest("GET", e.srv.URL+"/v1/sessions/conv-stream/events", nil)
		req.Header.Set("Authorization", "Bearer "+apiToken)
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []sse.Event
		r := sse.NewReader(resp.Body)
		for {
			ev, err := r.Next()
			if errors.Is(err, io.EOF) {
				t.Fatalf("the stream ended after %d events", len(out))
			} else if err != nil {
				t.Fatal(err)
			}
			if ev.Type != "" {
				out = append(out, ev)
				if stop(ev) {
					return out
				}
			}
		}
	}
	deltas := 0
	first := read("", func(ev sse.Event) bool {
		if ev.Type == session.EvModelDelta {
			deltas++
		}
		return deltas == 2
	})
	cut := first[len(first)-1].ID
	if !strings.Contains(cut, ".") {
		t.Fatalf("a delta's id is %q, not seq.sub", cut)
	}
	rest := read(cut, func(ev sse.Event) bool { return ev.Type == session.EvTaskSettled })
	var text strings.Builder
	prev := session.Offset{}
	for _, ev := range append(first, rest...) {
		o, err := session.ParseOffset(ev.ID)
		if err != nil || !prev.Before(o) {
			t.Fatalf("event id %q after %s (%v)", ev.ID, prev, err)
		}
		prev = o
		if ev.Type == session.EvModelDelta {
			var d session.Event
			if err := json.Unmarshal(ev.Data, &d); err != nil || d.Offset() != o {
				t.Fatalf("delta %s: %+v %v", ev.ID, d, err)
			}
			text.WriteString(d.Delta)
		}
	}
	if text.String() != "the quick brown fox" {
		t.Errorf("the deltas add up to %q", text.String())
	}
	if r := e.get("/v1/sessions/conv-stream/events?after=3.x"); r.status != http.StatusBadRequest {
		t.Errorf("a bad after: %d", r.status)
	}
}
