package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// WriteKind is a kind of write the harness sends and the server
// acknowledges.
type WriteKind string

// The writes the harness sends.
const (
	WriteCall      WriteKind = "call"       // POST /v1/tools/{name}/calls?wait=0&runId=…
	WriteAnswer    WriteKind = "answer"     // POST /v1/asks/{id}/answer?wait=0
	WriteHook      WriteKind = "hook"       // POST /v1/hooks/{token}?wait=0
	WriteWebhook   WriteKind = "webhook"    // a request to a webhook URL
	WriteAgentTurn WriteKind = "agent_turn" // POST /v1/agent-turns/{id}/complete
	WriteCancel    WriteKind = "cancel"     // POST /v1/runs/{id}/cancel
)

// Ack is a write the server acknowledged with a 2xx.
type Ack struct {
	Kind  WriteKind
	RunID string
	// Key is what the write went to: the question's id, the hook's token,
	// the webhook's URL, the turn's id.
	Key string
	// Nonce is a string the write carried, unique to it, that the run's
	// log must hold once the write is recorded.
	Nonce  string
	Status int
	// Generation is the server process (1 for the first start) that
	// acknowledged it.
	Generation int
	At         time.Time
}

// Event is one entry of a run's log, as sandflow runs show --json prints
// it.
type Event struct {
	Seq  uint64
	Kind string
	Data json.RawMessage
}

// RunLog is a run read back after the final stop.
type RunLog struct {
	ID     string
	Status string
	Events []Event
	// NotFound: the store has no such run.
	NotFound bool
	// Err is why it could not be read, NotFound aside.
	Err error
}

// Effects counts step executions by run id and step name, as the counter
// server saw them.
type Effects map[string]map[string]int

// Evidence is what the invariants are checked on.
type Evidence struct {
	Acks []Ack
	// Runs are every run the harness drove, by id.
	Runs map[string]*RunLog
	// CancelSent holds the runs the harness sent a cancel to (acknowledged
	// or not): those may end cancelled.
	CancelSent map[string]bool
	Effects    Effects
}

// Event kinds the checks read. They are the names of the history format.
const (
	evRunCreated    = "run_created"
	evStepStarted   = "step_started"
	evStepCompleted = "step_completed"
	evStepFailed    = "step_failed"
	evTimerFired    = "timer_fired"
	evAskSettled    = "ask_settled"
	evHookReceived  = "hook_received"
	evAgentSettled  = "agent_settled"
	evRunCompleted  = "run_completed"
	evRunFailed     = "run_failed"
	evRunCancelled  = "run_cancelled"
)

// evFields are the fields of an event's data the checks use.
type evFields struct {
	Op      uint32 `json:"op"`
	Name    string `json:"name"`
	Attempt int    `json:"attempt"`
	AskID   string `json:"askId"`
	Answer  *struct {
		Status string `json:"status"`
		Text   string `json:"text"`
	} `json:"answer"`
	Agent *struct {
		Status string `json:"status"`
		Reply  string `json:"reply"`
	} `json:"agent"`
	Error *struct {
		Type string `json:"type"`
	} `json:"error"`
}

func fields(e Event) evFields {
	var f evFields
	_ = json.Unmarshal(e.Data, &f) // a field the event lacks stays zero
	return f
}

// stepOp is what one run's log says of one step op.
type stepOp struct {
	pos      uint32
	name     string
	attempts int // the highest attempt number the log records
	started  map[int]bool
	ended    map[int]bool
	// interrupted are the attempts the log records as cut off
	// (step_failed with a StepInterruptedError).
	interrupted map[int]bool
	completed   bool
}

func stepOps(l *RunLog) map[uint32]*stepOp {
	ops := map[uint32]*stepOp{}
	for _, e := range l.Events {
		f := fields(e)
		o := ops[f.Op]
		if e.Kind == evStepStarted && o == nil {
			o = &stepOp{pos: f.Op, name: f.Name, started: map[int]bool{}, ended: map[int]bool{}, interrupted: map[int]bool{}}
			ops[f.Op] = o
		}
		if o == nil {
			continue
		}
		// Any event of the op that names an attempt counts it, whatever
		// its kind: the log may record an attempt in more ways than these.
		o.attempts = max(o.attempts, f.Attempt)
		switch e.Kind {
		case evStepStarted:
			o.started[max(f.Attempt, 1)] = true
		case evStepCompleted:
			o.ended[f.Attempt] = true
			o.completed = true
		case evStepFailed:
			o.ended[f.Attempt] = true
			if f.Error != nil && f.Error.Type == stepInterrupted {
				o.interrupted[f.Attempt] = true
			}
		}
	}
	return ops
}

// stepInterrupted is the error type of an attempt the host recorded as
// cut off (by a crash, a stop, a cancellation).
const stepInterrupted = "StepInterruptedError"

func terminal(kind string) bool {
	return kind == evRunCompleted || kind == evRunFailed || kind == evRunCancelled
}

// Check checks the invariants on ev and adds what it finds, and its counts,
// to r.
func Check(ev Evidence, r *Report) {
	if r.Acked == nil {
		r.Acked = map[WriteKind]int{}
	}
	if r.Lost == nil {
		r.Lost = map[WriteKind]int{}
	}
	ids := make([]string, 0, len(ev.Runs))
	for id := range ev.Runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)

	for _, a := range ev.Acks {
		r.Acked[a.Kind]++
		ok, why := ackInLog(a, ev.Runs[a.RunID])
		if !ok && ev.CancelSent[a.RunID] && cancelledOp(a, ev.Runs[a.RunID]) {
			// The harness cancelled the run meanwhile, and the cancel
			// settled the question or turn first: superseded, not lost.
			r.Superseded++
			continue
		}
		if !ok {
			r.Lost[a.Kind]++
			r.Findings = append(r.Findings, Finding{InvAckedInLog, a.RunID,
				fmt.Sprintf("%s %s acknowledged %d by server %d at %s is not in the log: %s",
					a.Kind, a.Key, a.Status, a.Generation, a.At.Format("15:04:05.000"), why)})
		}
	}

	for _, id := range ids {
		l := ev.Runs[id]
		if l.NotFound || l.Err != nil {
			if l.Err != nil {
				r.Findings = append(r.Findings, Finding{InvLogReadable, id, l.Err.Error()})
			}
			continue // a run never created is judged by its call's ack
		}
		checkEnds(id, l, ev.CancelSent[id], r)
		checkTimers(id, l, r)
		checkSteps(id, l, ev.Effects[id], r)
	}
	for run, steps := range ev.Effects {
		for _, n := range steps {
			r.SideEffects += n
		}
		if _, ok := ev.Runs[run]; !ok {
			r.Findings = append(r.Findings, Finding{InvEffectsWithinAttempts, run, "steps ran for a run the harness did not drive"})
		}
	}
}

// cancelledOp reports whether the question or agent turn a went to was
// settled as cancelled.
func cancelledOp(a Ack, l *RunLog) bool {
	if l == nil || (a.Kind != WriteAnswer && a.Kind != WriteAgentTurn) {
		return false
	}
	pos, isTurn := turnOp(a)
	for _, e := range l.Events {
		f := fields(e)
		switch {
		case a.Kind == WriteAnswer && e.Kind == evAskSettled && f.AskID == a.Key && f.Answer != nil:
			return f.Answer.Status == "cancelled"
		case isTurn && e.Kind == evAgentSettled && f.Op == pos:
			return f.Agent != nil && f.Agent.Status == "cancelled"
		}
	}
	return false
}

// turnOp is the op position of an agent turn's work item, whose id is
// <run>:<position>.
func turnOp(a Ack) (uint32, bool) {
	if a.Kind != WriteAgentTurn {
		return 0, false
	}
	i := strings.LastIndexByte(a.Key, ':')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(a.Key[i+1:], 10, 32)
	return uint32(n), err == nil
}

// ackInLog reports whether the write a acknowledged is in the run's log,
// and if not, why not.
func ackInLog(a Ack, l *RunLog) (bool, string) {
	switch {
	case l == nil:
		return false, "the harness has no log of the run"
	case l.NotFound:
		return false, "the store has no such run"
	case l.Err != nil:
		return false, "its log could not be read: " + l.Err.Error()
	}
	for _, e := range l.Events {
		switch a.Kind {
		case WriteCall:
			if e.Kind == evRunCreated {
				return true, ""
			}
		case WriteAnswer:
			if e.Kind == evAskSettled {
				if f := fields(e); f.AskID == a.Key && f.Answer != nil && f.Answer.Text == a.Nonce {
					return true, ""
				}
			}
		case WriteHook, WriteWebhook:
			if e.Kind == evHookReceived && bytes.Contains(e.Data, []byte(a.Nonce)) {
				return true, ""
			}
		case WriteAgentTurn:
			if e.Kind == evAgentSettled && bytes.Contains(e.Data, []byte(a.Nonce)) {
				return true, ""
			}
		case WriteCancel:
			if e.Kind == evRunCancelled {
				return true, ""
			}
		}
	}
	switch a.Kind {
	case WriteAnswer:
		for _, e := range l.Events {
			if f := fields(e); e.Kind == evAskSettled && f.AskID == a.Key && f.Answer != nil {
				return false, fmt.Sprintf("the question settled with another answer (%s %q)", f.Answer.Status, f.Answer.Text)
			}
		}
		return false, "the question never settled"
	case WriteAgentTurn:
		if pos, ok := turnOp(a); ok {
			for _, e := range l.Events {
				if f := fields(e); e.Kind == evAgentSettled && f.Op == pos && f.Agent != nil {
					return false, fmt.Sprintf("the turn settled otherwise (%s %q)", f.Agent.Status, f.Agent.Reply)
				}
			}
			return false, "the turn never settled"
		}
	case WriteCancel:
		return false, "the run ended " + l.Status
	}
	return false, fmt.Sprintf("no event carries %q", a.Nonce)
}

func checkEnds(id string, l *RunLog, cancelSent bool, r *Report) {
	var ends []Event
	for _, e := range l.Events {
		if terminal(e.Kind) {
			ends = append(ends, e)
		}
	}
	switch {
	case len(ends) == 0:
		r.Findings = append(r.Findings, Finding{InvResumable, id,
			fmt.Sprintf("still %s after the final restart (%d events, the last %s)", l.Status, len(l.Events), lastKind(l))})
	case len(ends) > 1:
		seqs := make([]uint64, len(ends))
		for i, e := range ends {
			seqs[i] = e.Seq
		}
		r.Findings = append(r.Findings, Finding{InvEndedOnce, id, fmt.Sprintf("ended %d times, at events %v", len(ends), seqs)})
	case ends[0].Kind == evRunFailed:
		r.Findings = append(r.Findings, Finding{InvEndedOnce, id, "failed: " + string(ends[0].Data)})
	case ends[0].Kind == evRunCancelled && !cancelSent:
		r.Findings = append(r.Findings, Finding{InvEndedOnce, id, "cancelled, but the harness sent no cancel: " + string(ends[0].Data)})
	}
}

func lastKind(l *RunLog) string {
	if len(l.Events) == 0 {
		return "none"
	}
	return l.Events[len(l.Events)-1].Kind
}

func checkTimers(id string, l *RunLog, r *Report) {
	fired := map[uint32][]uint64{}
	for _, e := range l.Events {
		if e.Kind == evTimerFired {
			f := fields(e)
			fired[f.Op] = append(fired[f.Op], e.Seq)
		}
	}
	for op, seqs := range fired {
		if len(seqs) > 1 {
			r.Findings = append(r.Findings, Finding{InvTimerOnce, id, fmt.Sprintf("the timer of op %d fired %d times, at events %v", op, len(seqs), seqs)})
		}
	}
}

func checkSteps(id string, l *RunLog, effects map[string]int, r *Report) {
	ops := stepOps(l)
	poss := make([]uint32, 0, len(ops))
	for p := range ops {
		poss = append(poss, p)
	}
	sort.Slice(poss, func(i, j int) bool { return poss[i] < poss[j] })
	runEnded := len(l.Events) > 0 && terminal(l.Events[len(l.Events)-1].Kind)
	attemptsOf := map[string]int{}
	for _, p := range poss {
		o := ops[p]
		r.StepAttempts += o.attempts
		attemptsOf[o.name] += o.attempts
		for n := range o.started {
			// An attempt that never ended is interrupted once something
			// came after it: a later attempt, the op's result, the run's end.
			if o.interrupted[n] || !o.ended[n] && (n < o.attempts || o.completed || runEnded) {
				r.InterruptedAttempts++
			}
		}
		if o.completed && effects[o.name] == 0 {
			r.Findings = append(r.Findings, Finding{InvEffectOfCompletedStep, id,
				fmt.Sprintf("step %s (op %d) is recorded as completed, but the counter saw it run no time", o.name, p)})
		}
	}
	names := make([]string, 0, len(effects))
	for n := range effects {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if effects[n] > attemptsOf[n] {
			r.Findings = append(r.Findings, Finding{InvEffectsWithinAttempts, id,
				fmt.Sprintf("step %s ran %d times; the log records %d attempts", n, effects[n], attemptsOf[n])})
		}
	}
}
