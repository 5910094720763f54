package session_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/session"
)

// line is an event as one comparable line.
func line(e session.Event) string {
	var b strings.Builder
	b.WriteString(e.Type)
	for _, kv := range [][2]string{{"task", e.TaskID}, {"call", e.CallID}, {"tool", e.Tool}, {"kind", e.Kind}, {"status", e.Status},
		{"output", string(e.Output)}, {"progress", string(e.Progress)}, {"prompt", e.Prompt}, {"outcome", e.Outcome}, {"agent", e.Agent},
		{"working", strings.Join(e.Working, ",")}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
		}
	}
	if e.Error != nil {
		fmt.Fprintf(&b, " error=%s", e.Error.Message)
	}
	if e.Cancel != nil {
		fmt.Fprintf(&b, " cancel=%s", e.Cancel.Reason)
	}
	return b.String()
}

func lines(evs []session.Event, runIDs map[string]string) string {
	var out []string
	for i, e := range evs {
		if i > 0 && e.Seq != evs[i-1].Seq+1 {
			out = append(out, fmt.Sprintf("(gap: %d after %d)", e.Seq, evs[i-1].Seq))
		}
		l := line(e)
		for id, name := range runIDs {
			l = strings.ReplaceAll(l, id, name)
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// The session's event stream, for an execute call that opens a child
// session, a task whose question is answered, a task cancelled while its
// question is open (the question is withdrawn; the task reports
// cancel.reason), a serve task's two calls, and a held turn. The stream
// survives a restart.
func TestSessionEventStream(t *testing.T) {
	f := newFixture(t)
	f.AddExample("release-notes")
	f.AddExample("approve-deadline")
	f.AddExample("release-plan")
	ctx := context.Background()
	s := f.session("conv-events")
	ids := map[string]string{}

	r := call(t, s, "release-notes", `{"notes":"v2.1"}`, nil)
	ids[r.Run.ID] = "NOTES"
	deploy := call(t, s, "approve-deadline", `{"service":"api"}`, nil).TaskID
	ids[deploy] = "DEPLOY"
	stopped := call(t, s, "approve-deadline", `{"service":"web"}`, nil).TaskID
	ids[stopped] = "STOPPED"
	asks := map[string]string{}
	testhost.WaitUntil(t, "both questions", func() bool {
		for _, id := range []string{deploy, stopped} {
			ri, _ := f.H.Run(ctx, id)
			for _, w := range ri.Waiting {
				if w.Kind == "ask" {
					asks[id] = w.AskID
				}
			}
		}
		return len(asks) == 2
	})
	// Watch, then cause events: the watch fires.
	changed, stop := s.Watch()
	call(t, s, session.TaskCancelTool, `{"taskId":"`+stopped+`"}`, nil)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Error("the watch did not fire")
	}
	stop()
	f.restart()
	s = f.session("conv-events")
	if _, err := f.H.AnswerAsk(ctx, asks[deploy], host.Answer{OptionID: "approve"}); err != nil {
		t.Fatal(err)
	}
	plan := call(t, s, "release-plan", `{"request":"draft"}`, nil).TaskID
	ids[plan] = "PLAN"
	if ended, _, err := s.HoldTurn(ctx); err != nil || ended {
		t.Fatalf("hold: %v %v", ended, err)
	}
	for {
		ended, _, err := s.HoldTurn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ended {
			break
		}
	}
	call(t, s, "release-plan", `{"request":"add a canary","taskId":"`+plan+`"}`, nil)
	testhost.WaitUntil(t, "the revision", func() bool { ts := s.Tasks(ctx); return ts[len(ts)-1].Status == session.Idle })
	testhost.WaitUntil(t, "the stopped run to end", func() bool { ri, _ := f.H.Run(ctx, stopped); return ri.Status.Terminal() })

	all := s.Events(ctx, 0)
	got := lines(all, ids)
	for _, want := range []string{
		"call.started call=NOTES tool=release-notes",
		"child.opened call=NOTES tool=release-notes agent=reviewer",
		`call.settled call=NOTES tool=release-notes status=completed output={"published":true,`,
		"call.started task=DEPLOY call=DEPLOY tool=approve-deadline",
		"task.started task=DEPLOY call=DEPLOY tool=approve-deadline kind=tool",
		"interaction.opened task=DEPLOY call=DEPLOY tool=approve-deadline prompt=Deploy api?",
		"call.settled task=STOPPED call=STOPPED tool=approve-deadline status=cancelled cancel=task_cancel",
		"task.settled task=STOPPED call=STOPPED tool=approve-deadline kind=tool status=cancelled cancel=task_cancel",
		"interaction.settled task=STOPPED call=STOPPED tool=approve-deadline outcome=withdrawn",
		"interaction.settled task=DEPLOY call=DEPLOY tool=approve-deadline outcome=answered",
		`task.settled task=DEPLOY call=DEPLOY tool=approve-deadline kind=tool status=completed output={"deployed":true,`,
		"task.started task=PLAN call=PLAN tool=release-plan kind=tool",
		"turn.waiting working=",
		`task.settled task=PLAN call=PLAN tool=release-plan kind=tool status=completed output={"revision":1,`,
		"task.started task=PLAN call=PLAN:1 tool=release-plan kind=tool",
		`call.settled task=PLAN call=PLAN:1 tool=release-plan status=completed output={"revision":2,`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q", want)
		}
	}
	// Each call settles once; the cancelled task's own end is not reported.
	for _, c := range []string{"NOTES", "DEPLOY", "STOPPED", "PLAN", "PLAN:1"} {
		n := 0
		for _, l := range strings.Split(got, "\n") {
			if strings.HasPrefix(l, "call.settled ") && strings.Contains(l, " call="+c+" ") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("call %s settled %d times", c, n)
		}
	}
	if strings.Count(got, "call.settled task=STOPPED") != 1 {
		t.Errorf("the cancelled task reported its end:\n%s", got)
	}
	if t.Failed() {
		t.Logf("events:\n%s", got)
	}
	// After: only what comes later; nothing new means nothing.
	if last := all[len(all)-1].Seq; len(s.Events(ctx, last)) != 0 || len(s.Events(ctx, last-2)) != 2 {
		t.Error("Events(after) is not the tail")
	}
}
