package peers

import (
	"context"
	"strconv"
	"testing"

	extism "github.com/extism/go-sdk"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sandflow/sandflow/bench/workload"
)

func BenchmarkTemporalReplay(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000, 10000} {
		b.Run("n="+strconv.Itoa(n), TemporalReplay(n))
	}
}

func BenchmarkExtismCall(b *testing.B) { ExtismCall()(b) }

func BenchmarkExtismInstantiateAndCall(b *testing.B) { ExtismInstantiateAndCall()(b) }

func BenchmarkWazeroHostCall(b *testing.B) { WazeroHostCall()(b) }

func TestTemporalReplay(t *testing.T) {
	for _, n := range []int{1, 10} {
		h, err := SumHistory(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Events) != 6*n+5 {
			t.Fatalf("n=%d: %d events, want %d", n, len(h.Events), 6*n+5)
		}
		r := NewTemporalReplayer()
		// Twice: the benchmark replays one history object many times.
		for range 2 {
			if err := r.Replay(h); err != nil {
				t.Fatalf("n=%d: %v", n, err)
			}
			sum, err := r.Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := n * (n + 1) / 2; sum != want {
				t.Fatalf("n=%d: replay result %d, want %d", n, sum, want)
			}
		}
	}
}

// A history that the workflow code does not reproduce must fail the
// replay, else the benchmark could time a replay that gave up early.
func TestTemporalReplayCorrupted(t *testing.T) {
	const n = 10
	scheduled := func(h *historypb.History, k int) *historypb.ActivityTaskScheduledEventAttributes {
		for _, e := range h.Events {
			if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
				if k == 0 {
					return a
				}
				k--
			}
		}
		t.Fatal("no such activity")
		return nil
	}
	cases := []struct {
		name    string
		corrupt func(*historypb.History)
	}{
		{"other activity type", func(h *historypb.History) {
			scheduled(h, 4).ActivityType = &commonpb.ActivityType{Name: "SubOne"}
		}},
		{"other activity id", func(h *historypb.History) {
			scheduled(h, 7).ActivityId = "999"
		}},
		{"activity missing", func(h *historypb.History) {
			// Cut the last activity with its workflow task: the code
			// schedules an activity where the history completes.
			last := h.Events[len(h.Events)-1]
			h.Events = h.Events[:len(h.Events)-7]
			last.EventId = int64(len(h.Events) + 1)
			last.GetWorkflowExecutionCompletedEventAttributes().WorkflowTaskCompletedEventId = last.EventId - 1
			h.Events = append(h.Events, last)
		}},
		{"other workflow type", func(h *historypb.History) {
			h.Events[0].GetWorkflowExecutionStartedEventAttributes().WorkflowType.Name = "NoSuchWorkflow"
		}},
	}
	good, err := SumHistory(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := proto.Clone(good).(*historypb.History)
			c.corrupt(h)
			err := NewTemporalReplayer().Replay(h)
			if err == nil {
				t.Fatal("replay of a corrupted history succeeded")
			}
			t.Log(err)
		})
	}
	// The good history still replays: the cases changed only copies.
	if err := NewTemporalReplayer().Replay(good); err != nil {
		t.Fatal(err)
	}
	if good.Events[len(good.Events)-1].EventType != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED {
		t.Fatal("history does not end in a completion")
	}
}

// The Extism call is timed against sandflow's trivial tool call, so its
// guest must get the same input and give the same result.
func TestExtismSameWork(t *testing.T) {
	if ExtismInput != workload.GreetInput || ExtismOutput != workload.GreetResult {
		t.Fatalf("Extism greets %s with %s; sandflow's trivial call greets %s with %s",
			ExtismInput, ExtismOutput, workload.GreetInput, workload.GreetResult)
	}
}

func TestExtismGreet(t *testing.T) {
	ctx := context.Background()
	cp, err := NewExtismPlugin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close(ctx)
	p, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	for range 3 {
		rc, out, err := p.Call(extismFunction, []byte(ExtismInput))
		if err != nil {
			t.Fatal(err)
		}
		if rc != 0 || string(out) != ExtismOutput {
			t.Fatalf("greet returned %d and %q, want 0 and %q", rc, out, ExtismOutput)
		}
	}
	// Inputs longer than eight bytes and of odd lengths cross both copy
	// loops of the guest.
	rc, out, err := p.Call(extismFunction, []byte(`{"mode":"greet","name":"a somewhat longer name!"}`))
	if err != nil || rc != 0 || string(out) != `{"greeting":"hello a somewhat longer name!"}` {
		t.Fatalf("greet returned %d, %q, %v", rc, out, err)
	}
	// Another mode is refused, as the workload guest's greet would not
	// answer it.
	if rc, _, err := p.Call(extismFunction, []byte(`{"mode":"steps","name":"x"}`)); err == nil || rc != 1 {
		t.Fatalf("greet of another mode returned %d and %v, want 1 and an error", rc, err)
	}
	// Input that is not JSON is the guest's error, reported by Extism.
	rc, _, err = p.Call(extismFunction, []byte(`not json`))
	if err == nil || rc != 1 {
		t.Fatalf("greet of bad input returned %d and %v, want 1 and an error", rc, err)
	}
}

func TestExtismInstantiateAndCall(t *testing.T) {
	ctx := context.Background()
	cp, err := NewExtismPlugin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close(ctx)
	for range 2 {
		p, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		err = ExtismGreet(p)
		p.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestWazeroLoop(t *testing.T) {
	ctx := context.Background()
	w, err := NewWazeroLoop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	for _, k := range []int{0, 1, 7, HostCallsPerExport} {
		if err := w.Run(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
}

// The benchmark functions themselves, with their setup and checks, at a
// small size (each runs for the -benchtime, one second by default).
func TestBenchmarksRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs each benchmark for the -benchtime")
	}
	for name, f := range map[string]func(*testing.B){
		"TemporalReplay(10)":       TemporalReplay(10),
		"ExtismCall":               ExtismCall(),
		"ExtismInstantiateAndCall": ExtismInstantiateAndCall(),
		"WazeroHostCall":           WazeroHostCall(),
	} {
		if r := testing.Benchmark(f); r.N == 0 {
			t.Errorf("%s: benchmark failed", name)
		}
	}
}
