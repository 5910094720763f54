package metrics_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/metrics"
)

func TestMain(m *testing.M) {
	jsprogram.MaybeWorker() // JavaScript tools run in re-executed test binaries
	os.Exit(m.Run())
}

const askTool = `defineWorkflowTool({
  description: "Ask yes or no.",
  inputSchema: { type: "object" },
  async execute(_, ctx) {
    "use workflow";
    const a = await ctx.ask({ prompt: "ok?", options: [{ id: "yes", label: "Yes" }, { id: "no", label: "No" }] });
    return { yes: a.optionId === "yes" };
  },
});`

const quickTool = `defineWorkflowTool({
  description: "Return at once.",
  inputSchema: { type: "object" },
  async execute(input) { "use workflow"; return input; },
});`

func open(t *testing.T) *host.Host {
	t.Helper()
	eng, err := jsprogram.NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.OpenDir(context.Background(), filepath.Join(t.TempDir(), "data"), &host.Options{
		Engines: map[string]host.Engine{jsprogram.EngineName: eng}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()); eng.Close(context.Background()) })
	for name, src := range map[string]string{"ask": askTool, "quick": quickTool} {
		if _, err := jsprogram.RegisterTool(context.Background(), h, name, []byte(src)); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestMetricsCountTheWorkload runs a scripted workload (runs ended and
// waiting, questions answered, requests routed and not) and checks that a
// scrape reports exactly its counts.
func TestMetricsCountTheWorkload(t *testing.T) {
	h := open(t)
	ctx := context.Background()
	var asks []host.RunInfo
	for range 4 {
		ri, err := h.Call(ctx, "ask", json.RawMessage(`{}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		asks = append(asks, ri)
	}
	for range 3 {
		if _, err := h.Call(ctx, "quick", json.RawMessage(`{"n":1}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.AnswerAsk(ctx, asks[0].Waiting[0].AskID, host.Answer{OptionID: "yes"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Cancel(ctx, asks[1].ID, "workload"); err != nil {
		t.Fatal(err)
	}

	m := metrics.New(h, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", metrics.Healthz)
	mux.HandleFunc("GET /things/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	mux.Handle("GET /metrics", m.Handler())
	srv := httptest.NewServer(m.Middleware(mux))
	defer srv.Close()
	for range 5 {
		if code, _ := get(t, srv.URL+"/healthz"); code != http.StatusOK {
			t.Fatalf("healthz: %d", code)
		}
	}
	for _, id := range []string{"a", "b"} {
		get(t, srv.URL+"/things/"+id)
	}
	get(t, srv.URL+"/nowhere")

	_, body := get(t, srv.URL+"/metrics")
	for _, want := range []string{
		`sandflow_runs{status="completed",tool="ask"} 1`,
		`sandflow_runs{status="cancelled",tool="ask"} 1`,
		`sandflow_runs{status="waiting",tool="ask"} 2`,
		`sandflow_runs{status="completed",tool="quick"} 3`,
		`sandflow_questions_open 2`,
		`sandflow_scrape_error 0`,
		`sandflow_http_requests_total{code="200",method="GET",route="GET /healthz"} 5`,
		`sandflow_http_requests_total{code="418",method="GET",route="GET /things/{id}"} 2`,
		`sandflow_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
		`sandflow_http_request_duration_seconds_count{route="GET /healthz"} 5`,
	} {
		if !hasLine(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if n := strings.Count(body, "\nsandflow_runs{"); n != 4 {
		t.Errorf("scrape has %d sandflow_runs series, want 4", n)
	}
}

func hasLine(body, line string) bool {
	for _, l := range strings.Split(body, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

func TestReadyzFailsWhenTheStoreIsClosed(t *testing.T) {
	h := open(t)
	srv := httptest.NewServer(metrics.Ready(h))
	defer srv.Close()
	if code, body := get(t, srv.URL); code != http.StatusOK {
		t.Fatalf("open store: %d %s", code, body)
	}
	if err := h.Store().Close(); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, srv.URL); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready") {
		t.Fatalf("closed store: %d %q, want 503", code, body)
	}
}
