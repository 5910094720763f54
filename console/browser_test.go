package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

const chromiumPath = "/usr/bin/chromium"

// browser starts headless Chromium for one test. Without Chromium the
// test is skipped, unless SANDFLOW_CI=1 says it must run.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("SANDFLOW_CI") == "1" {
			t.Fatalf("SANDFLOW_CI=1 and no Chromium at %s: %v", chromiumPath, err)
		}
		t.Skipf("no Chromium at %s (apt-get install chromium): %v", chromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true),
		chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	// The first action starts the browser, on a context without a deadline:
	// a deadline there would stop the browser itself.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func run(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// value runs an action that returns a value.
func value[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return value(t, ctx, chromedp.Evaluate[T](js))
}

// signInBrowser signs the browser in through the sign-in form.
func (f *fixture) signInBrowser(ctx context.Context, token string) {
	f.t.Helper()
	run(f.t, ctx,
		chromedp.Navigate(f.srv.URL+"/console/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), token),
		chromedp.Click(chromedp.CSS(`[data-signin]`)),
		chromedp.WaitVisible(chromedp.CSS(`nav`)),
	)
}

func attr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	a := value(t, ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
	if !a.Exists {
		t.Fatalf("%s has no attribute %s", sel, name)
	}
	return a.Value
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return value(t, ctx, chromedp.Text(chromedp.CSS(sel)))
}

// submitAndWait clicks a submit button and waits for the next page to
// load: the old page's marker is gone and the body is there.
func submitAndWait(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	eval[bool](t, ctx, `window.__oldPage = true`)
	run(t, ctx, chromedp.Click(chromedp.CSS(sel)))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if eval[bool](t, ctx, `window.__oldPage === undefined && document.readyState === "complete"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new page after clicking %s", sel)
		}
	}
}

func askID(t *testing.T, ri host.RunInfo) string {
	t.Helper()
	for _, w := range ri.Waiting {
		if w.Kind == "ask" {
			return w.AskID
		}
	}
	t.Fatalf("run %s waits on no question: %+v", ri.ID, ri.Waiting)
	return ""
}

func TestBrowserAnswerByOptionCompletesRun(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("approve", `{"service":"billing"}`)
	q := askID(t, ri)
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	card := fmt.Sprintf(`[data-question="%s"]`, q)
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/inbox"), chromedp.WaitVisible(chromedp.CSS(card+` button[data-option=approve]`)))
	if got := text(t, ctx, card+" .option .desc"); got != "roll out now" {
		t.Errorf("first option's description = %q", got)
	}
	if cls := attr(t, ctx, card+` button[data-option=approve]`, "class"); cls != "style-primary" {
		t.Errorf("approve button class = %q, want style-primary", cls)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(card+` button[data-option=approve]`)), chromedp.WaitVisible(chromedp.CSS(`[data-settled]`)))
	if got := text(t, ctx, `[data-answer-option]`); got != "approve" {
		t.Errorf("page shows answer option %q", got)
	}
	if st := attr(t, ctx, `main .status`, "data-status"); st != string(store.StatusCompleted) {
		t.Errorf("page shows the run %s, want completed", st)
	}
	end, err := f.H.Run(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Deployed bool
		URL      string
	}
	if err := json.Unmarshal(end.Result, &res); err != nil || !res.Deployed {
		t.Fatalf("run result %s (%v), want deployed", end.Result, err)
	}
}

func TestBrowserFreeformAnswer(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("note", `{"topic":"the release"}`)
	q := askID(t, ri)
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	card := fmt.Sprintf(`[data-question="%s"]`, q)
	// The inbox's first server-sent rendering replaces its fields: type
	// after it, or the text may go to a field that is gone.
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/inbox"), chromedp.WaitReady(chromedp.CSS(`#inbox[data-updates]`)),
		chromedp.SendKeys(chromedp.CSS(card+` textarea[data-freeform]`), "ship it on Friday"),
		chromedp.Click(chromedp.CSS(card+` [data-send]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-answer-text]`)))
	if got := text(t, ctx, `[data-answer-text]`); got != "ship it on Friday" {
		t.Errorf("page shows answer text %q", got)
	}
	end := f.waitRun(ri.ID, func(ri host.RunInfo) bool { return ri.Status.Terminal() })
	if string(end.Result) != `{"note":"ship it on Friday"}` {
		t.Errorf("run result = %s", end.Result)
	}
}

func TestBrowserPromptIsTextNotHTML(t *testing.T) {
	f := newFixture(t, nil)
	hostile := `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">`
	in, _ := json.Marshal(map[string]string{"topic": hostile})
	q := askID(t, f.Call("note", string(in)))
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	card := fmt.Sprintf(`[data-question="%s"]`, q)
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/inbox"), chromedp.WaitVisible(chromedp.CSS(card)))
	if eval[bool](t, ctx, `window.__pwned !== undefined`) {
		t.Fatal("the prompt's markup ran in the page")
	}
	if got := text(t, ctx, card+" .prompt"); got != "Write a note about "+hostile {
		t.Errorf("prompt shown as %q", got)
	}
	// A multi-line prompt keeps its line breaks.
	q2 := askID(t, f.Call("approve", `{"service":"api"}`))
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/questions/"+q2), chromedp.WaitVisible(chromedp.CSS(`.prompt`)))
	if got := text(t, ctx, ".prompt"); got != "Deploy api?\nPlan: build api, push image" {
		t.Errorf("multi-line prompt shown as %q", got)
	}
}

func TestBrowserFilterRunsByStatusAndTool(t *testing.T) {
	f := newFixture(t, nil)
	a1 := f.Call("approve", `{"service":"a"}`)
	a2 := f.Call("approve", `{"service":"b"}`)
	n := f.Call("note", `{"topic":"x"}`)
	s := f.Call("sleeper", `{"n":1}`)
	if _, err := f.H.AnswerAsk(context.Background(), askID(t, a2), host.Answer{OptionID: "reject"}); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	rows := func() []string {
		run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`table.runs`)))
		ids := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("tr[data-run]")).map(r => r.dataset.run)`)
		slices.Sort(ids)
		return ids
	}
	want := func(ids ...string) []string { slices.Sort(ids); return ids }
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/runs"))
	if got := rows(); !slices.Equal(got, want(a1.ID, a2.ID, n.ID, s.ID)) {
		t.Errorf("unfiltered: %v", got)
	}
	run(t, ctx, chromedp.SetValue(chromedp.CSS(`[data-filter-status]`), "waiting"))
	submitAndWait(t, ctx, `[data-filter-apply]`)
	if got := rows(); !slices.Equal(got, want(a1.ID, n.ID, s.ID)) {
		t.Errorf("status waiting: %v", got)
	}
	run(t, ctx, chromedp.SetValue(chromedp.CSS(`[data-filter-tool]`), "approve"))
	submitAndWait(t, ctx, `[data-filter-apply]`)
	if got := rows(); !slices.Equal(got, want(a1.ID)) {
		t.Errorf("status waiting, tool approve: %v", got)
	}
}

func TestBrowserRunShowsStepInputAndOutput(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("approve", `{"service":"search"}`)
	if _, err := f.H.AnswerAsk(context.Background(), askID(t, ri), host.Answer{OptionID: "approve"}); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/runs/"+ri.ID), chromedp.WaitVisible(chromedp.CSS(`li[data-kind=step_completed]`)))
	ins := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("li[data-kind=step_completed] pre[data-in]")).map(e => e.textContent)`)
	outs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("li[data-kind=step_completed] pre[data-out]")).map(e => e.textContent)`)
	if len(ins) != 2 || len(outs) != 2 {
		t.Fatalf("completed steps show %d inputs and %d outputs, want 2 and 2", len(ins), len(outs))
	}
	if !strings.Contains(ins[1], `"search"`) || !strings.Contains(outs[1], "https://search.example.invalid/") {
		t.Errorf("second step: input %q, output %q", ins[1], outs[1])
	}
	if !strings.Contains(outs[0], "build search") {
		t.Errorf("first step's output %q lacks its plan", outs[0])
	}
}

func TestBrowserLiveTimelineGrowsWithoutReload(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("approve", `{"service":"live"}`)
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/runs/"+ri.ID), chromedp.WaitVisible(chromedp.CSS(`ol.timeline`)))
	before := eval[int](t, ctx, `window.__sameDocument = true; document.querySelectorAll("ol.timeline li").length`)
	if _, err := f.H.AnswerAsk(context.Background(), askID(t, ri), host.Answer{OptionID: "approve"}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#live .status[data-status=completed]`)))
	after := eval[int](t, ctx, `document.querySelectorAll("ol.timeline li").length`)
	same := eval[bool](t, ctx, `window.__sameDocument === true`)
	if !same {
		t.Fatal("the page reloaded")
	}
	evs, err := f.H.Events(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after <= before || after != len(evs) {
		t.Errorf("timeline had %d entries, now %d; the log has %d", before, after, len(evs))
	}
}

// liveRegionRendered waits for a live run page's first server-sent
// rendering, which replaces the region's fields: a field filled before it
// arrives is gone (its node replaced) when the click comes.
var liveRegionRendered = chromedp.WaitReady(chromedp.CSS(`#live[data-updates]`))

func TestBrowserCancelRun(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("sleeper", `{"n":2}`)
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/runs/"+ri.ID), liveRegionRendered,
		chromedp.SendKeys(chromedp.CSS(`input[name=reason]`), "not needed"),
		chromedp.Click(chromedp.CSS(`[data-cancel]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live .status[data-status=cancelled]`)))
	end, err := f.H.Run(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if end.Status != store.StatusCancelled {
		t.Fatalf("run is %s, want cancelled", end.Status)
	}
	if got := text(t, ctx, `li[data-kind=run_cancelled] .text`); !strings.Contains(got, "not needed") {
		t.Errorf("cancel entry %q lacks the reason", got)
	}
}

func TestBrowserRerunWithSameInput(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("note", `{"topic":"again"}`)
	if _, err := f.H.AnswerAsk(context.Background(), askID(t, ri), host.Answer{Text: "first"}); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/runs/"+ri.ID),
		chromedp.Click(chromedp.CSS(`[data-rerun]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live .status[data-status=waiting]`)))
	loc := value(t, ctx, chromedp.Location())
	newID := loc[strings.LastIndex(loc, "/")+1:]
	if newID == ri.ID {
		t.Fatal("rerun shows the old run")
	}
	evs, err := f.H.Events(context.Background(), newID)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ Input json.RawMessage }
	if err := json.Unmarshal(evs[0].Data, &created); err != nil || string(created.Input) != `{"topic":"again"}` {
		t.Errorf("rerun's input = %s (%v)", created.Input, err)
	}
}

func TestBrowserResumeHookWithPayload(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("hooked", `{"order":"o-7"}`)
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/runs/"+ri.ID), liveRegionRendered,
		chromedp.SetValue(chromedp.CSS(`textarea[data-hook-payload]`), `{"amount": 42}`),
		chromedp.Click(chromedp.CSS(`[data-resume-hook]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live .status[data-status=completed]`)))
	end, err := f.H.Run(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(end.Result) != `{"order":"o-7","paid":42}` {
		t.Errorf("result = %s", end.Result)
	}
}

func TestBrowserSignInRequiredAndWrongTokenRefused(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("sleeper", `{"n":3}`)
	ctx := browser(t)
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/runs/"+ri.ID), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)))
	loc := value(t, ctx, chromedp.Location())
	if !strings.Contains(loc, "/console/login?next=") {
		t.Fatalf("unsigned visit landed on %s, want the sign-in page", loc)
	}
	run(t, ctx, chromedp.SendKeys(chromedp.CSS(`input[name=token]`), "not-a-token"),
		chromedp.Click(chromedp.CSS(`[data-signin]`)), chromedp.WaitVisible(chromedp.CSS(`[data-login-error]`)))
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/inbox"), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)))
	// The right token lands on the page the deep link named.
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/runs/"+ri.ID), chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), apiToken),
		chromedp.Click(chromedp.CSS(`[data-signin]`)), chromedp.WaitVisible(chromedp.CSS(`ol.timeline`)))
	loc = value(t, ctx, chromedp.Location())
	if !strings.HasSuffix(loc, "/console/runs/"+ri.ID) {
		t.Errorf("signed in on %s, want the run's page", loc)
	}
}

func TestBrowserFormPostWithoutCSRFRefused(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("approve", `{"service":"csrf"}`)
	q := askID(t, ri)
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	card := fmt.Sprintf(`[data-question="%s"]`, q)
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/inbox"), chromedp.WaitVisible(chromedp.CSS(card)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[any](`document.querySelectorAll("input[name=csrf]").forEach(e => e.remove()); null`)(ctx, tg)
			return err
		}),
		chromedp.Click(chromedp.CSS(card+` button[data-option=approve]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-error-status]`)))
	if got := attr(t, ctx, `[data-error-status]`, "data-error-status"); got != "403" {
		t.Errorf("post without CSRF token answered %s, want 403", got)
	}
	qq, err := f.H.Question(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if !qq.Open {
		t.Fatal("the question was answered by a post without its CSRF token")
	}
	if _, err := f.H.AnswerAsk(context.Background(), q, host.Answer{OptionID: "approve"}); errors.Is(err, host.ErrAskClosed) {
		t.Fatal("question closed")
	}
}

func TestBrowserInboxFollowsQuestionsLive(t *testing.T) {
	f := newFixture(t, nil)
	first := f.Call("note", `{"topic":"one"}`)
	ctx := browser(t)
	f.signInBrowser(ctx, apiToken)
	run(t, ctx, chromedp.Navigate(f.srv.URL+"/console/inbox"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`[data-question="%s"]`, askID(t, first)))))
	eval[bool](t, ctx, `window.__sameDocument = true`)
	// A new question appears; the withdrawn one (its run cancelled) leaves.
	second := f.Call("approve", `{"service":"late"}`)
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`[data-question="%s"]`, askID(t, second)))))
	if _, err := f.H.Cancel(context.Background(), first.ID, "withdrawn"); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.WaitNotPresent(chromedp.CSS(fmt.Sprintf(`[data-question="%s"]`, askID(t, first)))))
	if ids := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("[data-question]")).map(e => e.dataset.question)`); len(ids) != 1 || ids[0] != askID(t, second) {
		t.Errorf("inbox shows %v, want only %s", ids, askID(t, second))
	}
	if !eval[bool](t, ctx, `window.__sameDocument === true`) {
		t.Fatal("the inbox reloaded")
	}
}
