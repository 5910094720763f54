package session_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func output(t *testing.T, f *fixture, runID string) string {
	t.Helper()
	evs, err := f.h.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range evs {
		if e.Kind == "output" {
			var d struct{ Data string }
			_ = json.Unmarshal(e.Data, &d)
			b.WriteString(d.Data)
		}
	}
	return b.String()
}

// The spec's "review the release notes, then publish if approved", as an
// execute call in a session with a scripted reviewer: approved notes are
// published (once); notes the reviewer rejects never reach the publish
// step.
func TestReleaseNotesReviewThenPublish(t *testing.T) {
	f := newFixture(t)
	f.addExample("release-notes")
	s := f.session("conv-notes")
	r := call(t, s, "release-notes", `{"notes":"v2.1: faster replay"}`, nil)
	if r.Status != "completed" || !strings.HasPrefix(r.Text, `{"published":true,"url":"https://notes.deploys.invalid/`) {
		t.Fatalf("approved notes: %+v", r)
	}
	if n := strings.Count(output(t, f, r.Run.ID), "side effect: published"); n != 1 {
		t.Errorf("published %d times", n)
	}
	r = call(t, s, "release-notes", `{"notes":"v2.2: TODO"}`, nil)
	if r.Status != "completed" || r.Text != `{"published":false,"reason":"the notes still say TODO"}` {
		t.Fatalf("rejected notes: %+v", r)
	}
	if strings.Contains(output(t, f, r.Run.ID), "published") {
		t.Error("rejected notes were published")
	}
}

// The spec's agent router: a step picks the target and ctx.agent sends the
// question there.
func TestAgentRouter(t *testing.T) {
	f := newFixture(t)
	f.addExample("router")
	s := f.session("conv-router")
	for q, want := range map[string]string{
		"Why was I charged twice?":    `{"agent":"billing","reply":"billing: Why was I charged twice?"}`,
		"How do I reset my password?": `{"agent":"support","reply":"support: How do I reset my password?"}`,
	} {
		in, _ := json.Marshal(map[string]string{"question": q})
		if r := call(t, s, "router", string(in), nil); r.Status != "completed" || r.Text != want {
			t.Errorf("%q: %+v", q, r)
		}
	}
}
