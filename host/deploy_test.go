package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// countOutput counts recorded output lines containing s.
func countOutput(t testing.TB, h *host.Host, runID, s string) int {
	t.Helper()
	evs, err := h.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Kind != host.EvOutput {
			continue
		}
		var d struct{ Data string }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		n += strings.Count(d.Data, s)
	}
	return n
}

func TestDeployApproveAcrossRestart(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.add("examples/deploy")
		ri := f.call("deploy", `{"service":"api"}`)
		if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].Kind != "ask" {
			t.Fatalf("after call: %+v", ri)
		}
		askID := ri.Waiting[0].AskID
		if !strings.Contains(ri.Waiting[0].Prompt, "Deploy api?") {
			t.Errorf("prompt %q", ri.Waiting[0].Prompt)
		}
		f.restart()
		ri, err := f.h.AnswerAsk(context.Background(), askID, host.Answer{OptionID: "approve"})
		if err != nil {
			t.Fatal(err)
		}
		if ri.Status != store.StatusCompleted {
			t.Fatalf("after answer: %+v", ri)
		}
		var out struct {
			Deployed bool
			URL      string
		}
		if err := json.Unmarshal(ri.Result, &out); err != nil || !out.Deployed || !strings.HasPrefix(out.URL, "https://api.") {
			t.Fatalf("result %s (%v)", ri.Result, err)
		}
		if n := countOutput(t, f.h, ri.ID, "planned deploy of api"); n != 1 {
			t.Errorf("plan step ran %d times, want 1", n)
		}
		if n := countOutput(t, f.h, ri.ID, "applied deploy of api"); n != 1 {
			t.Errorf("apply step ran %d times, want 1", n)
		}
	})
}
