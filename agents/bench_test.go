package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/store"
)

// countingStore counts the store's commits (run creations and appends).
type countingStore struct {
	store.Store
	commits atomic.Int64
}

func (s *countingStore) CreateRun(ctx context.Context, r store.Run, b store.Batch) error {
	s.commits.Add(1)
	return s.Store.CreateRun(ctx, r, b)
}

func (s *countingStore) Append(ctx context.Context, id string, last uint64, b store.Batch) error {
	s.commits.Add(1)
	return s.Store.Append(ctx, id, last, b)
}

// benchModel answers at once: a call of the trivial tool while the
// conversation has fewer than steps-1 tool results, then a text.
func benchModel(steps int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Role string } `json:"messages"`
		}
		raw, _ := io.ReadAll(r.Body)
		json.Unmarshal(raw, &req)
		n := 0
		for _, m := range req.Messages {
			if m.Role == "tool" {
				n++
			}
		}
		msg := map[string]any{"role": "assistant", "content": "done"}
		finish := "stop"
		if n < steps-1 {
			msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": fmt.Sprintf("c%d", n), "type": "function",
				"function": map[string]any{"name": "noop", "arguments": `{"mode":"steps","n":0}`}}}}
			finish = "tool_calls"
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": "m",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
	}
}

type benchHost struct {
	h      *host.Host
	st     *countingStore
	loop   *Loop
	srv    *httptest.Server
	dir    string
	agent  LoopAgent
	b      *testing.B
	noSync bool
}

// newBenchHost opens a host on a bbolt store with fsync (the default), a
// loop agent whose model is benchModel(steps) and whose one tool, noop,
// is the kitchen WebAssembly guest doing nothing.
func newBenchHost(b *testing.B, steps int, approval string, noSync bool) *benchHost {
	srv := httptest.NewServer(benchModel(steps))
	b.Cleanup(srv.Close)
	bh := &benchHost{srv: srv, dir: b.TempDir(), b: b, noSync: noSync,
		agent: LoopAgent{Name: "bench", Tools: []LoopTool{{Tool: "kitchen", Name: "noop", Approval: approval}}, MaxSteps: steps + 1}}
	bh.loop = &Loop{Endpoint: Endpoint{BaseURL: srv.URL + "/v1", APIKeyEnv: "SANDFLOW_TEST_NO_KEY"}, Model: "m", List: []LoopAgent{bh.agent},
		ApprovalSecret: []byte("0123456789abcdef0123456789abcdef")}
	bh.open()
	if _, err := bh.h.AddPlugin(context.Background(), testhost.Guest(b, "host/testdata/guests/kitchen"), testhost.Manifest(b, "host/testdata/guests/kitchen")); err != nil {
		b.Fatal(err)
	}
	return bh
}

func (bh *benchHost) open() {
	st, err := store.Open(filepath.Join(bh.dir, "store.db"), &store.Options{NoSync: bh.noSync})
	if err != nil {
		bh.b.Fatal(err)
	}
	bh.st = &countingStore{Store: st}
	count := func(context.Context, host.CapabilityCall) (json.RawMessage, error) { return json.RawMessage(`1`), nil }
	h, err := host.Open(context.Background(), bh.st, &host.Options{Engine: testhost.Wazero(bh.b), Agents: bh.loop, CacheDir: filepath.Join(bh.dir, "cache"),
		Engines: map[string]host.Engine{LoopEngineName: bh.loop.Engine()}, Capabilities: map[string]host.Capability{"count": count}})
	if err != nil {
		bh.b.Fatal(err)
	}
	if err := bh.loop.Attach(context.Background(), h); err != nil {
		bh.b.Fatal(err)
	}
	bh.h = h
}

func (bh *benchHost) close() {
	bh.h.Close(context.Background())
	bh.st.Store.(*store.Bolt).Close()
}

// BenchmarkLoopStep times one step of a loop turn (a model call that
// calls a tool, and the tool's run) with fsync on, the model answering
// at once and the tool a WebAssembly guest that does nothing: a turn of
// 10 steps per iteration, reported per step with the store's commits per
// step. BenchmarkLoopModelCall and BenchmarkLoopToolCall time the model
// call and the tool call alone, on the same server and guest: the
// step's overhead is the difference.
func BenchmarkLoopStep(b *testing.B) { benchStep(b, false) }

// BenchmarkLoopStepNoSync is BenchmarkLoopStep on a store without fsync:
// the loop's own work, without the disk's.
func BenchmarkLoopStepNoSync(b *testing.B) { benchStep(b, true) }

func benchStep(b *testing.B, noSync bool) {
	const steps = 10
	bh := newBenchHost(b, steps, "", noSync)
	defer bh.close()
	ctx := context.Background()
	tool := LoopToolName("bench")
	before := bh.st.commits.Load()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ri, err := bh.h.Call(ctx, tool, json.RawMessage(`{"message":"go"}`), nil)
		if err != nil || ri.Status != store.StatusCompleted {
			b.Fatalf("%v %s %+v", err, ri.Status, ri.Error)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*steps), "ns/step")
	b.ReportMetric(float64(bh.st.commits.Load()-before)/float64(b.N*steps), "commits/step")
}

// BenchmarkLoopModelCall times one chat completion to the benchmark's
// model server through the client a loop step uses.
func BenchmarkLoopModelCall(b *testing.B) {
	srv := httptest.NewServer(benchModel(10))
	defer srv.Close()
	e := &Endpoint{BaseURL: srv.URL + "/v1", APIKeyEnv: "SANDFLOW_TEST_NO_KEY", MaxRetries: -1}
	params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("go")}}
	for range b.N {
		if _, err := e.complete(context.Background(), params, "k"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoopToolCall times a call of the benchmark's tool on its own,
// a run that commits once.
func BenchmarkLoopToolCall(b *testing.B) { benchToolCall(b, false) }

// BenchmarkLoopToolCallNoSync is BenchmarkLoopToolCall without fsync.
func BenchmarkLoopToolCallNoSync(b *testing.B) { benchToolCall(b, true) }

func benchToolCall(b *testing.B, noSync bool) {
	bh := newBenchHost(b, 10, "", noSync)
	defer bh.close()
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		ri, err := bh.h.Call(ctx, "kitchen", json.RawMessage(`{"mode":"steps","n":0}`), nil)
		if err != nil || ri.Status != store.StatusCompleted {
			b.Fatalf("%v %s %+v", err, ri.Status, ri.Error)
		}
	}
}

// BenchmarkLoopResumeAtStep20 times the resume of a loop turn after a
// restart at step 20: the turn ran 20 steps and waits for the approval of
// its 21st tool call; the host is closed and opened again (not timed),
// and the time is from the approval to the turn's end, which replays the
// 20 steps on a fresh instance and then runs the tool call and the last
// model call. BenchmarkLoopResumeAtStep20Parked is the same without the
// restart (the instance parked in memory goes on).
func BenchmarkLoopResumeAtStep20(b *testing.B)       { benchResume(b, true) }
func BenchmarkLoopResumeAtStep20Parked(b *testing.B) { benchResume(b, false) }

func benchResume(b *testing.B, restart bool) {
	const steps = 22 // 20 steps, the 21st's call waits for approval, the 22nd answers
	bh := newBenchHost(b, steps, "", false)
	defer func() { bh.close() }()
	ctx := context.Background()
	tool := LoopToolName("bench")
	// Approval for the 21st call: a rule on its arguments.
	bh.loop.List[0].Tools[0].ApprovalRules = []ApprovalRule{{Field: "wait", Match: "yes", Approval: ApprovalAlways}}
	bh.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct{ Role string } `json:"messages"`
		}
		json.Unmarshal(raw, &req)
		n := 0
		for _, m := range req.Messages {
			if m.Role == "tool" {
				n++
			}
		}
		args := `{"mode":"steps","n":0}`
		if n == 20 {
			args = `{"mode":"steps","n":0,"wait":"yes"}`
		}
		msg := map[string]any{"role": "assistant", "content": "done"}
		finish := "stop"
		if n < steps-1 {
			msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": fmt.Sprintf("c%d", n), "type": "function",
				"function": map[string]any{"name": "noop", "arguments": args}}}}
			finish = "tool_calls"
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": "m",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}})
	})
	if err := bh.loop.Attach(ctx, bh.h); err != nil { // the rule is a new version
		b.Fatal(err)
	}
	for range b.N {
		b.StopTimer()
		ri, err := bh.h.Call(ctx, tool, json.RawMessage(`{"message":"go"}`), nil)
		if err != nil || ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].AskID == "" {
			b.Fatalf("%v %s %+v", err, ri.Status, ri.Waiting)
		}
		if restart {
			bh.close()
			bh.open()
		}
		b.StartTimer()
		if _, err := bh.h.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{OptionID: "approve"}); err != nil {
			b.Fatal(err)
		}
		if ri, err = bh.h.Drive(ctx, ri.ID); err != nil || ri.Status != store.StatusCompleted {
			b.Fatalf("%v %s %+v", err, ri.Status, ri.Error)
		}
	}
}
