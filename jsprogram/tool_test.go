package jsprogram_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

// output is the run's recorded stdout and stderr.
func output(t testing.TB, h *host.Host, runID string) string {
	t.Helper()
	evs, err := h.Events(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range evs {
		if e.Kind != host.EvOutput {
			continue
		}
		var d struct{ Data string }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		b.WriteString(d.Data)
	}
	return b.String()
}

// The deploy tool in JavaScript: the plan step runs, the question
// waits across a host restart, and once approved the apply step runs.
// Each step's side effect happened exactly once, though the body ran three
// times (start, and the replays after the restart and the answer).
func TestToolDeployAcrossRestart(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	p := f.AddExample("deploy")
	if p.Manifest.Entry != host.EntryExecute || p.Manifest.Engine != jsprogram.EngineName || !strings.Contains(p.Manifest.Description, "approve the plan") {
		t.Fatalf("manifest %+v", p.Manifest)
	}
	ri := f.Call("deploy", `{"service":"api"}`)
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].Kind != "ask" {
		t.Fatalf("want a run waiting on a question, got %+v (error %+v)", ri, ri.Error)
	}
	f.Restart()
	ri, err := f.H.AnswerAsk(context.Background(), ri.Waiting[0].AskID, host.Answer{OptionID: "approve"})
	if err != nil {
		t.Fatal(err)
	}
	ri, err = f.H.Drive(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := result[struct {
		Deployed bool
		URL      string
	}](t, ri)
	want := "https://api.deploys.invalid/releases/" + ri.ID + "-3"
	if !got.Deployed || got.URL != want {
		t.Errorf("result %s, want deployed at %s", ri.Result, want)
	}
	out := output(t, f.H, ri.ID)
	for _, line := range []string{
		"side effect: planned deploy of api (step " + ri.ID + ":1, attempt 1)\n",
		"side effect: applied deploy of api (step " + ri.ID + ":3, attempt 1)\n",
	} {
		if n := strings.Count(out, line); n != 1 {
			t.Errorf("%q ran %d times; output:\n%s", line, n, out)
		}
	}

	// Rejected: no apply step.
	ri = f.Call("deploy", `{"service":"web"}`)
	ri, err = f.H.AnswerAsk(context.Background(), ri.Waiting[0].AskID, host.Answer{OptionID: "cancel"})
	if err == nil {
		ri, err = f.H.Drive(context.Background(), ri.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r := result[map[string]any](t, ri); r["deployed"] != false || r["reason"] != "rejected" {
		t.Errorf("rejected deploy: %s", ri.Result)
	}
	if strings.Contains(output(t, f.H, ri.ID), "applied") {
		t.Error("a rejected deploy applied")
	}
	// Bad input is refused by the script's schema before a run starts.
	_, err = f.H.Call(context.Background(), "deploy", json.RawMessage(`{"service":""}`), nil)
	if !errors.Is(err, host.ErrBadInput) {
		t.Errorf("empty service: %v, want ErrBadInput", err)
	}
}
