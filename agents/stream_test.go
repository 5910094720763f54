package agents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/agents"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

// stream answers a streaming request as the provider does: the reply
// (a chat completion, as reply makes it) as chat.completion.chunk events,
// its text in pieces of a word each and each tool call's arguments in two
// halves, then the finish reason, the usage, and [DONE].
func (f *fakeModel) stream(w http.ResponseWriter, n int, body string) {
	var c struct {
		Choices []struct {
			Message struct {
				Content   *string           `json:"content"`
				ToolCalls []json.RawMessage `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage json.RawMessage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil || len(c.Choices) != 1 {
		http.Error(w, "the scripted reply is not a completion", 500)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	i := 0
	send := func(v map[string]any) {
		v["id"], v["object"], v["created"], v["model"] = "chatcmpl-s", "chat.completion.chunk", 1, "m"
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
		if f.piece != nil {
			f.piece(n, i)
		}
		i++
	}
	delta := func(d map[string]any, finish any) {
		send(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish}}})
	}
	ch := c.Choices[0]
	delta(map[string]any{"role": "assistant", "content": ""}, nil)
	if ch.Message.Content != nil {
		for _, word := range strings.SplitAfter(*ch.Message.Content, " ") {
			delta(map[string]any{"content": word}, nil)
		}
	}
	for k, raw := range ch.Message.ToolCalls {
		var tc struct {
			ID       string `json:"id"`
			Function struct{ Name, Arguments string }
		}
		_ = json.Unmarshal(raw, &tc)
		half := len(tc.Function.Arguments) / 2
		delta(map[string]any{"tool_calls": []any{map[string]any{"index": k, "id": tc.ID, "type": "function",
			"function": map[string]any{"name": tc.Function.Name, "arguments": tc.Function.Arguments[:half]}}}}, nil)
		delta(map[string]any{"tool_calls": []any{map[string]any{"index": k, "function": map[string]any{"arguments": tc.Function.Arguments[half:]}}}}, nil)
	}
	delta(map[string]any{}, ch.FinishReason)
	send(map[string]any{"choices": []any{}, "usage": c.Usage})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// streamer is a streaming loop agent with the JavaScript tool.
var streamer = agents.LoopAgent{Name: "streamer", Instructions: "Use the tool.", Stream: true, Tools: []agents.LoopTool{{Tool: "upper"}}}

// twoSteps scripts the model: a text and a call of the tool, then an
// answer with its result.
func twoSteps(n int, req chatReq) (int, string) {
	if res := req.toolResults(); res["c1"] != "" {
		return 200, reply("the tool said " + res["c1"] + " so there")
	}
	return 200, reply("let me upper that", call{"c1", "upper", `{"text":"abc"}`})
}

// waitEvents waits until the session's stream from from has an event
// that done accepts, and returns the stream up to it.
func waitEvents(t *testing.T, ss *session.Session, from session.Offset, what string, done func(session.Event) bool) []session.Event {
	t.Helper()
	var out []session.Event
	testhost.WaitUntil(t, what, func() bool {
		out = ss.EventsSince(context.Background(), from)
		return slices.ContainsFunc(out, done)
	})
	return out
}

// modelSteps are the reply texts the turn's model steps recorded.
func modelSteps(t *testing.T, h *host.Host, runID string) []string {
	t.Helper()
	evs, err := h.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	names := map[uint32]string{}
	var out []string
	for _, e := range evs {
		var d struct {
			Op     uint32
			Name   string
			Result struct{ Message struct{ Content string } }
		}
		_ = json.Unmarshal(e.Data, &d)
		switch e.Kind {
		case host.EvStepStarted:
			if d.Name != "" {
				names[d.Op] = d.Name
			}
		case host.EvStepCompleted:
			if names[d.Op] == "model" {
				out = append(out, d.Result.Message.Content)
			}
		}
	}
	return out
}

// A streaming loop agent run as a session's task: the model's text
// reaches the session as model.delta events while its call is still out
// (the fake provider holds the stream open after the first word until
// the test has seen it), the tool call is framed by tool.started and
// tool.settled, the deltas of each step add up to the reply the step
// recorded, and the stream resumes from any offset, a delta's included.
// After a restart the kept events come back from a delta's offset, and
// the deltas, which are not stored, do not.
func TestLoopStreamsToSession(t *testing.T) {
	seen := make(chan struct{})
	m := &fakeModel{reply: twoSteps, piece: func(n, i int) {
		if n == 1 && i == 1 { // the first word of the first reply is out
			<-seen
		}
	}}
	lh := newLoopHost(t, m, streamer)
	ctx := context.Background()
	mgr := session.NewManager(lh.H)
	ss, err := mgr.Open(ctx, "stream-1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := ss.Call(ctx, agents.LoopToolName("streamer"), json.RawMessage(`{"message":"go"}`), nil)
	if err != nil || res.Status != "started" {
		t.Fatalf("call: %+v %v", res, err)
	}
	first := waitEvents(t, ss, session.Offset{}, "the first delta", func(e session.Event) bool { return e.Type == session.EvModelDelta })
	if d := first[len(first)-1]; d.Delta != "let " || d.Sub != 1 || d.CallID != res.Run.ID || d.TaskID != res.TaskID || d.Step == "" {
		t.Fatalf("first delta %+v", d)
	}
	if got := modelSteps(t, lh.H, res.Run.ID); len(got) != 0 {
		t.Fatalf("a model step was recorded before its stream ended: %q", got)
	}
	close(seen)
	all := waitEvents(t, ss, session.Offset{}, "the task to settle", func(e session.Event) bool { return e.Type == session.EvCallSettled })

	var kinds []string
	deltas := map[string]string{}
	var steps []string
	for i, e := range all {
		if i > 0 && !all[i-1].Offset().Before(e.Offset()) {
			t.Fatalf("event %d at %s follows %s", i, e.Offset(), all[i-1].Offset())
		}
		// call.progress (the tool call's label) is read from the run's
		// log, which a task's first drive keeps from the session until it
		// returns: it may come after the live events made meanwhile.
		if k := e.Type; k != session.EvCallProgress && (len(kinds) == 0 || kinds[len(kinds)-1] != k) {
			kinds = append(kinds, k)
		}
		if e.Type == session.EvModelDelta {
			if _, ok := deltas[e.Step]; !ok {
				steps = append(steps, e.Step)
			}
			deltas[e.Step] += e.Delta
		}
	}
	if !slices.ContainsFunc(all, func(e session.Event) bool {
		return e.Type == session.EvCallProgress && string(e.Progress) == `{"toolCall":"upper"}`
	}) {
		t.Errorf("no progress for the tool call")
	}
	want := []string{session.EvCallStarted, session.EvTaskStarted, session.EvModelDelta,
		session.EvToolStarted, session.EvToolSettled, session.EvModelDelta, session.EvCallSettled, session.EvTaskSettled}
	if !slices.Equal(kinds, want) {
		t.Fatalf("event kinds\n%v\nwant\n%v", kinds, want)
	}
	recorded := modelSteps(t, lh.H, res.Run.ID)
	if len(steps) != 2 || !slices.Equal(recorded, []string{deltas[steps[0]], deltas[steps[1]]}) || recorded[1] != `the tool said "ABC" so there` {
		t.Fatalf("deltas %q by step %q, recorded %q", deltas, steps, recorded)
	}
	i := slices.IndexFunc(all, func(e session.Event) bool { return e.Type == session.EvToolSettled })
	if tc := all[i].ToolCall; tc == nil || tc.Name != "upper" || tc.ID != "c1" || tc.Status != session.Completed {
		t.Fatalf("tool.settled %+v", all[i].ToolCall)
	} else if ri, err := lh.H.Run(ctx, tc.RunID); err != nil || ri.Status != store.StatusCompleted || ri.Tool != "upper" {
		t.Fatalf("the tool call's run %s: %+v %v", tc.RunID, ri, err)
	}
	var turn struct{ Reply string }
	if ri, _ := lh.H.Run(ctx, res.Run.ID); json.Unmarshal(ri.Result, &turn) != nil || turn.Reply != recorded[1] {
		t.Fatalf("turn result %s", ri.Result)
	}

	// A reconnect from any offset gets the rest of the stream, once.
	for k := range all {
		if got := ss.EventsSince(ctx, all[k].Offset()); !sameEvents(got, all[k+1:]) {
			t.Fatalf("from %s: %d events, want %d", all[k].Offset(), len(got), len(all)-k-1)
		}
	}

	// A restart: the kept events after a delta's offset come back, the
	// deltas do not.
	mid := slices.IndexFunc(all, func(e session.Event) bool { return e.Type == session.EvModelDelta })
	mgr.Close()
	lh.Close()
	lh.Open()
	lh.setUp()
	mgr = session.NewManager(lh.H)
	defer mgr.Close()
	ss, err = mgr.Open(ctx, "stream-1")
	if err != nil {
		t.Fatal(err)
	}
	var kept []session.Event
	for _, e := range all[mid+1:] {
		if e.Type != session.EvModelDelta {
			kept = append(kept, e)
		}
	}
	if got := ss.EventsSince(ctx, all[mid].Offset()); !sameEvents(got, kept) {
		t.Fatalf("after the restart, from %s: %v, want %v", all[mid].Offset(), offsets(got), offsets(kept))
	}
}

func sameEvents(a, b []session.Event) bool {
	return slices.EqualFunc(a, b, func(x, y session.Event) bool {
		return x.Offset() == y.Offset() && x.Type == y.Type && x.Delta == y.Delta
	})
}

func offsets(evs []session.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type + "@" + e.Offset().String()
	}
	return out
}

// An agents file's loop agent may stream; a scripted one may not.
func TestAgentsFileStream(t *testing.T) {
	b, err := agents.Parse(context.Background(), []byte(`{"openai": {"baseURL": "http://127.0.0.1:1/v1", "model": "m"},
		"agents": [{"name": "writer", "kind": "loop", "stream": true}]}`))
	if err != nil || b.Loop == nil || len(b.Loop.List) != 1 || !b.Loop.List[0].Stream {
		t.Fatalf("parse: %+v %v", b, err)
	}
	if _, err := agents.Parse(context.Background(), []byte(`{"agents": [{"name": "canned", "reply": "hi", "stream": true}]}`)); err == nil {
		t.Fatal("a scripted agent with stream was accepted")
	}
}
