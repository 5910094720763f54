package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// A session that started a task is listed; its page shows the task with
// its run linked and the task.started event, and, once the task's
// question is answered, the task completed and its settled event. An
// unknown or malformed session id is not found, and signing in is needed.
func TestSessionsPageListsTasksAndEvents(t *testing.T) {
	f := newFixture(t, nil)
	f.AddExample("approve-deadline")
	ctx := context.Background()
	cl := f.client()
	if _, code := f.get(cl, "/console/sessions"); code != http.StatusSeeOther {
		t.Fatalf("signed-out sessions page: %d, want 303 to sign in", code)
	}
	f.signIn(cl, apiToken)
	if body, code := f.get(cl, "/console/sessions"); code != http.StatusOK || strings.Contains(body, `data-session=`) {
		t.Fatalf("sessions page before any session: %d\n%s", code, body)
	}

	ss, err := f.sm.Open(ctx, "conv-1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := ss.Call(ctx, "approve-deadline", json.RawMessage(`{"service":"api"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.TaskID == "" || res.Run.ID == "" {
		t.Fatalf("the call started no task: %+v", res)
	}
	body, code := f.get(cl, "/console/sessions")
	if code != http.StatusOK || !strings.Contains(body, `<a href="/console/sessions/conv-1">conv-1</a>`) {
		t.Fatalf("sessions page: %d, conv-1 not linked\n%s", code, body)
	}
	if !strings.Contains(body, `href="/console/sessions"`) {
		t.Error("the nav does not link the sessions page")
	}

	taskRow := func(body string) string {
		m := regexp.MustCompile(`<tr data-task="` + regexp.QuoteMeta(res.TaskID) + `" data-status="(\w+)">.*`).FindString(body)
		if m == "" {
			t.Fatalf("task %s not on the session page\n%s", res.TaskID, body)
		}
		return html.UnescapeString(m)
	}
	body, code = f.get(cl, "/console/sessions/conv-1")
	if code != http.StatusOK {
		t.Fatalf("session page: %d\n%s", code, body)
	}
	row := taskRow(body)
	if !strings.Contains(row, `<a href="/console/runs/`+res.Run.ID+`" data-task-run>`) || !strings.Contains(row, `data-status="working"`) {
		t.Errorf("task row %s: want its run %s linked and status working", row, res.Run.ID)
	}
	if !strings.Contains(body, `data-event="task.started"`) || !strings.Contains(body, `data-stream="/console/sessions/conv-1/stream"`) {
		t.Errorf("session page has no task.started event or no live stream\n%s", body)
	}
	// The linked run page is there.
	if _, code := f.get(cl, "/console/runs/"+res.Run.ID); code != http.StatusOK {
		t.Errorf("the task's run page: %d", code)
	}

	// The live region streams the page again after each change: answering
	// the task's question shows the task completed with its settled event.
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, f.srv.URL+"/console/sessions/conv-1/stream", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("session stream: %s", resp.Status)
	}
	events := bufio.NewScanner(resp.Body)
	events.Buffer(make([]byte, 64<<10), 1<<20)
	next := func() string { // the next event's data
		var data strings.Builder
		for events.Scan() {
			line := events.Text()
			if line == "" && data.Len() > 0 {
				return data.String()
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data.WriteString(d + "\n")
			}
		}
		t.Fatalf("the session stream ended: %v", events.Err())
		return ""
	}
	if first := next(); !strings.Contains(taskRow(first), `data-status="working"`) {
		t.Fatalf("the stream's first rendering has the task not working:\n%s", first)
	}
	ri := f.waitRun(res.Run.ID, func(ri host.RunInfo) bool { return ri.Status == store.StatusWaiting })
	if _, err := f.H.AnswerAsk(ctx, askID(t, ri), host.Answer{OptionID: "approve"}); err != nil {
		t.Fatal(err)
	}
	for {
		live := next()
		if strings.Contains(taskRow(live), `data-status="completed"`) && strings.Contains(live, `data-event="task.settled"`) {
			break
		}
	}
	cancel()
	if body, _ = f.get(cl, "/console/sessions/conv-1"); !strings.Contains(taskRow(body), `data-status="completed"`) {
		t.Errorf("after the answer the session page shows the task not completed\n%s", body)
	}

	for _, path := range []string{"/console/sessions/conv-nope", "/console/sessions/conv-nope/stream", "/console/sessions/%20bad%20id"} {
		if body, code := f.get(cl, path); code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404\n%s", path, code, body)
		}
	}
	// Looking did not make the unknown session.
	if _, err := f.H.Store().Session(ctx, "conv-nope"); err == nil {
		t.Error("viewing an unknown session stored one")
	}
}

// A session page in the browser follows its task live: the answer to the
// task's question shows the task completed without a reload, and the
// task's run link opens its run page.
func TestBrowserSessionPageFollowsTaskLive(t *testing.T) {
	f := newFixture(t, nil)
	f.AddExample("approve-deadline")
	bctx := context.Background()
	ss, err := f.sm.Open(bctx, "conv-live")
	if err != nil {
		t.Fatal(err)
	}
	res, err := ss.Call(bctx, "approve-deadline", json.RawMessage(`{"service":"web"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ri := f.waitRun(res.Run.ID, func(ri host.RunInfo) bool { return ri.Status == store.StatusWaiting })
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	row := `#live tr[data-task="` + res.TaskID + `"]`
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/sessions/conv-live"), liveRegionRendered,
		chromedp.WaitVisible(chromedp.CSS(row+` .status[data-status=working]`)))
	_ = eval[bool](t, ctx, `window.__sameDocument = true`)
	if _, err := f.H.AnswerAsk(bctx, askID(t, ri), host.Answer{OptionID: "approve"}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(row+` .status[data-status=completed]`)))
	if !eval[bool](t, ctx, `window.__sameDocument === true`) {
		t.Fatal("the page reloaded")
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(row+` a[data-task-run]`)), chromedp.WaitVisible(chromedp.CSS(`#live .status[data-status=completed]`)))
	if got := text(t, ctx, `h1 code`); got != res.Run.ID {
		t.Errorf("the task's run link opened run %q, want %s", got, res.Run.ID)
	}
}
