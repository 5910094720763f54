package session_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/session"
	"github.com/sandflow/sandflow/store"
)

// gatedReviewer is a reviewer whose turns wait for a gate, counting each
// send by turn id.
type gatedReviewer struct {
	mu   sync.Mutex
	sent map[string]int
	gate chan struct{}
	once sync.Once
}

func (g *gatedReviewer) open() { g.once.Do(func() { close(g.gate) }) }

func (g *gatedReviewer) backend() host.AgentBackend {
	return host.AgentFunc{List: []host.AgentInfo{{Name: "reviewer"}}, Fn: func(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
		g.mu.Lock()
		g.sent[t.TurnID]++
		g.mu.Unlock()
		select {
		case <-g.gate:
		case <-ctx.Done():
			return abi.AgentResult{}, ctx.Err()
		}
		return abi.AgentResult{Status: abi.AgentCompleted, Data: []byte(`{"approved":true,"reason":"fine"}`)}, nil
	}}
}

func (g *gatedReviewer) sends() (total, distinct int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range g.sent {
		total += n
	}
	return total, len(g.sent)
}

// A host restart while a child turn is in flight (an execute call), a
// question is open (one task) and a task waits on a hook: after recovery
// everything resumes, each result reaches the model once, and the child
// turn is sent again only under its same turn id (its idempotency key), so
// the child gets one message.
func TestRestartWithTurnQuestionAndTask(t *testing.T) {
	g := &gatedReviewer{sent: map[string]int{}, gate: make(chan struct{})}
	f := newFixtureWith(t, g.backend())
	f.AddExample("release-notes")
	f.AddExample("approve-deadline")
	f.AddJS("waiter", waiter)
	ctx := context.Background()
	s := f.session("conv-restart")

	type callOut struct {
		r   session.CallResult
		err error
	}
	exec := make(chan callOut, 1)
	go func() {
		r, err := s.Call(ctx, "release-notes", []byte(`{"notes":"v3"}`), nil)
		exec <- callOut{r, err}
	}()
	testhost.WaitUntil(t, "the child turn", func() bool { n, _ := g.sends(); return n == 1 })
	deploy := call(t, s, "approve-deadline", `{"service":"api"}`, nil).TaskID
	wait := call(t, s, "waiter", `{"n":7}`, nil).TaskID
	var ask string
	testhost.WaitUntil(t, "the question", func() bool {
		ri, _ := f.H.Run(ctx, deploy)
		for _, w := range ri.Waiting {
			if w.Kind == "ask" {
				ask = w.AskID
			}
		}
		return ask != ""
	})

	// Recovery must not wait for the child's answer: if it does, open the
	// gate rather than hang.
	watchdog := time.AfterFunc(10*time.Second, func() {
		t.Error("the restart waited for the child turn")
		g.open()
	})
	f.restart()
	watchdog.Stop()
	if out := <-exec; !errors.Is(out.err, host.ErrClosed) {
		t.Fatalf("the execute call cut off by the restart: %+v %v", out.r, out.err)
	}
	s = f.session("conv-restart")
	if tasks := s.Tasks(ctx); len(tasks) != 2 || tasks[0].Status != session.Working || tasks[1].Status != session.Working {
		t.Fatalf("tasks after the restart: %+v", tasks)
	}
	g.open()
	// The execute call's run, found by the platform from its record,
	// resumes with the child's answer.
	runs, err := f.H.Runs(ctx, store.RunFilter{Tool: "release-notes"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v %v", runs, err)
	}
	r, err := s.Await(ctx, runs[0].ID)
	if err != nil || r.Status != session.Completed || !strings.HasPrefix(r.Text, `{"published":true`) {
		t.Fatalf("execute call after the restart: %+v %v", r, err)
	}
	if total, distinct := g.sends(); distinct != 1 || total != 2 {
		t.Errorf("the child turn was sent %d times under %d ids, want twice (before and after the restart) under one", total, distinct)
	}
	if _, err := f.H.AnswerAsk(ctx, ask, host.Answer{OptionID: "approve"}); err != nil {
		t.Fatal(err)
	}
	testhost.WaitUntil(t, "the hook", func() bool {
		_, err := f.H.ResumeHook(ctx, "wait-7", []byte(`{"done":true}`))
		return err == nil
	})
	got := map[string]string{}
	testhost.WaitUntil(t, "both results", func() bool {
		res, err := s.Results(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{deploy, wait} {
			if containsBlock(res, id) {
				if got[id] != "" {
					t.Errorf("%s delivered twice", id)
				}
				got[id] = res
			}
		}
		return len(got) == 2
	})
	if res, err := s.Results(ctx); err != nil || res != "" {
		t.Errorf("results after both were delivered: %q %v", res, err)
	}
}

func containsBlock(res, id string) bool {
	return strings.Contains(res, `<task_result id="`+id+`" `)
}

// The expiries a session keeps (a task call's, in the same write as its
// task; one kept with Keep) are found by call id after a restart, from a
// manager that has not opened the session.
func TestExpiriesSurviveARestart(t *testing.T) {
	f := newFixture(t)
	f.AddJS("waiter", waiter)
	ctx := context.Background()
	s := f.session("conv-expiry")
	from := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	asked := session.Expiry{TTL: time.Hour, From: from}
	r := call(t, s, "waiter", `{"n":1}`, &session.CallOptions{Expiry: &asked})
	kept := session.Expiry{TTL: 2 * time.Hour, From: from.Add(time.Minute)}
	if err := s.Keep(ctx, "run_elsewhere", kept); err != nil {
		t.Fatal(err)
	}
	// A call's first expiry stays.
	if err := s.Keep(ctx, r.TaskID, session.Expiry{TTL: time.Minute, From: from}); err != nil {
		t.Fatal(err)
	}
	f.restart()
	for id, want := range map[string]session.Expiry{r.TaskID: asked, "run_elsewhere": kept} {
		got, ok, err := f.m.Expiry(ctx, id)
		if err != nil || !ok || got.TTL != want.TTL || !got.From.Equal(want.From) {
			t.Errorf("%s after a restart: %+v %v %v, want %+v", id, got, ok, err, want)
		}
	}
	if _, ok, err := f.m.Expiry(ctx, "no-such-call"); ok || err != nil {
		t.Errorf("an unknown call has an expiry: %v %v", ok, err)
	}
}
