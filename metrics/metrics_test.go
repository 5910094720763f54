package metrics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

const stepAskTool = `async function plan(n) { "use step"; return n + 1; }
defineWorkflowTool({
  description: "Plan in a step, then ask.",
  inputSchema: { type: "object" },
  async execute(_, ctx) {
    "use workflow";
    await plan(1);
    const a = await ctx.ask({ prompt: "go?", options: [{ id: "yes", label: "Yes" }] });
    return { yes: a.optionId === "yes" };
  },
});`

const spinTool = `defineWorkflowTool({
  description: "Spin.",
  inputSchema: { type: "object" },
  async execute() { "use workflow"; for (;;) {} },
});`

// TestMetricsCountTheKernel: the kernel's activations, live ops, step
// attempts, store commits and limit hits of a scripted workload, counted
// as they happen once the metrics are made.
func TestMetricsCountTheKernel(t *testing.T) {
	ctx := context.Background()
	eng, err := jsprogram.NewEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	// A short CPU limit, for the spinning tool to hit.
	h, err := host.OpenDir(ctx, filepath.Join(t.TempDir(), "data"), &host.Options{
		Engines: map[string]host.Engine{jsprogram.EngineName: eng}, Limits: host.Limits{CPUTime: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx); eng.Close(ctx) })
	m := metrics.New(h, nil)
	for name, src := range map[string]string{"stepask": stepAskTool, "spin": spinTool} {
		if _, err := jsprogram.RegisterTool(ctx, h, name, []byte(src)); err != nil {
			t.Fatal(err)
		}
	}
	var runs []host.RunInfo
	for range 2 {
		ri, err := h.Call(ctx, "stepask", json.RawMessage(`{}`), nil)
		if err != nil || len(ri.Waiting) != 1 {
			t.Fatalf("call: %+v %v", ri, err)
		}
		runs = append(runs, ri)
	}
	done, err := h.AnswerAsk(ctx, runs[0].Waiting[0].AskID, host.Answer{OptionID: "yes"})
	if err != nil || done.Status != "completed" {
		t.Fatalf("answer: %+v %v", done, err)
	}
	spun, err := h.Call(ctx, "spin", json.RawMessage(`{}`), nil)
	if err != nil || spun.Status != "failed" {
		t.Fatalf("spin: %+v %v", spun, err)
	}

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	_, body := get(t, srv.URL)
	for _, want := range []string{
		`sandflow_activations_total{resume="fresh",tool="stepask"} 2`,
		// Authored tools are not parked: each later activation replays
		// (after each step, and after the answer).
		`sandflow_activations_total{resume="replay",tool="stepask"} 3`,
		`sandflow_activations_total{resume="fresh",tool="spin"} 1`,
		`sandflow_step_attempts_total{outcome="completed",tool="stepask"} 2`,
		`sandflow_step_duration_seconds_count{tool="stepask"} 2`,
		`sandflow_op_duration_seconds_count{kind="ask"} 2`,
		`sandflow_op_duration_seconds_count{kind="step"} 2`,
		`sandflow_op_duration_seconds_count{kind="complete"} 1`,
		`sandflow_limit_hits_total{limit="js_time"} 1`,
	} {
		if !hasLine(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	// Every event of these runs went through a commit the metrics saw.
	var events uint64
	for _, id := range []string{runs[0].ID, runs[1].ID, spun.ID} {
		r, err := h.Store().Run(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		events += r.LastSeq
	}
	if want := fmt.Sprintf("sandflow_store_committed_events_total %d", events); !hasLine(body, want) {
		t.Errorf("scrape lacks %s", want)
	}
	if !strings.Contains(body, "\nsandflow_store_journal_bytes ") {
		t.Error("scrape lacks sandflow_store_journal_bytes")
	}
}
