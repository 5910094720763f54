package console_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/console"
	"github.com/sandflow/sandflow/store"
)

func (f *fixture) post(cl *http.Client, path string, form url.Values, header http.Header) *http.Response {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := cl.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func TestFormPostsNeedSignInCSRFAndSameOrigin(t *testing.T) {
	f := newFixture(t, nil)
	q := askID(t, f.Call("approve", `{"service":"x"}`))
	path := "/console/questions/" + q + "/answer"
	cl := f.client()
	if resp := f.post(cl, path, url.Values{"option": {"approve"}}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("signed-out post: %s, want 401", resp.Status)
	}
	csrf := f.signIn(cl, apiToken)
	for name, c := range map[string]struct {
		form   url.Values
		header http.Header
	}{
		"no CSRF token":    {url.Values{"option": {"approve"}}, nil},
		"wrong CSRF token": {url.Values{"option": {"approve"}, "csrf": {strings.Repeat("0", len(csrf))}}, nil},
		"other origin":     {url.Values{"option": {"approve"}, "csrf": {csrf}}, http.Header{"Origin": {"http://evil.example"}}},
	} {
		if resp := f.post(cl, path, c.form, c.header); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %s, want 403", name, resp.Status)
		}
	}
	if qq, err := f.H.Question(context.Background(), q); err != nil || !qq.Open {
		t.Fatalf("question after refused posts: open=%v err=%v", qq.Open, err)
	}
	// The right token, from this origin, answers; a second answer conflicts.
	origin := http.Header{"Origin": {f.srv.URL}}
	if resp := f.post(cl, path, url.Values{"option": {"approve"}, "csrf": {csrf}}, origin); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("answer: %s, want 303", resp.Status)
	}
	if resp := f.post(cl, path, url.Values{"option": {"reject"}, "csrf": {csrf}}, origin); resp.StatusCode != http.StatusConflict {
		t.Errorf("second answer: %s, want 409", resp.Status)
	}
	if resp := f.post(cl, "/console/questions/ask_nope/answer", url.Values{"option": {"a"}, "csrf": {csrf}}, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown question: %s, want 404", resp.Status)
	}
}

func TestAdminActionsNeedTheAdminToken(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	// A second version of note, and a run pinned to the first.
	if _, err := f.H.Call(ctx, "note", json.RawMessage(`{"topic":"v1"}`), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := registerAgain(f, "note", tools["note"]); err != nil {
		t.Fatal(err)
	}
	user := f.client()
	csrf := f.signIn(user, apiToken)
	if resp := f.post(user, "/console/plugins/note/versions/2/delete", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("delete with the API token: %s, want 403", resp.Status)
	}
	admin := f.client()
	acsrf := f.signIn(admin, adminToken)
	if resp := f.post(admin, "/console/plugins/note/versions/1/delete", url.Values{"csrf": {acsrf}}, nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("delete of a version in use: %s, want 409", resp.Status)
	}
	if resp := f.post(admin, "/console/plugins/note/versions/2/delete", url.Values{"csrf": {acsrf}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("admin delete: %s, want 303", resp.Status)
	}
	after, err := f.H.Plugins(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range after {
		if p.Name == "note" && p.Version == 2 {
			t.Fatal("note v2 is still there")
		}
	}
}

func TestSignInsAreBoundedAndRedirectsStayInside(t *testing.T) {
	f := newFixture(t, &console.Config{MaxSignins: 2})
	first := f.client()
	f.signIn(first, apiToken)
	f.signIn(f.client(), apiToken)
	f.signIn(f.client(), apiToken)
	if _, code := f.get(first, "/console/inbox"); code != http.StatusSeeOther {
		t.Errorf("the oldest of 3 sign-ins over a bound of 2 still works (%d)", code)
	}
	cl := f.client()
	resp, err := cl.PostForm(f.srv.URL+"/console/login", url.Values{"token": {apiToken}, "next": {"//evil.example/x"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); loc != "/console/inbox" {
		t.Errorf("sign-in redirected to %q", loc)
	}
	ck := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/console/"} {
		if !strings.Contains(ck, want) {
			t.Errorf("cookie %q lacks %s", ck, want)
		}
	}
}

var runRow = regexp.MustCompile(`<tr data-run="([^"]+)"`)

func (f *fixture) runIDs(cl *http.Client, path string) ([]string, string) {
	f.t.Helper()
	body, code := f.get(cl, path)
	if code != http.StatusOK {
		f.t.Fatalf("%s: %d", path, code)
	}
	var ids []string
	for _, m := range runRow.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	next := ""
	if m := regexp.MustCompile(`href="([^"]+)" data-next`).FindStringSubmatch(body); m != nil {
		next = html.UnescapeString(m[1])
	}
	return ids, next
}

func TestRunsPagesAndTextFilter(t *testing.T) {
	f := newFixture(t, &console.Config{PageSize: 2, SearchBudget: 2})
	var made []string
	for _, topic := range []string{"alpha", "needle one", "beta", "needle two", "gamma"} {
		in, _ := json.Marshal(map[string]string{"topic": topic})
		made = append(made, f.Call("note", string(in)).ID)
	}
	all, err := f.H.Runs(context.Background(), store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	cl := f.client()
	f.signIn(cl, apiToken)
	var seen []string
	for path := "/console/runs"; path != ""; {
		ids, next := f.runIDs(cl, path)
		if len(ids) > 2 {
			t.Fatalf("page of %d runs, want at most 2", len(ids))
		}
		seen = append(seen, ids...)
		path = next
	}
	if len(seen) != len(all) {
		t.Fatalf("pages listed %v, want %d runs", seen, len(all))
	}
	for i, r := range all {
		if seen[i] != r.ID {
			t.Fatalf("page order %v differs from the store's newest first", seen)
		}
	}
	// Text in the input: the budget of 2 input reads per page makes the
	// search go on over the next pages; it finds both, and only them.
	var found []string
	for path := "/console/runs?q=NEEDLE"; path != ""; {
		ids, next := f.runIDs(cl, path)
		found = append(found, ids...)
		path = next
	}
	if len(found) != 2 || found[0] != made[3] || found[1] != made[1] {
		t.Errorf("text search found %v, want [%s %s]", found, made[3], made[1])
	}
	// A time range after every run lists none; a bad time is refused.
	if ids, _ := f.runIDs(cl, "/console/runs?from=2999-01-01T00:00"); len(ids) != 0 {
		t.Errorf("future range listed %v", ids)
	}
	if _, code := f.get(cl, "/console/runs?from=yesterday"); code != http.StatusBadRequest {
		t.Errorf("bad time: %d, want 400", code)
	}
	if _, code := f.get(cl, "/console/runs?status=sleeping"); code != http.StatusBadRequest {
		t.Errorf("bad status: %d, want 400", code)
	}
}

func TestHookResumeRefusesBadPayloadAndChangesNothing(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("hooked", `{"order":"o-1"}`)
	cl := f.client()
	csrf := f.signIn(cl, apiToken)
	resp := f.post(cl, "/console/runs/"+ri.ID+"/hook", url.Values{"csrf": {csrf}, "token": {"order-o-1"}, "payload": {"{not json"}}, nil)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad payload: %s, want 400", resp.Status)
	}
	resp = f.post(cl, "/console/runs/"+ri.ID+"/hook", url.Values{"csrf": {csrf}, "token": {"someone-else"}, "payload": {"{}"}}, nil)
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("token the run does not hold: %s, want 409", resp.Status)
	}
	after, err := f.H.Run(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Status != store.StatusWaiting || len(after.Waiting) != 1 || after.Waiting[0].Kind != "hook" {
		t.Errorf("run after refused resumes: %s %+v", after.Status, after.Waiting)
	}
}

func TestUpgradeReplaysOrRefuses(t *testing.T) {
	f := newFixture(t, nil)
	ri := f.Call("note", `{"topic":"up"}`)
	if _, err := registerAgain(f, "note", tools["note"]); err != nil { // v2: replays
		t.Fatal(err)
	}
	// v3 sleeps where v1 asked: it cannot replay the run.
	if _, err := registerAgain(f, "note", strings.Replace(tools["note"], `const a = await ctx.ask({ prompt: "Write a note about " + topic, allowFreeform: true });`, `await sleep("1h"); const a = { text: "" };`, 1)); err != nil {
		t.Fatal(err)
	}
	cl := f.client()
	csrf := f.signIn(cl, apiToken)
	if resp := f.post(cl, "/console/runs/"+ri.ID+"/upgrade", url.Values{"csrf": {csrf}, "version": {"3"}}, nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("upgrade to a version that does not replay: %s, want 409", resp.Status)
	}
	if after, _ := f.H.Run(context.Background(), ri.ID); after.Version != 1 {
		t.Fatalf("refused upgrade moved the run to v%d", after.Version)
	}
	if resp := f.post(cl, "/console/runs/"+ri.ID+"/upgrade", url.Values{"csrf": {csrf}, "version": {"2"}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("upgrade to a version that replays: %s, want 303", resp.Status)
	}
	if after, _ := f.H.Run(context.Background(), ri.ID); after.Version != 2 {
		t.Errorf("run is on v%d after the upgrade, want 2", after.Version)
	}
}

func TestAdminUploadsAScript(t *testing.T) {
	f := newFixture(t, nil)
	admin := f.client()
	csrf := f.signIn(admin, adminToken)
	resp := f.upload(admin, csrf, map[string]string{"name": "sleeper2"}, "sleeper2.js", []byte(tools["sleeper"]))
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("upload: %s, want 303", resp.Status)
	}
	ts, err := f.H.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tl := range ts {
		found = found || tl.Name == "sleeper2"
	}
	if !found {
		t.Fatal("the uploaded tool is not in the tool list")
	}
	page, _ := f.get(admin, "/console/plugins")
	if !strings.Contains(page, `data-tool="sleeper2"`) {
		t.Error("the plugins page does not list the uploaded tool")
	}
}
