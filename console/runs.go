package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/sse"
	"github.com/sandflow/sandflow/store"
)

// runQuery is a runs page's filters and its place in the list.
type runQuery struct {
	Status   string
	Tool     string
	From, To string // RFC 3339 or 2006-01-02T15:04 (datetime-local), UTC
	Text     string
	After    string // cursor: the last run of the previous page, "createdAt~id"

	from, to time.Time
	afterAt  time.Time
	afterID  string
}

var statuses = []store.RunStatus{store.StatusRunning, store.StatusWaiting, store.StatusCompleted, store.StatusFailed, store.StatusCancelled}

func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errf(http.StatusBadRequest, ErrBadForm, "%q is not a time (use 2006-01-02T15:04 or RFC 3339, UTC)", s)
}

func parseRunQuery(v url.Values) (runQuery, error) {
	q := runQuery{Status: v.Get("status"), Tool: v.Get("tool"), From: v.Get("from"), To: v.Get("to"), Text: v.Get("q"), After: v.Get("after")}
	var err error
	if q.Status != "" {
		ok := false
		for _, s := range statuses {
			ok = ok || string(s) == q.Status
		}
		if !ok {
			return q, errf(http.StatusBadRequest, ErrBadForm, "no run status %q", q.Status)
		}
	}
	if q.From != "" {
		if q.from, err = parseTime(q.From); err != nil {
			return q, err
		}
	}
	if q.To != "" {
		if q.to, err = parseTime(q.To); err != nil {
			return q, err
		}
	}
	if q.After != "" {
		at, id, ok := strings.Cut(q.After, "~")
		if q.afterAt, err = time.Parse(time.RFC3339Nano, at); !ok || err != nil {
			return q, errf(http.StatusBadRequest, ErrBadForm, "the page cursor %q is not valid", q.After)
		}
		q.afterID = id
	}
	return q, nil
}

// values is the query without its cursor, for links.
func (q runQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"status": q.Status, "tool": q.Tool, "from": q.From, "to": q.To, "q": q.Text} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// runsPage is one page of the list: Next is the cursor of the next page,
// Stopped set when a text search used its budget before filling the page.
type runsPage struct {
	Query    runQuery
	Runs     []store.Run
	Next     string
	Stopped  bool
	Scanned  int
	Statuses []store.RunStatus
}

// listRuns is one page of the runs the query selects, newest first. The
// store selects by status, tool, time and cursor (Store.Runs, indexed);
// text is matched here, in chunks of the store's list, and a text search
// also reads each candidate's first event (its input), at most
// SearchBudget of them per page.
func (c *Console) listRuns(ctx context.Context, q runQuery) (runsPage, error) {
	p := runsPage{Query: q, Statuses: statuses}
	f := store.RunFilter{Status: store.RunStatus(q.Status), Tool: q.Tool, From: q.from, To: q.to}
	if q.After != "" {
		f.Before = &store.RunCursor{CreatedAt: q.afterAt, ID: q.afterID}
	}
	text := strings.ToLower(q.Text)
	if text == "" {
		// One more than a page says whether another follows.
		f.Limit = c.cfg.PageSize + 1
		runs, err := c.h.Runs(ctx, f)
		if err != nil {
			return p, err
		}
		if len(runs) > c.cfg.PageSize {
			runs = runs[:c.cfg.PageSize]
			p.last(runs[len(runs)-1])
		}
		p.Runs = runs
		return p, nil
	}
	f.Limit = textChunk
	for {
		runs, err := c.h.Runs(ctx, f)
		if err != nil {
			return p, err
		}
		for _, r := range runs {
			match, err := c.matchText(ctx, r, text, &p)
			if err != nil {
				return p, err
			}
			if p.Stopped {
				return p, nil
			}
			if !match {
				p.last(r)
				continue
			}
			if len(p.Runs) == c.cfg.PageSize {
				return p, nil // another may follow: Next is the last one shown
			}
			p.Runs = append(p.Runs, r)
			p.last(r)
		}
		if len(runs) < textChunk {
			p.Next = ""
			return p, nil
		}
		last := runs[len(runs)-1]
		f.Before = &store.RunCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// textChunk is how many runs a text search takes from the store at a time.
const textChunk = 512

// matchText says whether r's id, summary or input holds text; reading
// the input (the first event) counts against the page's budget, and
// p.Stopped is set when it is spent.
func (c *Console) matchText(ctx context.Context, r store.Run, text string, p *runsPage) (bool, error) {
	if strings.Contains(strings.ToLower(r.ID), text) || strings.Contains(strings.ToLower(string(r.Detail)), text) {
		return true, nil
	}
	if p.Scanned >= c.cfg.SearchBudget {
		p.Stopped = true
		return false, nil
	}
	p.Scanned++
	evs, err := c.h.Store().Events(ctx, r.ID, 0, 1)
	if err != nil {
		return false, err
	}
	return len(evs) == 1 && strings.Contains(strings.ToLower(string(evs[0].Data)), text), nil
}

// last moves the page's cursor past r.
func (p *runsPage) last(r store.Run) { p.Next = r.CreatedAt.Format(time.RFC3339Nano) + "~" + r.ID }

func (c *Console) runs(w http.ResponseWriter, r *http.Request, si *signin) error {
	q, err := parseRunQuery(r.URL.Query())
	if err != nil {
		return err
	}
	p, err := c.listRuns(r.Context(), q)
	if err != nil {
		return err
	}
	tools, err := c.h.Tools(r.Context())
	if err != nil {
		return err
	}
	next := ""
	if p.Next != "" {
		v := q.values()
		v.Set("after", p.Next)
		next = "/console/runs?" + v.Encode()
	}
	c.render(w, r, http.StatusOK, "runs", si, map[string]any{"Page": p, "Tools": tools, "NextURL": next})
	return nil
}

// maxTimeline bounds the entries a run page shows: the newest ones, with
// a note of how many older ones are left out.
const maxTimeline = 2000

// runView is what a run page and its live region show.
type runView struct {
	Run      host.RunInfo
	Timeline []entry
	Hidden   int // older entries not shown
	Live     bool
}

func (c *Console) runView(ctx context.Context, id string) (runView, error) {
	ri, err := c.h.Run(ctx, id)
	if err != nil {
		return runView{}, err
	}
	evs, err := c.h.Events(ctx, id)
	if err != nil {
		return runView{}, err
	}
	return newRunView(ri, evs), nil
}

func newRunView(ri host.RunInfo, evs []store.Event) runView {
	tl := timeline(evs)
	hidden := max(0, len(tl)-maxTimeline)
	return runView{Run: ri, Timeline: tl[hidden:], Hidden: hidden, Live: !ri.Status.Terminal()}
}

func (c *Console) run(w http.ResponseWriter, r *http.Request, si *signin) error {
	v, err := c.runView(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "run", si, v)
	return nil
}

// runStream sends the run's live region after every change to its log,
// and ends once the run has ended.
func (c *Console) runStream(w http.ResponseWriter, r *http.Request, si *signin) error {
	id := r.PathValue("id")
	if _, err := c.h.Run(r.Context(), id); err != nil {
		return err
	}
	ch, stop := c.h.Watch(id)
	defer stop()
	return c.stream(w, r, func(sw *sse.Writer) error {
		for {
			v, err := c.runView(r.Context(), id)
			if err != nil {
				return err
			}
			html, err := c.fragment("live", si, v)
			if err != nil {
				return err
			}
			if err := sendFragment(sw, "", html); err != nil {
				return err
			}
			if !v.Live {
				return sendFragment(sw, "end", "")
			}
			select {
			case <-ch:
			case <-r.Context().Done():
				return nil
			case <-c.ctx.Done():
				return nil
			}
		}
	})
}

func (c *Console) backToRun(w http.ResponseWriter, r *http.Request, id string) error {
	http.Redirect(w, r, "/console/runs/"+url.PathEscape(id), http.StatusSeeOther)
	return nil
}

func (c *Console) cancelRun(w http.ResponseWriter, r *http.Request, _ *signin) error {
	id := r.PathValue("id")
	if _, err := c.h.Cancel(r.Context(), id, reasonOf(r, "cancelled from the console")); err != nil {
		return err
	}
	return c.backToRun(w, r, id)
}

func (c *Console) abortRun(w http.ResponseWriter, r *http.Request, _ *signin) error {
	id := r.PathValue("id")
	if _, err := c.h.Abort(r.Context(), id, reasonOf(r, "aborted from the console")); err != nil {
		return err
	}
	return c.backToRun(w, r, id)
}

func reasonOf(r *http.Request, def string) string {
	if s := strings.TrimSpace(r.PostForm.Get("reason")); s != "" {
		return s
	}
	return def
}

// rerun starts a new run of the same tool (its latest version) with the
// run's input, and shows the new run.
func (c *Console) rerun(w http.ResponseWriter, r *http.Request, _ *signin) error {
	id := r.PathValue("id")
	evs, err := c.h.Store().Events(r.Context(), id, 0, 1)
	if err != nil {
		if errors.Is(err, store.ErrRunNotFound) {
			return errf(http.StatusNotFound, host.ErrRunNotFound, "run not found: %s", id)
		}
		return err
	}
	var created struct {
		Tool  string          `json:"tool"`
		Input json.RawMessage `json:"input"`
	}
	if len(evs) != 1 || evs[0].Kind != host.EvRunCreated || json.Unmarshal(evs[0].Data, &created) != nil {
		return errf(http.StatusConflict, host.ErrBadHistory, "run %s has no readable run_created event to take the input from", id)
	}
	if len(created.Input) == 0 {
		created.Input = json.RawMessage("{}")
	}
	started, err := c.h.Start(r.Context(), created.Tool, created.Input, nil)
	if err != nil {
		return err
	}
	if err := c.drive(r, func(ctx context.Context) error { _, err := c.h.Drive(ctx, started.ID); return err }); err != nil {
		return err
	}
	return c.backToRun(w, r, started.ID)
}

// resumeHook delivers the form's JSON payload to one of the run's hooks.
func (c *Console) resumeHook(w http.ResponseWriter, r *http.Request, _ *signin) error {
	id := r.PathValue("id")
	token := r.PostForm.Get("token")
	payload := json.RawMessage(strings.TrimSpace(r.PostForm.Get("payload")))
	if !json.Valid(payload) {
		return errf(http.StatusBadRequest, host.ErrBadInput, "the payload is not JSON")
	}
	ri, err := c.h.Run(r.Context(), id)
	if err != nil {
		return err
	}
	held := false
	for _, wt := range ri.Waiting {
		held = held || (wt.Kind == "hook" && wt.Token == token)
	}
	if !held {
		return errf(http.StatusConflict, host.ErrUnknownHook, "run %s does not wait on a hook with that token", id)
	}
	// The delivery is committed before the page answers; the run is then
	// driven, in the background past Wait.
	delivered, err := c.h.DeliverHook(context.WithoutCancel(r.Context()), token, payload)
	if err != nil {
		return err
	}
	if err := c.drive(r, func(ctx context.Context) error { _, err := c.h.Drive(ctx, delivered.ID); return err }); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return c.backToRun(w, r, id)
}

// upgrade moves the run to another version of its plugin if that version
// replays its history; the refusal shows what did not replay.
func (c *Console) upgrade(w http.ResponseWriter, r *http.Request, _ *signin) error {
	id := r.PathValue("id")
	v, err := strconv.Atoi(r.PostForm.Get("version"))
	if err != nil || v <= 0 {
		return errf(http.StatusBadRequest, ErrBadForm, "the version must be a positive number")
	}
	if err := c.drive(r, func(ctx context.Context) error { _, _, err := c.h.Upgrade(ctx, id, v); return err }); err != nil {
		return err
	}
	return c.backToRun(w, r, id)
}
