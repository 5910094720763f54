package chaos

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// logOf builds a run's log from kind, data pairs.
func logOf(id, status string, kv ...string) *RunLog {
	l := &RunLog{ID: id, Status: status}
	for i := 0; i < len(kv); i += 2 {
		l.Events = append(l.Events, Event{Seq: uint64(i/2 + 1), Kind: kv[i], Data: json.RawMessage(kv[i+1])})
	}
	return l
}

// okLog is a run that ran step s1 once, had its question answered with
// nonce-1, slept, and completed.
func okLog() *RunLog {
	return logOf("r1", "completed",
		"run_created", `{"tool":"chaos"}`,
		"step_started", `{"op":1,"name":"s1","attempt":1}`,
		"step_completed", `{"op":1,"attempt":1,"result":"s1@1"}`,
		"ask_opened", `{"op":2,"askId":"ask_1"}`,
		"ask_settled", `{"op":2,"askId":"ask_1","answer":{"status":"answered","text":"nonce-1"}}`,
		"timer_set", `{"op":3}`,
		"timer_fired", `{"op":3}`,
		"run_completed", `{"result":{}}`)
}

func okAcks() []Ack {
	return []Ack{{Kind: WriteCall, RunID: "r1", Key: "r1"}, {Kind: WriteAnswer, RunID: "r1", Key: "ask_1", Nonce: "nonce-1"}}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name    string
		acks    []Ack
		log     *RunLog
		effects map[string]int
		cancel  bool
		want    []Invariant
		lost    map[WriteKind]int
	}{
		{name: "clean", acks: okAcks(), log: okLog(), effects: map[string]int{"s1": 1}},
		{
			name: "answer acked, then answered again after it was lost",
			acks: append(okAcks(), Ack{Kind: WriteAnswer, RunID: "r1", Key: "ask_1", Nonce: "nonce-0"}),
			log:  okLog(), effects: map[string]int{"s1": 1},
			want: []Invariant{InvAckedInLog}, lost: map[WriteKind]int{WriteAnswer: 1},
		},
		{
			name: "call acked, run missing",
			acks: []Ack{{Kind: WriteCall, RunID: "r1", Key: "r1"}},
			log:  &RunLog{ID: "r1", NotFound: true},
			want: []Invariant{InvAckedInLog}, lost: map[WriteKind]int{WriteCall: 1},
		},
		{
			name: "hook payload missing",
			acks: append(okAcks(), Ack{Kind: WriteHook, RunID: "r1", Key: "hook-r1", Nonce: "nonce-7"}),
			log:  okLog(), effects: map[string]int{"s1": 1},
			want: []Invariant{InvAckedInLog}, lost: map[WriteKind]int{WriteHook: 1},
		},
		{
			name: "cancel acked, run completed",
			acks: append(okAcks(), Ack{Kind: WriteCancel, RunID: "r1", Key: "r1"}),
			log:  okLog(), effects: map[string]int{"s1": 1}, cancel: true,
			want: []Invariant{InvAckedInLog}, lost: map[WriteKind]int{WriteCancel: 1},
		},
		{
			name: "agent turn completed, lost",
			acks: append(okAcks(), Ack{Kind: WriteAgentTurn, RunID: "r1", Key: "r1:4", Nonce: "nonce-9"}),
			log: func() *RunLog {
				l := okLog()
				l.Events = slices.Insert(l.Events, 7, Event{Seq: 98, Kind: "agent_settled", Data: json.RawMessage(`{"op":4,"agent":{"status":"completed","reply":"nonce-8"}}`)})
				return l
			}(),
			effects: map[string]int{"s1": 1},
			want:    []Invariant{InvAckedInLog}, lost: map[WriteKind]int{WriteAgentTurn: 1},
		},
		{
			name: "agent turn completed, superseded by the harness's cancel",
			acks: append(okAcks(), Ack{Kind: WriteAgentTurn, RunID: "r1", Key: "r1:4", Nonce: "nonce-9"}),
			log: func() *RunLog {
				l := okLog()
				l.Status = "cancelled"
				l.Events[len(l.Events)-1].Kind = "run_cancelled"
				l.Events = slices.Insert(l.Events, 7, Event{Seq: 98, Kind: "agent_settled", Data: json.RawMessage(`{"op":4,"agent":{"status":"cancelled"}}`)})
				return l
			}(),
			effects: map[string]int{"s1": 1}, cancel: true,
		},
		{
			name: "agent turn completed and recorded",
			acks: append(okAcks(), Ack{Kind: WriteAgentTurn, RunID: "r1", Key: "r1:4", Nonce: "nonce-9"}),
			log: func() *RunLog {
				l := okLog()
				l.Events = slices.Insert(l.Events, 7, Event{Seq: 98, Kind: "agent_settled", Data: json.RawMessage(`{"op":4,"agent":{"status":"completed","reply":"nonce-9"}}`)})
				return l
			}(),
			effects: map[string]int{"s1": 1},
		},
		{
			name: "step ran twice, one attempt recorded",
			acks: okAcks(), log: okLog(), effects: map[string]int{"s1": 2},
			want: []Invariant{InvEffectsWithinAttempts},
		},
		{
			name: "step ran twice, two attempts recorded",
			acks: okAcks(),
			log: logOf("r1", "completed",
				"run_created", `{}`,
				"step_started", `{"op":1,"name":"s1","attempt":1}`,
				"step_started", `{"op":1,"name":"s1","attempt":2}`,
				"step_completed", `{"op":1,"attempt":2}`,
				"ask_settled", `{"op":2,"askId":"ask_1","answer":{"status":"answered","text":"nonce-1"}}`,
				"run_completed", `{}`),
			effects: map[string]int{"s1": 2},
		},
		{
			name: "completed step that never ran",
			acks: okAcks(), log: okLog(),
			want: []Invariant{InvEffectOfCompletedStep},
		},
		{
			name: "timer fired twice",
			acks: okAcks(),
			log: func() *RunLog {
				l := okLog()
				l.Events = slices.Insert(l.Events, 7, Event{Seq: 99, Kind: "timer_fired", Data: json.RawMessage(`{"op":3}`)})
				return l
			}(),
			effects: map[string]int{"s1": 1},
			want:    []Invariant{InvTimerOnce},
		},
		{
			name: "ended twice",
			acks: okAcks(),
			log: func() *RunLog {
				l := okLog()
				l.Events = append(l.Events, Event{Seq: 100, Kind: "run_completed", Data: json.RawMessage(`{}`)})
				return l
			}(),
			effects: map[string]int{"s1": 1},
			want:    []Invariant{InvEndedOnce},
		},
		{
			name: "cancelled with no cancel sent",
			acks: okAcks(),
			log: func() *RunLog {
				l := okLog()
				l.Status, l.Events[len(l.Events)-1].Kind = "cancelled", "run_cancelled"
				return l
			}(),
			effects: map[string]int{"s1": 1},
			want:    []Invariant{InvEndedOnce},
		},
		{
			name: "still waiting at the end",
			acks: okAcks()[:1],
			log: logOf("r1", "waiting", "run_created", `{}`,
				"step_started", `{"op":1,"name":"s1","attempt":1}`,
				"step_completed", `{"op":1,"attempt":1}`,
				"ask_opened", `{"op":2,"askId":"ask_1"}`),
			effects: map[string]int{"s1": 1},
			want:    []Invariant{InvResumable},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := Evidence{Acks: c.acks, Runs: map[string]*RunLog{"r1": c.log}, CancelSent: map[string]bool{"r1": c.cancel},
				Effects: Effects{}}
			if c.effects != nil {
				ev.Effects["r1"] = c.effects
			}
			var r Report
			Check(ev, &r)
			if got := r.Failed(); !slices.Equal(got, c.want) {
				t.Errorf("failed invariants %v, want %v; findings %v", got, c.want, r.Findings)
			}
			for _, f := range r.Findings {
				if f.RunID != "r1" {
					t.Errorf("finding %v names run %q, want r1", f, f.RunID)
				}
			}
			if total(r.Lost) != total(c.lost) {
				t.Errorf("lost %v, want %v", r.Lost, c.lost)
			}
			for k, n := range c.lost {
				if r.Lost[k] != n {
					t.Errorf("lost %v, want %v", r.Lost, c.lost)
				}
			}
			if r.Acked[WriteCall] != 1 {
				t.Errorf("acked %v, want one call", r.Acked)
			}
		})
	}
}

// TestCheckCountsInterruptedAttempts: an attempt started and never
// ended, followed by a later one, is counted as interrupted.
func TestCheckCountsInterruptedAttempts(t *testing.T) {
	l := logOf("r1", "completed", "run_created", `{}`,
		"step_started", `{"op":1,"name":"s1","attempt":1}`,
		"step_started", `{"op":1,"name":"s1","attempt":2}`,
		"step_failed", `{"op":1,"attempt":2,"retryAt":"2026-01-01T00:00:00Z"}`,
		"step_started", `{"op":1,"name":"s1","attempt":3}`,
		"step_completed", `{"op":1,"attempt":3}`,
		"run_completed", `{}`)
	var r Report
	Check(Evidence{Runs: map[string]*RunLog{"r1": l}, Effects: Effects{"r1": {"s1": 3}}}, &r)
	if len(r.Findings) != 0 {
		t.Errorf("findings %v, want none", r.Findings)
	}
	if r.StepAttempts != 3 || r.InterruptedAttempts != 1 || r.SideEffects != 3 {
		t.Errorf("attempts %d, interrupted %d, side effects %d; want 3, 1, 3", r.StepAttempts, r.InterruptedAttempts, r.SideEffects)
	}
}

// An attempt the host recorded as cut off (step_failed with a
// StepInterruptedError) is counted as interrupted; a plain failure is not.
func TestCheckCountsRecordedInterruptions(t *testing.T) {
	l := logOf("r1", "completed", "run_created", `{}`,
		"step_started", `{"op":1,"name":"s1","attempt":1}`,
		"step_failed", `{"op":1,"attempt":1,"error":{"type":"StepInterruptedError"},"retryAt":"2026-01-01T00:00:00Z"}`,
		"step_started", `{"op":1,"name":"s1","attempt":2}`,
		"step_failed", `{"op":1,"attempt":2,"error":{"type":"Error"},"retryAt":"2026-01-01T00:00:01Z"}`,
		"step_started", `{"op":1,"name":"s1","attempt":3}`,
		"step_completed", `{"op":1,"attempt":3}`,
		"run_completed", `{}`)
	var r Report
	Check(Evidence{Runs: map[string]*RunLog{"r1": l}, Effects: Effects{"r1": {"s1": 3}}}, &r)
	if len(r.Findings) != 0 {
		t.Errorf("findings %v, want none", r.Findings)
	}
	if r.StepAttempts != 3 || r.InterruptedAttempts != 1 {
		t.Errorf("attempts %d, interrupted %d; want 3, 1", r.StepAttempts, r.InterruptedAttempts)
	}
}

func TestSummaryNamesTheCounts(t *testing.T) {
	r := Report{Seed: 7, Runs: 2, Kills: 3, Acked: map[WriteKind]int{WriteCall: 2, WriteAnswer: 1}, Lost: map[WriteKind]int{WriteAnswer: 1},
		StepAttempts: 4, InterruptedAttempts: 1, SideEffects: 5, Findings: []Finding{{InvAckedInLog, "r1", "x"}}}
	want := "chaos: seed=7 runs=2 kills=3 acked=3 (answer=1,call=2) lost=1 (answer=1) superseded=0 step_attempts=4 interrupted_attempts=1 side_effects=5 findings=1"
	if got := r.Summary(); got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}

func TestPlansDependOnlyOnTheSeed(t *testing.T) {
	a, b := plans(42, 30, "http://c", 1e9), plans(42, 30, "http://c", 1e9)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatal("two plans from seed 42 differ")
	}
	c, _ := json.Marshal(plans(43, 30, "http://c", 1e9))
	if string(c) == string(ja) {
		t.Fatal("seeds 42 and 43 made the same plans")
	}
	tools := map[string]int{}
	for _, p := range a {
		tools[p.Tool]++
	}
	if tools["chaos"] == 0 || tools["workflow"] == 0 {
		t.Errorf("30 plans call %v; want both tools", tools)
	}
}

func TestParseStream(t *testing.T) {
	stream := "id: 1\nevent: run_created\ndata: {\"seq\":1,\"time\":\"2026-01-01T00:00:00Z\",\"kind\":\"run_created\",\"data\":{\"tool\":\"chaos\"}}\n\n" +
		": keep-alive\n\n" +
		"id: 2\nevent: run_completed\ndata: {\"seq\":2,\"time\":\"2026-01-01T00:00:00Z\",\"kind\":\"run_completed\",\"data\":{}}\n\n" +
		"event: end\ndata: {\"status\":\"completed\"}\n\n"
	l, err := parseStream("r1", strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if l.Status != "completed" || len(l.Events) != 2 || l.Events[1].Seq != 2 || l.Events[0].Kind != "run_created" || !strings.Contains(string(l.Events[0].Data), "chaos") {
		t.Errorf("parsed %+v", l)
	}
	// A stream cut before its end event is not a whole log.
	if _, err := parseStream("r1", strings.NewReader(stream[:len(stream)-40])); err == nil {
		t.Error("a stream without its end event parsed")
	}
}
