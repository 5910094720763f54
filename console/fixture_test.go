package console_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/console"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/session"
)

func TestMain(m *testing.M) { testhost.Main(m) }

const (
	apiToken   = "console-api-token-0123"
	adminToken = "console-admin-token-0123"
)

// tools are the JavaScript tools every fixture registers.
var tools = map[string]string{
	// approve plans in a step, asks with two options, and applies in a step.
	"approve": `defineWorkflowTool({
  description: "Deploy after approval.",
  inputSchema: { type: "object", properties: { service: { type: "string" } }, required: ["service"] },
  async execute({ service }, ctx) {
    "use workflow";
    const plan = await planDeploy(service);
    const a = await ctx.ask({ prompt: "Deploy " + service + "?\nPlan: " + plan.steps.join(", "),
      options: [ { id: "approve", label: "Deploy", description: "roll out now", style: "primary" },
                 { id: "reject", label: "Reject", description: "stop here", style: "danger" } ] });
    if (a.optionId !== "approve") return { deployed: false };
    return { deployed: true, url: await applyDeploy(service) };
  },
});
async function planDeploy(service) { "use step"; return { service, steps: ["build " + service, "push image"] }; }
async function applyDeploy(service) { "use step"; return "https://" + service + ".example.invalid/"; }`,
	// note asks for free text.
	"note": `defineWorkflowTool({
  description: "Ask for a note.",
  inputSchema: { type: "object", properties: { topic: { type: "string" } } },
  async execute({ topic }, ctx) {
    "use workflow";
    const a = await ctx.ask({ prompt: "Write a note about " + topic, allowFreeform: true });
    return { note: a.text };
  },
});`,
	// hooked waits for a hook's payload.
	"hooked": `defineWorkflowTool({
  description: "Wait for a payment.",
  inputSchema: { type: "object", properties: { order: { type: "string" } }, required: ["order"] },
  async execute({ order }) {
    "use workflow";
    const hook = createHook({ token: "order-" + order });
    const p = await hook;
    return { order, paid: p.amount };
  },
});`,
	// sleeper sleeps for a day.
	"sleeper": `defineWorkflowTool({
  description: "Sleep a day.",
  inputSchema: { type: "object", properties: { n: { type: "number" } } },
  async execute({ n }, ctx) {
    "use workflow";
    ctx.progress({ slept: false });
    await sleep("1d");
    return { n };
  },
});`,
}

// fixture is a console over a host with the tools above, served over
// HTTP (testhost.Host: f.H is the host).
type fixture struct {
	*testhost.Host
	t   *testing.T
	c   *console.Console
	sm  *session.Manager // the sessions the console shows
	srv *testhost.Server
}

func newFixture(t *testing.T, cfg *console.Config) *fixture {
	t.Helper()
	return newFixtureWith(t, cfg, nil)
}

// newFixtureWith is newFixture on a host made with opts.
func newFixtureWith(t *testing.T, cfg *console.Config, opts *testhost.Options) *fixture {
	t.Helper()
	th := testhost.New(t, opts)
	for name, src := range tools {
		th.AddJS(name, src)
	}
	var cc console.Config
	if cfg != nil {
		cc = *cfg
	}
	cc.APITokens, cc.AdminTokens = []string{apiToken}, []string{adminToken}
	sm := session.NewManager(th.H)
	t.Cleanup(sm.Close) // after the console, before the host
	cc.Sessions = sm
	c, err := console.New(th.H, cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) }) // after the server, before the host
	return &fixture{Host: th, t: t, c: c, sm: sm, srv: testhost.Serve(t, c)}
}

// waitRun polls a run until ok says so, or fails the test.
func (f *fixture) waitRun(id string, ok func(host.RunInfo) bool) host.RunInfo {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ri, err := f.H.Run(context.Background(), id)
		if err != nil {
			f.t.Fatal(err)
		}
		if ok(ri) {
			return ri
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("run %s: still %s (waiting %+v)", id, ri.Status, ri.Waiting)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// client is a cookie-keeping HTTP client that does not follow redirects.
func (f *fixture) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// signIn signs a client in and returns the CSRF token of its pages.
func (f *fixture) signIn(cl *http.Client, token string) string {
	f.t.Helper()
	resp, err := cl.PostForm(f.srv.URL+"/console/login", url.Values{"token": {token}})
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		f.t.Fatalf("sign-in: %s", resp.Status)
	}
	body, code := f.get(cl, "/console/inbox")
	if code != http.StatusOK {
		f.t.Fatalf("inbox after sign-in: %d", code)
	}
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	if m == nil {
		f.t.Fatal("no CSRF token on the inbox page")
	}
	return m[1]
}

func (f *fixture) get(cl *http.Client, path string) (string, int) {
	f.t.Helper()
	resp, err := cl.Get(f.srv.URL + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String(), resp.StatusCode
}

func registerAgain(f *fixture, name, src string) (host.Plugin, error) {
	return jsprogram.RegisterTool(context.Background(), f.H, name, []byte(src+"\n// v2\n"))
}
