package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/guestbuild"
	"github.com/sandflow/sandflow/store"
)

// An unknown command or subcommand is a usage error (exit 2), as an
// unknown flag is; exit-codes is a help topic; version prints.
func TestCLIUsageErrorsAndHelpTopics(t *testing.T) {
	c := newCLI(t)
	c.expect(exitUsage, "bogus")
	c.expect(exitUsage, "runs", "bogus")
	c.expect(exitUsage, "asks", "bogus", "x")
	c.expect(exitUsage, "--bogus")
	if out := c.ok("help", "exit-codes"); !strings.Contains(out, "Exit codes:") || !strings.Contains(out, "9  the data directory is damaged") {
		t.Errorf("help exit-codes:\n%s", out)
	}
	if out := c.ok("version"); !strings.HasPrefix(out, "sandflow ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: %q", out)
	}
	v := decode[versionInfo](t, c.ok("version", "--json"))
	if v.Version == "" || !strings.HasPrefix(v.Go, "go1.") {
		t.Errorf("version --json: %+v", v)
	}
}

// Lists are [] when empty, in every command; a bad --status is refused;
// export answers --json; errors are JSON under --json.
func TestCLIJSONOutput(t *testing.T) {
	c := newCLI(t)
	for _, cmd := range [][]string{{"runs", "list", "--json"}, {"tools"}, {"asks", "list", "--json"}, {"plugin", "list", "--json"}} {
		if out := strings.TrimSpace(c.ok(cmd...)); out != "[]" {
			t.Errorf("%s: %q, want []", strings.Join(cmd, " "), out)
		}
	}
	c.expect(exitUsage, "runs", "list", "--status", "bogus")
	c.expect(exitUsage, "runs", "list", "--limit", "-1")

	errs := c.expect(exitNotFound, "--json", "runs", "show", "run_missing")
	var je struct {
		Error struct {
			Code     string `json:"code"`
			ExitCode int    `json:"exitCode"`
			Message  string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(errs), &je); err != nil {
		t.Fatalf("--json error is not JSON: %v: %q", err, errs)
	}
	if je.Error.Code != "not_found" || je.Error.ExitCode != exitNotFound || !strings.Contains(je.Error.Message, "run_missing") {
		t.Errorf("--json error: %+v", je)
	}

	c.addExample("examples/remind")
	ri := decode[host.RunInfo](t, c.ok("--json", "call", "remind", "--input", `{"note":"n","delay":"1ms"}`, "--wait", "30s"))
	path := filepath.Join(t.TempDir(), "h.zst")
	ex := decode[struct {
		Run   string `json:"run"`
		Path  string `json:"path"`
		Bytes int    `json:"bytes"`
	}](t, c.ok("--json", "runs", "export", ri.ID, "-o", path))
	if st, err := os.Stat(path); err != nil || ex.Run != ri.ID || ex.Path != path || int64(ex.Bytes) != st.Size() {
		t.Errorf("export --json: %+v (%v)", ex, err)
	}
}

// A hook resumed without --payload is refused and the run keeps waiting;
// --payload null is explicit.
func TestCLIHookResumeNeedsAPayload(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/order")
	ri := decode[host.RunInfo](t, c.ok("--json", "call", "order", "--input", `{"orderId":"o-1"}`))
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].Token == "" {
		t.Fatalf("call: %+v", ri)
	}
	tok := ri.Waiting[0].Token
	if out := c.ok("runs", "show", ri.ID); !strings.Contains(out, "hooks resume "+tok+" --payload JSON") {
		t.Errorf("show:\n%s", out)
	}
	before := decode[shown](t, c.ok("--json", "runs", "show", ri.ID))
	c.expect(exitUsage, "hooks", "resume", tok)
	c.expect(exitInvalid, "hooks", "resume", tok, "--payload", "{nope")
	if after := decode[shown](t, c.ok("--json", "runs", "show", ri.ID)); after.Run.Status != store.StatusWaiting || len(after.Events) != len(before.Events) {
		t.Fatalf("a refused resume changed the run: %+v, %d events, had %d", after.Run, len(after.Events), len(before.Events))
	}
	done := decode[host.RunInfo](t, c.ok("--json", "hooks", "resume", tok, "--payload", `{"paid":true,"amount":12}`))
	if done.ID != ri.ID || done.Status != store.StatusCompleted {
		t.Errorf("resume: %+v", done)
	}
}

// A question is shown whole: the call prints the entire prompt, and asks
// show adds the options' labels; a webhook's hint names a real command.
func TestCLIQuestionShownWhole(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/deploy")
	out := c.ok("call", "deploy", "--input", `{"service":"api"}`)
	s := decode[shown](t, c.ok("--json", "runs", "show", strings.Fields(out)[1]))
	if len(s.Run.Waiting) != 1 || !strings.Contains(s.Run.Waiting[0].Prompt, "\n") {
		t.Fatalf("the deploy question should have a prompt of several lines: %+v", s.Run.Waiting)
	}
	ask := s.Run.Waiting[0]
	for _, line := range strings.Split(ask.Prompt, "\n") {
		if !strings.Contains(out, line) {
			t.Errorf("call does not print the prompt's line %q:\n%s", line, out)
		}
	}
	show := c.ok("asks", "show", ask.AskID)
	for _, want := range append(strings.Split(ask.Prompt, "\n"), "approve: Deploy", "cancel: Cancel", "asks answer "+ask.AskID) {
		if !strings.Contains(show, want) {
			t.Errorf("asks show lacks %q:\n%s", want, show)
		}
	}
	q := decode[host.Question](t, c.ok("--json", "asks", "show", ask.AskID))
	if q.ID != ask.AskID || q.Request.Prompt != ask.Prompt || len(q.Request.Options) != 2 {
		t.Errorf("asks show --json: %+v", q)
	}
	c.expect(exitNotFound, "asks", "show", "ask_missing")

	c.addExample("examples/render")
	out = c.ok("call", "render", "--input", `{"projectId":"p1"}`)
	if strings.Contains(out, "--http") || !strings.Contains(out, "webhook /.well-known/workflow/v1/webhook/") || !strings.Contains(out, "--base-url") {
		t.Errorf("render's webhook hint:\n%s", out)
	}
}

// A serve tool from the command line: the first call's reply is printed,
// with what the run waits on (its next call) and how to send it; the
// next call goes to the run with --task-id.
func TestCLIServeToolTaskID(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/release-plan")
	out := c.ok("call", "release-plan", "--input", `{"request":"draft the plan"}`)
	runID := strings.Fields(out)[1]
	if !strings.Contains(out, "replied") || !strings.Contains(out, "its next call") || !strings.Contains(out, "--task-id "+runID) {
		t.Fatalf("first call:\n%s", out)
	}
	ri := decode[host.RunInfo](t, c.ok("--json", "call", "release-plan", "--task-id", runID, "--input", `{"request":"add a rollback"}`))
	if ri.ID != runID || len(ri.Calls) != 2 || ri.Calls[1].Status != "completed" || len(ri.Calls[1].Output) == 0 {
		t.Fatalf("second call: %+v", ri)
	}
	c.expect(exitInvalid, "call", "release-plan", "--task-id", runID, "--input", `{"nope":1}`)
	c.expect(exitNotFound, "call", "release-plan", "--task-id", "run_missing", "--input", `{"request":"x"}`)
	c.expect(exitUsage, "call", "release-plan", "--task-id", runID, "--run-id", "r2")
}

// call --wait fires its own run's timers, and no other run's.
func TestCLICallWaitFiresOnlyItsOwnTimers(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/remind")
	other := decode[host.RunInfo](t, c.ok("--json", "call", "remind", "--input", `{"note":"other","delay":"1ms"}`))
	if other.Status != store.StatusWaiting {
		t.Fatalf("other: %+v", other)
	}
	mine := decode[host.RunInfo](t, c.ok("--json", "call", "remind", "--input", `{"note":"mine","delay":"1ms"}`, "--wait", "30s"))
	if mine.Status != store.StatusCompleted {
		t.Fatalf("mine: %+v", mine)
	}
	if s := decode[shown](t, c.ok("--json", "runs", "show", other.ID)); s.Run.Status != store.StatusWaiting {
		t.Errorf("call --wait fired another run's timer: %+v", s.Run)
	}
	if out := c.ok("runs", "show", other.ID); !strings.Contains(out, "ago: sandflow serve fires it") {
		t.Errorf("an overdue timer has no hint:\n%s", out)
	}
}

// workflow enable needs agents, and --max-subagents must be in its range.
func TestCLIWorkflowEnableChecks(t *testing.T) {
	c := newCLI(t)
	c.expect(exitUsage, "workflow", "enable")
	agents := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(agents, []byte(`{"agents": [{"name": "a", "reply": "r"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "none.json")
	if err := os.WriteFile(empty, []byte(`{"agents": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.expect(exitInvalid, "--agents", empty, "workflow", "enable")
	for _, n := range []string{"0", "-1", "129"} {
		c.expect(exitUsage, "--agents", agents, "workflow", "enable", "--max-subagents", n)
	}
	if strings.TrimSpace(c.ok("plugin", "list", "--json")) != "[]" {
		t.Fatal("a refused enable registered a tool")
	}
	if out := c.ok("--agents", agents, "workflow", "enable", "--max-subagents", "128"); !strings.Contains(out, "128 agent calls") {
		t.Errorf("enable: %s", out)
	}
}

// The demo says what it builds as it goes, prints each question whole,
// and, when its data directory is deleted after, no hints into it.
func TestDemoOutput(t *testing.T) {
	var out bytes.Buffer
	if err := runDemo(context.Background(), &out, t.TempDir(), ""); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{"[1/3] building deploy ...", "[3/3] building approve-deadline ...", "Deploy api?", `Done, the reminder came back: {\"reminder\":\"stretch your legs\"}`} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if strings.Contains(s, "asks answer") || strings.Contains(s, "sandflow asks") {
		t.Errorf("the demo prints hints into a directory it deletes:\n%s", s)
	}
}

// plugin add tells a file that is neither WebAssembly nor a .js script
// from a script, and registers nothing.
func TestCLIPluginAddRefusesOtherFiles(t *testing.T) {
	c := newCLI(t)
	root := t.TempDir()
	readme := filepath.Join(root, "README.md")
	if err := os.WriteFile(readme, []byte("# a tool\n\nSome prose, not a program.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Refused as a file of no known kind, not read as a script that fails
	// to parse.
	if errs := c.expect(exitInvalid, "plugin", "add", readme); strings.Contains(errs, "SyntaxError") || !strings.Contains(errs, "neither a WebAssembly module") {
		t.Errorf("plugin add README.md: %s", errs)
	}
	js := filepath.Join(root, "t.js")
	if err := os.WriteFile(js, []byte(`defineWorkflowTool({ description: "x", inputSchema: { type: "object" }, async execute() { "use workflow"; return 1; } });`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.expect(exitUsage, "plugin", "add", js, "--manifest", readme)
	if out := strings.TrimSpace(c.ok("plugin", "list", "--json")); out != "[]" {
		t.Fatalf("refused adds registered %s", out)
	}
	c.ok("plugin", "add", js)
}

// A JavaScript run that fails prints where, its code and its stack, in
// text as in --json.
func TestCLIJavaScriptFailureShowsWhere(t *testing.T) {
	c := newCLI(t)
	js := filepath.Join(t.TempDir(), "thrower.js")
	if err := os.WriteFile(js, []byte(`defineWorkflowTool({
  description: "throws",
  inputSchema: { type: "object" },
  async execute() {
    "use workflow";
    throw new TypeError("boom");
  },
});
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok("plugin", "add", js)
	out, errs, code := c.run("call", "thrower")
	if code != exitRunFailed {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitRunFailed, out, errs)
	}
	for _, want := range []string{"boom", "line 6, column 11", "stack:", "at execute (thrower.js:6:11"} {
		if !strings.Contains(out, want) {
			t.Errorf("the failure lacks %q:\n%s", want, out)
		}
	}
	// The run's error itself names the script by its tool, as --json
	// shows it (and logs do), not by a file name of the host's.
	out, _, _ = c.run("--json", "call", "thrower")
	ri := decode[host.RunInfo](t, out)
	var d struct {
		Line, Column int
		Stack        string
	}
	if ri.Error == nil || json.Unmarshal(ri.Error.Details, &d) != nil || d.Line != 6 || d.Column != 11 ||
		!strings.Contains(d.Stack, "(thrower.js:6:11") || strings.Contains(d.Stack, "tool.js") {
		t.Errorf("--json: %+v, details %+v", ri.Error, d)
	}
}

// A workflow program's syntax error prints its position and code; one that
// ends early is located in the program, not in the host's wrapper.
func TestCLIWorkflowProgramSyntaxError(t *testing.T) {
	c := newCLI(t)
	agents := filepath.Join(t.TempDir(), "agents.json")
	if err := os.WriteFile(agents, []byte(`{"agents": [{"name": "a", "reply": "r"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok("--agents", agents, "workflow", "enable")
	out, errs, code := c.run("--agents", agents, "call", "workflow", "--input", `{"js":"return {"}`)
	if code != exitRunFailed {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitRunFailed, out, errs)
	}
	for _, want := range []string{"(line 1, column 9)", "code: syntax_error"} {
		if !strings.Contains(out, want) {
			t.Errorf("the failure lacks %q:\n%s", want, out)
		}
	}
}

// serve on every interface says to give --base-url, and uses a URL a
// client can reach meanwhile; an API token alone says uploads are off.
func TestServeSaysWhatItCannotGuess(t *testing.T) {
	c := newCLI(t)
	serve := exec.Command(bin, "--data", c.data, "serve", "--addr", "0.0.0.0:0", "--api-token", "sfa_0123456789abcdef")
	serr := &syncBuffer{}
	serve.Stderr = serr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(serr.String(), "msg=serving") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	serve.Process.Signal(syscall.SIGTERM)
	serve.Wait()
	log := serr.String()
	for _, want := range []string{"give --base-url", "base=http://localhost:", "no --admin-token: plugin uploads and deletions are refused"} {
		if !strings.Contains(log, want) {
			t.Errorf("serve's log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "base=http://[::]") || strings.Contains(log, "base=http://0.0.0.0") {
		t.Errorf("serve uses an address no client reaches:\n%s", log)
	}
}

// syncBuffer is a bytes.Buffer a process writes while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// While serve runs, a command that finds the data directory locked names
// the server's API; once serve stops, its serve.json is gone.
func TestCLILockedPointsAtTheRunningServer(t *testing.T) {
	c := newCLI(t)
	serve := exec.Command(bin, "--data", c.data, "serve", "--addr", "127.0.0.1:0")
	serr, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, serr, "serving", 30*time.Second)
	errs := c.expect(exitLocked, "runs", "upgrade", "run_x", "--version", "2")
	si, ok := runningServer(c.data)
	if !ok || si.PID != serve.Process.Pid || !strings.HasPrefix(si.URL, "http://127.0.0.1:") {
		t.Errorf("serve.json: %+v, %v; serve is pid %d", si, ok, serve.Process.Pid)
	}
	if !strings.Contains(errs, "use its HTTP API at "+si.URL) {
		t.Errorf("the locked error does not name the API: %s", errs)
	}
	serve.Process.Signal(syscall.SIGTERM)
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.data, serveInfoFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve.json outlived serve: %v", err)
	}
}

// While serve holds the data directory, every command it can answer goes
// through its API (with the tokens it made), says so, and exits as it
// would on the directory; what was written through it is in the store
// once serve stops.
func TestCLIGoesThroughTheRunningServer(t *testing.T) {
	c := newCLI(t)
	c.addExample("examples/deploy")
	ri := decode[host.RunInfo](t, c.ok("--json", "call", "deploy", "--input", `{"service":"api"}`))
	serve := exec.Command(bin, "--data", c.data, "serve", "--addr", "127.0.0.1:0")
	serr, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			serve.Process.Signal(syscall.SIGTERM)
			serve.Wait()
		}
	}
	defer stop()
	waitLine(t, serr, "serving", 30*time.Second)
	through := func(args ...string) string {
		t.Helper()
		out, errs, code := c.run(args...)
		if code != 0 || !strings.Contains(errs, "through the API of sandflow serve") {
			t.Fatalf("sandflow %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
		}
		return out
	}

	// Reads.
	if runs := decode[[]store.Run](t, through("--json", "runs", "list")); len(runs) != 1 || runs[0].ID != ri.ID {
		t.Errorf("runs list: %+v", runs)
	}
	if out := through("runs", "list", "--status", "completed"); strings.Contains(out, ri.ID) {
		t.Errorf("runs list --status completed lists a waiting run:\n%s", out)
	}
	qs := decode[[]host.Question](t, through("--json", "asks", "list"))
	if len(qs) != 1 || qs[0].RunID != ri.ID {
		t.Fatalf("asks list: %+v", qs)
	}
	askID := qs[0].ID
	if q := decode[host.Question](t, through("--json", "asks", "show", askID)); q.ID != askID || q.Request.Prompt != qs[0].Request.Prompt || len(q.Request.Options) == 0 {
		t.Errorf("asks show: %+v", q)
	}
	if ts := decode[[]host.Tool](t, through("tools")); len(ts) != 1 || ts[0].Name != "deploy" {
		t.Errorf("tools: %+v", ts)
	}
	if ps := decode[[]host.Plugin](t, through("--json", "plugin", "list")); len(ps) != 1 || ps[0].Name != "deploy" {
		t.Errorf("plugin list: %+v", ps)
	}
	if out := through("runs", "show", ri.ID); !strings.Contains(out, "question "+askID+" opened") && !strings.Contains(out, askID) {
		t.Errorf("runs show:\n%s", out)
	}
	hist := filepath.Join(t.TempDir(), "h.zst")
	through("runs", "export", ri.ID, "-o", hist)
	f, err := os.Open(hist)
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.ReadHistory(f)
	f.Close()
	if err != nil || h.Run.ID != ri.ID || len(h.Events) == 0 {
		t.Errorf("exported history: %v, %+v", err, h)
	}

	// Writes, committed by the server before it answers.
	done := decode[host.RunInfo](t, through("--json", "asks", "answer", askID, "approve"))
	if done.Status != store.StatusCompleted || !strings.Contains(compact(t, done.Result), `"deployed":true`) {
		t.Errorf("asks answer: %+v", done)
	}
	second := decode[host.RunInfo](t, through("--json", "call", "deploy", "--input", `{"service":"web"}`, "--run-id", "run_second"))
	if second.ID != "run_second" || second.Status != store.StatusWaiting {
		t.Errorf("call: %+v", second)
	}
	if r := decode[host.RunInfo](t, through("--json", "runs", "cancel", "run_second")); r.Status != store.StatusCancelled {
		t.Errorf("runs cancel: %+v", r)
	}
	root, err := guestbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if p := decode[host.Plugin](t, through("--json", "plugin", "add", filepath.Join(root, "examples", "js", "render.js"))); p.Name != "render" || p.Version != 1 {
		t.Errorf("plugin add: %+v", p)
	}

	// Refusals exit as they would on the directory, and change nothing.
	c.expect(exitConflict, "asks", "answer", askID, "approve")
	c.expect(exitNotFound, "asks", "show", "ask_unknown")
	c.expect(exitNotFound, "runs", "show", "run_unknown")
	c.expect(exitNotFound, "hooks", "resume", "hook_unknown", "--payload", "null")
	c.expect(exitNotFound, "call", "nope")
	c.expect(exitInvalid, "call", "deploy", "--input", `{"service":`)
	c.expect(exitConflict, "call", "deploy", "--input", `{"service":"x"}`, "--run-id", "run_second")
	bad := exec.Command(bin, "--data", c.data, "runs", "list")
	bad.Env = append(os.Environ(), "SANDFLOW_API_TOKEN=sfa_wrong")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "the bearer token is not valid") {
		t.Errorf("a wrong token: %v\n%s", err, out)
	}
	// What the server cannot do for the CLI still names its API.
	if errs := c.expect(exitLocked, "runs", "upgrade", ri.ID, "--version", "2"); !strings.Contains(errs, "HTTP API") {
		t.Errorf("upgrade while serve runs: %s", errs)
	}

	stop()
	if r := decode[shown](t, c.ok("runs", "show", ri.ID, "--json")); r.Run.Status != store.StatusCompleted {
		t.Errorf("after serve stopped, the answered run is %s", r.Run.Status)
	}
	if r := decode[shown](t, c.ok("runs", "show", "run_second", "--json")); r.Run.Status != store.StatusCancelled {
		t.Errorf("after serve stopped, the cancelled run is %s", r.Run.Status)
	}
	if out := c.ok("plugin", "list"); !strings.Contains(out, "render") {
		t.Errorf("after serve stopped, the uploaded plugin is missing:\n%s", out)
	}
	if runs := decode[[]store.Run](t, c.ok("--json", "runs", "list")); len(runs) != 2 {
		t.Errorf("refused calls created runs: %+v", runs)
	}
}

// A serve.json that names a URL where another server answers (as after a
// crash, when its port and pid went to other processes) gets no token:
// the command checks the server's instance name first, and exits as on a
// locked directory.
func TestCLISendsNoTokenToAServerThatIsNotServe(t *testing.T) {
	c := newCLI(t)
	serve := exec.Command(bin, "--data", c.data, "serve", "--addr", "127.0.0.1:0")
	serr, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		serve.Process.Signal(syscall.SIGTERM)
		serve.Wait()
	}()
	waitLine(t, serr, "serving", 30*time.Second)
	var mu sync.Mutex
	var tokens []string
	impostor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tokens = append(tokens, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set(instanceHeader, "not-the-one")
		w.Write([]byte(`{"runs":[]}`))
	}))
	defer impostor.Close()
	si, ok := runningServer(c.data)
	if !ok || si.Instance == "" {
		t.Fatalf("serve.json: %+v %v", si, ok)
	}
	// Through the real serve first: the check passes.
	if _, errs, code := c.run("runs", "list"); code != 0 || !strings.Contains(errs, "through the API") {
		t.Fatalf("runs list through serve: exit %d: %s", code, errs)
	}
	stale := si
	stale.URL = impostor.URL
	b, _ := json.Marshal(stale)
	if err := os.WriteFile(filepath.Join(c.data, serveInfoFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	c.expect(exitLocked, "runs", "list")
	mu.Lock()
	defer mu.Unlock()
	for _, tok := range tokens {
		if tok != "" {
			t.Errorf("the other server was sent %q", tok)
		}
	}
	if len(tokens) == 0 {
		t.Error("the command did not ask the other server who it is")
	}
}
