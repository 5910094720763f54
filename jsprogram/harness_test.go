package jsprogram_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

func TestMain(m *testing.M) {
	jsprogram.MaybeWorker()
	os.Exit(m.Run())
}

// agents is a scripted agent backend: each agent answers with a function
// of the message, and counts its turns by id.
type agents struct {
	mu      sync.Mutex
	sent    map[string]int
	reply   func(t host.AgentTurn) abi.AgentResult
	gate    chan struct{} // when non-nil, turns wait for it to close
	started chan string
}

func newAgents(reply func(t host.AgentTurn) abi.AgentResult) *agents {
	return &agents{sent: map[string]int{}, reply: reply, started: make(chan string, 1024)}
}

func (a *agents) backend() host.AgentBackend {
	return host.AgentFunc{
		List: []host.AgentInfo{{Name: "ticket-triage"}, {Name: "ticket-review"}, {Name: "echo"}},
		Fn: func(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
			a.mu.Lock()
			a.sent[t.TurnID]++
			gate := a.gate
			a.mu.Unlock()
			select {
			case a.started <- t.TurnID:
			default:
			}
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return abi.AgentResult{}, ctx.Err()
				}
			}
			return a.reply(t), nil
		},
	}
}

func (a *agents) turns() (total, distinct int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.sent {
		total += n
	}
	return total, len(a.sent)
}

func echo(t host.AgentTurn) abi.AgentResult {
	if len(t.OutputSchema) > 0 {
		b, _ := json.Marshal(map[string]any{"agent": t.Agent, "length": len(t.Message)})
		return abi.AgentResult{Status: abi.AgentCompleted, Data: b}
	}
	return abi.AgentResult{Status: abi.AgentCompleted, Reply: t.Agent + ": " + t.Message}
}

// fixture is a host with the workflow tool on a store in a temp dir.
type fixture struct {
	t      testing.TB
	dir    string
	opts   jsprogram.Options
	agents *agents
	eng    *jsprogram.Engine
	h      *host.Host
	max    int
}

func newFixture(t testing.TB, lim jsprogram.Limits, a *agents) *fixture {
	t.Helper()
	if a == nil {
		a = newAgents(echo)
	}
	f := &fixture{t: t, dir: t.TempDir(), opts: jsprogram.Options{Limits: lim}, agents: a}
	f.open()
	if _, err := jsprogram.RegisterWorkflowTool(context.Background(), f.h, jsprogram.WorkflowTool{MaxSubagents: lim.MaxSubagents}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.close)
	return f
}

func (f *fixture) open() {
	f.t.Helper()
	eng, err := jsprogram.NewEngine(&f.opts)
	if err != nil {
		f.t.Fatal(err)
	}
	h, err := host.OpenDir(context.Background(), filepath.Join(f.dir, "data"), &host.Options{
		Engines: map[string]host.Engine{jsprogram.EngineName: eng},
		Agents:  f.agents.backend(),
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.eng, f.h = eng, h
}

func (f *fixture) close() {
	if f.h != nil {
		f.h.Close(context.Background())
		f.eng.Close(context.Background())
		f.h = nil
	}
}

func (f *fixture) restart() {
	f.close()
	f.open()
}

// run starts a program and drives it to its end.
func (f *fixture) run(js string) host.RunInfo {
	f.t.Helper()
	in, _ := json.Marshal(map[string]string{"js": js})
	ri, err := f.h.Start(context.Background(), jsprogram.WorkflowToolName, in, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	ri, err = f.h.Drive(context.Background(), ri.ID)
	if err != nil {
		f.t.Fatalf("drive: %v", err)
	}
	return ri
}

// result decodes a completed run's result.
func result[T any](t testing.TB, ri host.RunInfo) T {
	t.Helper()
	var v T
	if ri.Status != store.StatusCompleted {
		t.Fatalf("run %s is %s, not completed: %+v", ri.ID, ri.Status, ri.Error)
	}
	if err := json.Unmarshal(ri.Result, &v); err != nil {
		t.Fatalf("result %s: %v", ri.Result, err)
	}
	return v
}

// failure returns a failed run's program error.
func failure(t testing.TB, ri host.RunInfo) *jsprogram.WorkflowProgramError {
	t.Helper()
	if ri.Status != store.StatusFailed {
		r := string(ri.Result)
		if len(r) > 200 {
			r = r[:200] + "..."
		}
		t.Fatalf("run %s is %s, not failed (result %s)", ri.ID, ri.Status, r)
	}
	e, ok := jsprogram.FromObject(ri.Error)
	if !ok {
		t.Fatalf("run failed with %+v, not a %s", ri.Error, jsprogram.ErrorType)
	}
	return e
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
