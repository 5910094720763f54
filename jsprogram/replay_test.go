package jsprogram_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

// The fan-out example, with scripted agents, across a host restart
// while both children are running: the run completes with both replies,
// each turn sent once before the restart and once after under its same id.
func TestFanOutAcrossRestart(t *testing.T) {
	a := newAgents(echo)
	a.gate = make(chan struct{})
	f := newFixture(t, jsprogram.Limits{}, a)
	in := `{"js": "const tickets = [{id: 7, title: \"login fails\"}];\nconst [triage, review] = await Promise.all([\n  ctx.agent(\"ticket-triage\", { message: JSON.stringify(tickets) }),\n  ctx.agent(\"ticket-review\", { message: JSON.stringify(tickets) }),\n]);\nreturn { triage, review };"}`
	ri, err := f.H.Start(context.Background(), jsprogram.WorkflowToolName, []byte(in), nil)
	if err != nil {
		t.Fatal(err)
	}
	driven := make(chan error, 1)
	go func() {
		_, err := f.H.Drive(context.Background(), ri.ID)
		driven <- err
	}()
	testhost.WaitUntil(t, "both children to start", func() bool { n, _ := a.turns(); return n == 2 })
	info, err := f.H.Run(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != store.StatusRunning || len(info.Waiting) != 2 || info.Waiting[0].Kind != "agent" {
		t.Fatalf("with children out: status %s, waiting %+v", info.Status, info.Waiting)
	}
	f.Restart()
	if err := <-driven; !errors.Is(err, host.ErrClosed) {
		t.Fatalf("drive cut off by the restart: %v", err)
	}
	close(a.gate)
	if err := f.H.Recover(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	testhost.WaitUntil(t, "the run to complete", func() bool {
		info, err = f.H.Run(context.Background(), ri.ID)
		return err == nil && info.Status.Terminal()
	})
	got := result[map[string]string](t, info)
	want := `[{"id":7,"title":"login fails"}]`
	if got["triage"] != "ticket-triage: "+want || got["review"] != "ticket-review: "+want {
		t.Fatalf("result = %v", got)
	}
	if total, distinct := a.turns(); total != 4 || distinct != 2 {
		t.Fatalf("turns sent %d times over %d ids, want 4 over 2", total, distinct)
	}
}

// What a program reads of Math.random and Date is the same when the run
// resumes and replays: values drawn before the first ctx.agent call are
// sent in its message, and the final activation, a replay, draws them
// again and returns them. Another run draws others.
func TestRandomAndDateReplay(t *testing.T) {
	f := newFixture(t, jsprogram.Limits{}, nil)
	js := `
const r1 = Math.random(), d1 = Date.now(), iso = new Date().toISOString();
const reply = await ctx.agent("echo", { message: r1 + "|" + d1 + "|" + iso });
const r2 = Math.random(), d2 = Date.now();
return { r1, d1, iso, reply, r2, d2, offset: new Date().getTimezoneOffset() };`
	type out struct {
		R1     float64 `json:"r1"`
		D1     int64   `json:"d1"`
		ISO    string  `json:"iso"`
		Reply  string  `json:"reply"`
		R2     float64 `json:"r2"`
		D2     int64   `json:"d2"`
		Offset int     `json:"offset"`
	}
	before := time.Now()
	ri := f.run(js)
	got := result[out](t, ri)
	if want := fmt.Sprintf("echo: %v|%d|%s", got.R1, got.D1, got.ISO); got.Reply != want {
		t.Fatalf("the replay drew other values: reply %q, replayed %q", got.Reply, want)
	}
	if got.R1 == got.R2 || got.R1 <= 0 || got.R1 >= 1 {
		t.Errorf("Math.random gave %v then %v", got.R1, got.R2)
	}
	if d := time.UnixMilli(got.D1); d.Before(before.Add(-time.Second)) || d.After(time.Now()) {
		t.Errorf("Date.now() = %v, not the run's time", d)
	}
	if got.D2 < got.D1 || !strings.HasSuffix(got.ISO, "Z") || got.Offset != 0 {
		t.Errorf("clock: d1 %d, d2 %d, iso %s, offset %d", got.D1, got.D2, got.ISO, got.Offset)
	}
	// The recorded history replays to the same end, sending nothing.
	var buf bytes.Buffer
	if err := f.H.ExportHistory(context.Background(), ri.ID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := f.H.CheckReplay(context.Background(), hist, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.End != "completed" || rep.Ops != rep.RecordedOps || rep.Activations != 2 {
		t.Errorf("replay report = %+v", rep)
	}
	if n, _ := f.agents.turns(); n != 1 {
		t.Errorf("%d turns sent, want 1", n)
	}
	other := result[out](t, f.run(js))
	if other.R1 == got.R1 {
		t.Errorf("two runs drew the same Math.random(): %v", got.R1)
	}
}
