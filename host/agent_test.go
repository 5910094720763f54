package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// scripted is an agent backend whose turns wait until released, and which
// counts how often each turn id was sent.
type scripted struct {
	mu      sync.Mutex
	sent    map[string]int
	release chan struct{}
}

func newScripted() *scripted {
	return &scripted{sent: map[string]int{}, release: make(chan struct{})}
}

func (s *scripted) backend() host.AgentBackend {
	return host.AgentFunc{
		List: []host.AgentInfo{{Name: "echo", Description: "repeats the message"}},
		Fn: func(ctx context.Context, t host.AgentTurn) (abi.AgentResult, error) {
			s.mu.Lock()
			s.sent[t.TurnID]++
			s.mu.Unlock()
			select {
			case <-s.release:
			case <-ctx.Done():
				return abi.AgentResult{}, ctx.Err()
			}
			if len(t.OutputSchema) > 0 {
				return abi.AgentResult{Status: abi.AgentCompleted, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, len(t.Message)))}, nil
			}
			return abi.AgentResult{Status: abi.AgentCompleted, Reply: "echo: " + t.Message}, nil
		},
	}
}

func (s *scripted) turns() (total, distinct int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.sent {
		total += n
	}
	return total, len(s.sent)
}

// A run fans out to agent turns and waits on them, holding no activation;
// a restart while they are out sends the same turns again under the same
// turn ids, and the run completes with each reply once.
func TestAgentTurnsAcrossRestart(t *testing.T) {
	s := newScripted()
	k := newKitchen(t, &host.Options{Agents: s.backend()})
	ri, err := k.h.Start(context.Background(), "kitchen", json.RawMessage(`{"mode":"agents","n":4,"token":"echo","text":"hi"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	driven := make(chan error, 1)
	go func() {
		_, err := k.h.Drive(context.Background(), ri.ID)
		driven <- err
	}()
	waitFor(t, func() bool { n, _ := s.turns(); return n == 4 })
	info, err := k.h.Run(context.Background(), ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != store.StatusRunning {
		t.Fatalf("status with turns out = %s, want running", info.Status)
	}
	k.restart() // the turns in flight are cut off
	if err := <-driven; !errors.Is(err, host.ErrClosed) {
		t.Fatalf("Drive cut off by Close: %v, want ErrClosed", err)
	}
	close(s.release)
	if err := k.h.Recover(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// Recover drives the run in the background.
	waitFor(t, func() bool {
		info, err = k.h.Run(context.Background(), ri.ID)
		return err != nil || info.Status.Terminal()
	})
	if err != nil {
		t.Fatal(err)
	}
	got := result[[]abi.AgentResult](t, info)
	if len(got) != 4 {
		t.Fatalf("got %d results, want 4: %s", len(got), info.Result)
	}
	for i, r := range got {
		if r.Status != abi.AgentCompleted {
			t.Fatalf("turn %d: %+v", i, r)
		}
		if i%2 == 0 && r.Reply != fmt.Sprintf("echo: hi #%d", i) {
			t.Errorf("turn %d reply = %q", i, r.Reply)
		}
		if i%2 == 1 && string(r.Data) != `{"n":5}` {
			t.Errorf("turn %d data = %s", i, r.Data)
		}
	}
	total, distinct := s.turns()
	if distinct != 4 || total != 8 {
		t.Errorf("turns sent %d times over %d ids, want 8 over 4 (each once before the restart, once after)", total, distinct)
	}
	// A replay of the finished run never sends a turn again.
	rep, err := k.h.CheckReplay(context.Background(), exportHistory(t, k.fixture, ri.ID), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.End != "completed" || rep.Ops != rep.RecordedOps {
		t.Errorf("replay report = %+v", rep)
	}
	if n, _ := s.turns(); n != 8 {
		t.Errorf("replay sent turns: %d", n)
	}
}

// Failed turns fulfil with a typed error code: an unknown agent, a reply
// over the limit, structured output that misses the schema, a timeout,
// and a host without agents.
func TestAgentTurnFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  host.Options
		agent string
		code  string
	}{
		{"unknown agent", host.Options{Agents: host.AgentFunc{List: []host.AgentInfo{{Name: "echo"}}}}, "nobody", abi.AgentErrUnavailable},
		{"no agents", host.Options{}, "echo", abi.AgentErrUnavailable},
		{"reply too large", host.Options{AgentReplyBytes: 10, Agents: replying(abi.AgentResult{Status: abi.AgentCompleted, Reply: strings.Repeat("x", 11)})}, "echo", abi.AgentErrReplyTooLarge},
		{"output misses schema", host.Options{Agents: replying(abi.AgentResult{Status: abi.AgentCompleted, Reply: "r", Data: json.RawMessage(`{"n":"one"}`)})}, "echo", abi.AgentErrBadOutput},
		{"turn failed", host.Options{Agents: replying(abi.AgentResult{Status: abi.AgentFailed, Error: &abi.AgentError{Message: "model refused"}})}, "echo", abi.AgentErrFailed},
		{"timeout", host.Options{AgentTimeout: 50 * time.Millisecond, Agents: host.AgentFunc{List: []host.AgentInfo{{Name: "echo"}}, Fn: func(ctx context.Context, _ host.AgentTurn) (abi.AgentResult, error) {
			<-ctx.Done()
			return abi.AgentResult{}, ctx.Err()
		}}}, "echo", abi.AgentErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKitchen(t, &tc.opts)
			ri := k.run(fmt.Sprintf(`{"mode":"agents","n":2,"token":%q,"text":"x"}`, tc.agent))
			got := result[[]abi.AgentResult](t, ri)
			// Turn 1 asks for structured output; turn 0 does not.
			r := got[0]
			if tc.code == abi.AgentErrBadOutput {
				r = got[1]
			}
			if r.Status != abi.AgentFailed || r.Error == nil || r.Error.Code != tc.code {
				t.Fatalf("result = %+v, want failed with code %s", r, tc.code)
			}
			if r.Error.Message == "" {
				t.Error("no message")
			}
		})
	}
}

func replying(res abi.AgentResult) host.AgentBackend {
	return host.AgentFunc{List: []host.AgentInfo{{Name: "echo"}}, Fn: func(context.Context, host.AgentTurn) (abi.AgentResult, error) {
		return res, nil
	}}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
