package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
)

// Ops are what the plain-Go workloads do outside their own logic: run a
// step, ask a question, call an agent. Agent is called from several
// goroutines at once.
type Ops struct {
	Step  func(v int) (int, error)
	Ask   func() (abi.AskAnswer, error)
	Agent func(i int, message string) (abi.AgentResult, error)
}

// Inc is the workloads' step: v+1.
func Inc(v int) (int, error) { return v + 1, nil }

// LiveOps are the floor's live effects: Inc, a question answered at once,
// and EchoAgent.
func LiveOps() Ops {
	return Ops{
		Step: Inc,
		Ask: func() (abi.AskAnswer, error) {
			return abi.AskAnswer{Status: abi.AnswerAnswered, OptionID: answer.OptionID}, nil
		},
		Agent: func(_ int, m string) (abi.AgentResult, error) { return EchoAgent(m), nil },
	}
}

// Plain is the workload as an ordinary Go function: the logic of the
// guests and of the JavaScript tool, with no sandbox, log or replay.
func Plain(in Input, ops Ops) (int, error) {
	ask := func() error {
		a, err := ops.Ask()
		if err == nil && a.Status != abi.AnswerAnswered {
			err = fmt.Errorf("question not answered: %s", a.Status)
		}
		return err
	}
	v := 0
	var err error
	switch in.Mode {
	case Steps:
		for range in.N {
			if v, err = ops.Step(v); err != nil {
				return 0, err
			}
		}
		return v, nil

	case Fanout:
		results := make([]abi.AgentResult, in.N)
		errs := make([]error, in.N)
		var wg sync.WaitGroup
		for i := range in.N {
			wg.Go(func() { results[i], errs[i] = ops.Agent(i, "m"+strconv.Itoa(i)) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		done := 0
		for _, r := range results {
			if r.Status == abi.AgentCompleted {
				done++
			}
		}
		return done, nil

	case AskStep:
		for range in.N {
			if err := ask(); err != nil {
				return 0, err
			}
			if v, err = ops.Step(v); err != nil {
				return 0, err
			}
		}
		return v, nil

	case StepsAsk:
		for range in.N {
			if v, err = ops.Step(v); err != nil {
				return 0, err
			}
		}
		for range in.Asks {
			if err := ask(); err != nil {
				return 0, err
			}
		}
		return v, nil
	}
	return 0, fmt.Errorf("unknown workload %q", in.Mode)
}

// errNoRecord is returned by ReplayOps' effects past the end of the log:
// where a live run would go on (or wait).
var errNoRecord = errors.New("not in the log")

// ReplayOps decodes the recorded outcomes of a history's steps, questions
// and agent turns, and returns the run's input with effects that answer
// from them in order, as sandflow's replay answers a guest. It is the
// floor of the replay figures: what replay would cost with no sandbox and
// no kernel, only the log's decoding. Effects past the log's end return an
// error wrapping errNoRecord.
func ReplayOps(hist *host.History) (Input, Ops, error) {
	var in Input
	type slot struct {
		op  uint32
		raw json.RawMessage
	}
	var steps, asks, agents []slot
	for _, e := range hist.Events {
		var d struct {
			Op     uint32           `json:"op"`
			Input  json.RawMessage  `json:"input"`
			Result json.RawMessage  `json:"result"`
			Answer json.RawMessage  `json:"answer"`
			Agent  json.RawMessage  `json:"agent"`
			Error  *abi.ErrorObject `json:"error"`
		}
		switch e.Kind {
		case host.EvRunCreated, host.EvStepCompleted, host.EvAskSettled, host.EvAgentSettled:
		default:
			continue
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return in, Ops{}, err
		}
		switch e.Kind {
		case host.EvRunCreated:
			if err := json.Unmarshal(d.Input, &in); err != nil {
				return in, Ops{}, err
			}
		case host.EvStepCompleted:
			steps = append(steps, slot{d.Op, d.Result})
		case host.EvAskSettled:
			asks = append(asks, slot{d.Op, d.Answer})
		case host.EvAgentSettled:
			agents = append(agents, slot{d.Op, d.Agent})
		}
	}
	// Turns settle in any order; the workload numbers them as it sent them.
	slices.SortFunc(agents, func(a, b slot) int { return int(a.op) - int(b.op) })
	var mu sync.Mutex
	next := func(s *[]slot, what string) (json.RawMessage, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(*s) == 0 {
			return nil, fmt.Errorf("%s: %w", what, errNoRecord)
		}
		raw := (*s)[0].raw
		*s = (*s)[1:]
		return raw, nil
	}
	return in, Ops{
		Step: func(int) (int, error) {
			raw, err := next(&steps, "step")
			if err != nil {
				return 0, err
			}
			var v int
			return v, json.Unmarshal(raw, &v)
		},
		Ask: func() (abi.AskAnswer, error) {
			var a abi.AskAnswer
			raw, err := next(&asks, "question")
			if err != nil {
				return a, err
			}
			return a, json.Unmarshal(raw, &a)
		},
		Agent: func(i int, _ string) (abi.AgentResult, error) {
			var r abi.AgentResult
			if i >= len(agents) {
				return r, fmt.Errorf("agent turn %d: %w", i, errNoRecord)
			}
			return r, json.Unmarshal(agents[i].raw, &r)
		},
	}, nil
}

// PlainGreet is the greet workload as an ordinary Go function: the input
// decoded with encoding/json, the greeting encoded.
func PlainGreet(input []byte) ([]byte, error) {
	var in Input
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		Greeting string `json:"greeting"`
	}{"hello " + in.Name})
}
