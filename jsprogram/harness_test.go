package jsprogram_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/testhost"
	"github.com/sandflow/sandflow/jsprogram"
	"github.com/sandflow/sandflow/store"
)

func TestMain(m *testing.M) { testhost.Main(m) }

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

// fixture is a host with the workflow tool and scripted agents, on a store
// in a temp dir (testhost.Host: f.H is the host, f.JS the JavaScript
// engine).
type fixture struct {
	*testhost.Host
	t      testing.TB
	agents *agents
}

func newFixture(t testing.TB, lim jsprogram.Limits, a *agents) *fixture {
	t.Helper()
	return openFixture(t, jsprogram.Options{Limits: lim}, a, jsprogram.WorkflowTool{MaxSubagents: lim.MaxSubagents})
}

// newFixtureWith is newFixture with engine options beyond the limits.
func newFixtureWith(t testing.TB, opts jsprogram.Options) *fixture {
	t.Helper()
	return openFixture(t, opts, nil, jsprogram.WorkflowTool{})
}

func openFixture(t testing.TB, opts jsprogram.Options, a *agents, wf jsprogram.WorkflowTool) *fixture {
	t.Helper()
	if a == nil {
		a = newAgents(echo)
	}
	th := testhost.New(t, &testhost.Options{Host: host.Options{Agents: a.backend()}, JS: opts})
	if _, err := jsprogram.RegisterWorkflowTool(context.Background(), th.H, wf); err != nil {
		t.Fatal(err)
	}
	return &fixture{Host: th, t: t, agents: a}
}

// run starts a program and drives it to its end.
func (f *fixture) run(js string) host.RunInfo {
	f.t.Helper()
	return f.Program(js)
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
