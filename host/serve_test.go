package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/store"
)

// The release-plan serve tool as a Go guest: the first call is
// answered and the run waits on receive (the task is idle); a call sent
// to the run is received and answered, across a restart, with each
// revision's side effect run once; a call past the end is refused; the
// history replays op for op.
func TestServeGoGuest(t *testing.T) {
	f := newFixture(t, nil)
	f.add("examples/release-plan")
	ctx := context.Background()

	ri := f.call("release-plan", `{"request":"draft 2.0"}`)
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].Kind != "receive" || ri.Working() {
		t.Fatalf("after the first call: %s %+v", ri.Status, ri.Waiting)
	}
	if len(ri.Calls) != 1 || ri.Calls[0].Status != "completed" || ri.Calls[0].CallID != ri.ID ||
		string(ri.Calls[0].Output) != `{"revision":1,"requests":["draft 2.0"],"steps":["freeze the release branch","run the release checklist","tag and publish"]}` {
		t.Fatalf("the first call: %+v", ri.Calls)
	}

	f.restart()
	if idx, err := f.h.SendCall(ctx, ri.ID, "c-1", json.RawMessage(`{"request":"add a canary"}`)); err != nil || idx != 1 {
		t.Fatalf("SendCall: %d %v", idx, err)
	}
	ri, err := f.h.Drive(ctx, ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ri.Calls) != 2 || ri.Calls[1].Status != "completed" || ri.Calls[1].CallID != "c-1" ||
		string(ri.Calls[1].Output) != `{"revision":2,"requests":["draft 2.0","add a canary"],"steps":["freeze the release branch","run the release checklist","a canary","tag and publish"]}` {
		t.Fatalf("the second call: %+v", ri.Calls)
	}
	evs, err := f.h.Events(ctx, ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Kind]++
		if e.Kind == host.EvOutput {
			out.Write(e.Data)
		}
	}
	for _, want := range []string{`revision 1 for \"draft 2.0\"`, `revision 2 for \"add a canary\"`} {
		if n := strings.Count(out.String(), want); n != 1 {
			t.Errorf("%s ran %d times", want, n)
		}
	}
	if kinds[host.EvCallReceived] != 1 || kinds[host.EvReceive] != 3 || kinds[host.EvReplied] != 2 {
		t.Errorf("events: %v", kinds)
	}

	var ie *host.InputError
	if _, err := f.h.SendCall(ctx, ri.ID, "", json.RawMessage(`{"request":""}`)); !errors.As(err, &ie) {
		t.Errorf("an input the schema refuses: %v", err)
	}
	if _, err := f.h.Cancel(ctx, ri.ID, "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.h.SendCall(ctx, ri.ID, "", json.RawMessage(`{"request":"more"}`)); !errors.Is(err, host.ErrRunEnded) {
		t.Errorf("a call after the end: %v", err)
	}
	var buf strings.Builder
	if err := f.h.ExportHistory(ctx, ri.ID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := f.h.CheckReplay(ctx, hist, nil); err != nil || rep.Ops != rep.RecordedOps || rep.Ops != 7 {
		t.Errorf("replay: %+v %v", rep, err)
	}
}

// A history whose reply claims more answered calls than were waiting is
// refused as a bad history.
func TestServeBadHistory(t *testing.T) {
	f := newFixture(t, nil)
	f.add("examples/release-plan")
	ctx := context.Background()
	ri := f.call("release-plan", `{"request":"draft"}`)
	var buf strings.Builder
	if err := f.h.ExportHistory(ctx, ri.ID, &buf); err != nil {
		t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	damaged := false
	for i, e := range hist.Events {
		if e.Kind == host.EvReplied {
			var d map[string]any
			if err := json.Unmarshal(e.Data, &d); err != nil || d["answered"] != 1.0 {
				t.Fatalf("the reply event: %s %v", e.Data, err)
			}
			d["answered"] = 2
			hist.Events[i].Data, _ = json.Marshal(d)
			damaged = true
		}
	}
	if !damaged {
		t.Fatal("no reply to damage in the history")
	}
	_, err = f.h.CheckReplay(ctx, hist, nil)
	if !errors.Is(err, host.ErrBadHistory) {
		t.Errorf("a reply answering calls that were not waiting: %v", err)
	}
}

// SendCall records a call while the run's work runs: a serve body that
// sends an agent turn for a call holds the run while the turn lasts, and a
// call sent meanwhile is recorded and returns at once (within its 1s
// deadline) instead of waiting for the turn to end. The host keeps calls
// that arrive while the body is not waiting; a session's call by taskId is
// a receipt the model gets at once, so a blocked SendCall would stall the
// whole session. Once recorded, the call is answered.
func TestSendCallDuringAnAgentTurnReturnsAtOnce(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan string, 16)
	agents := host.AgentFunc{List: []host.AgentInfo{{Name: "slow"}}, Fn: func(ctx context.Context, tr host.AgentTurn) (abi.AgentResult, error) {
		started <- tr.TurnID
		select {
		case <-gate:
		case <-ctx.Done():
			return abi.AgentResult{}, ctx.Err()
		}
		return abi.AgentResult{Status: abi.AgentCompleted, Reply: "ok"}, nil
	}}
	f := newScriptFixture(t, &host.Options{Agents: agents}, map[string]scriptGuest{
		"serve-agent": func(g *sg) {
			for {
				c := g.receive()
				g.value(g.op(abi.OpAgent, "slow", []byte(`{"message":"work on it"}`)))
				g.reply(json.RawMessage(c.Input))
			}
		},
	})
	f.addScript("serve-agent", host.EntryServe)
	ctx := context.Background()
	ri, err := f.h.Start(ctx, "serve-agent", json.RawMessage(`{"n":0}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	driven := make(chan error, 1)
	go func() { _, err := f.h.Drive(ctx, ri.ID); driven <- err }()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent turn never started")
	}
	sent := make(chan error, 1)
	sendStart := time.Now()
	go func() {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := f.h.SendCall(cctx, ri.ID, "c1", json.RawMessage(`{"n":1}`))
		sent <- err
	}()
	got := false
	select {
	case err := <-sent:
		got = true
		if err != nil {
			t.Errorf("SendCall while the turn runs: %v after %s", err, time.Since(sendStart).Round(time.Millisecond))
		}
	case <-time.After(3 * time.Second):
		t.Errorf("SendCall (with a 1s deadline) still blocked after 3s while the run's agent turn runs")
	}
	close(gate)
	if err := <-driven; err != nil {
		t.Fatal(err)
	}
	if !got {
		<-sent
	}
	// Whatever happened, the call is answered once it is recorded.
	ri, err = f.h.Drive(ctx, ri.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ri.Calls) != 2 || ri.Calls[1].Status != "completed" || string(ri.Calls[1].Output) != `{"n":1}` {
		t.Errorf("calls %+v", ri.Calls)
	}
}

// A call sent while the body waits on receive, before the body has issued
// the next receive, and across a restart with recovery: each is answered
// in order, the history exported between SendCall and the drive replays
// to a suspension, and the whole history replays op for op.
func TestSentCallsAreAnsweredInOrderAcrossRestart(t *testing.T) {
	f := newScriptFixture(t, nil, map[string]scriptGuest{
		"echo": echoServe,
		// sleeps before each receive, so calls queue up.
		"sleepy": func(g *sg) {
			for {
				g.value(g.sleep(3_600_000))
				c := g.receive()
				g.reply(json.RawMessage(c.Input))
			}
		},
	})
	f.addScript("echo", host.EntryServe)
	f.addScript("sleepy", host.EntryServe)
	ctx := context.Background()

	ri := f.call("echo", `{"n":0}`)
	if ri.Status != store.StatusWaiting || ri.Working() || len(ri.Calls) != 1 {
		t.Fatalf("after call 0: %s working=%v %+v", ri.Status, ri.Working(), ri.Calls)
	}
	for i := 1; i <= 2; i++ {
		if _, err := f.h.SendCall(ctx, ri.ID, "", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	// Mid-stretch: the history replays to the wait on receive.
	if rep, err := f.h.CheckReplay(ctx, f.exportHistory(ri.ID), nil); err != nil || rep.End != "suspended" || rep.Ops != rep.RecordedOps {
		t.Errorf("replay before the drive: %+v %v", rep, err)
	}
	f.restart()
	if err := f.h.Recover(ctx, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		ri, _ = f.h.Run(ctx, ri.ID)
		return len(ri.Calls) == 3 && !ri.Working() && ri.Status == store.StatusWaiting
	})
	var got []string
	for _, c := range ri.Calls {
		got = append(got, c.CallID+"="+string(c.Output))
	}
	want := ri.ID + `={"n":0} ` + ri.ID + `:1={"n":1} ` + ri.ID + `:2={"n":2}`
	if strings.Join(got, " ") != want {
		t.Errorf("calls %v\nwant %s", got, want)
	}
	if rep, err := f.h.CheckReplay(ctx, f.exportHistory(ri.ID), nil); err != nil || rep.Ops != rep.RecordedOps {
		t.Errorf("replay: %+v %v", rep, err)
	}

	// Calls queued while the body sleeps are answered one by one.
	ri = f.call("sleepy", `{"n":0}`)
	if _, err := f.h.SendCall(ctx, ri.ID, "", json.RawMessage(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := f.h.FireDue(ctx, time.Now().Add(2*time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		if ri, _ = f.h.Drive(ctx, ri.ID); ri.Status != store.StatusWaiting {
			t.Fatalf("%s %+v", ri.Status, ri.Error)
		}
	}
	if len(ri.Calls) != 2 || string(ri.Calls[0].Output) != `{"n":0}` || string(ri.Calls[1].Output) != `{"n":1}` {
		t.Errorf("sleepy calls %+v", ri.Calls)
	}
}

// A history with damaged call_received, receive or replied events is
// refused with ErrBadHistory, and never panics.
func TestServeHistoriesWithDamagedCallsAreRefused(t *testing.T) {
	f := newScriptFixture(t, nil, map[string]scriptGuest{"echo": echoServe})
	f.addScript("echo", host.EntryServe)
	ctx := context.Background()
	ri := f.call("echo", `{"n":0}`)
	if _, err := f.h.SendCall(ctx, ri.ID, "c1", json.RawMessage(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if ri, _ = f.h.Drive(ctx, ri.ID); len(ri.Calls) != 2 || ri.Working() {
		t.Fatalf("%+v", ri.Calls)
	}
	base := f.exportHistory(ri.ID)
	var kinds []string
	for _, e := range base.Events {
		kinds = append(kinds, e.Kind)
	}
	t.Logf("events: %s", strings.Join(kinds, " "))
	for i, e := range base.Events {
		var b bytes.Buffer
		if err := json.Compact(&b, e.Data); err != nil {
			t.Fatal(err)
		}
		base.Events[i].Data = b.Bytes()
	}
	find := func(h *host.History, kind string, nth int) int {
		for i, e := range h.Events {
			if e.Kind == kind {
				if nth == 0 {
					return i
				}
				nth--
			}
		}
		t.Fatalf("no %s #%d", kind, nth)
		return -1
	}
	clone := func() *host.History {
		h := *base
		h.Events = append([]host.HistoryEvent(nil), base.Events...)
		return &h
	}
	setField := func(h *host.History, i int, k string, v any) {
		var d map[string]any
		_ = json.Unmarshal(h.Events[i].Data, &d)
		if v == nil {
			delete(d, k)
		} else {
			d[k] = v
		}
		h.Events[i].Data, _ = json.Marshal(d)
	}
	renumber := func(h *host.History) {
		for i := range h.Events {
			h.Events[i].Seq = uint64(i + 1)
		}
		h.Run.LastSeq = uint64(len(h.Events))
	}
	move := func(h *host.History, from, to int) {
		e := h.Events[from]
		h.Events = append(h.Events[:from], h.Events[from+1:]...)
		h.Events = append(h.Events[:to], append([]host.HistoryEvent{e}, h.Events[to:]...)...)
		renumber(h)
	}
	for _, tc := range []struct {
		name   string
		damage func(h *host.History)
	}{
		{"call index skips", func(h *host.History) { setField(h, find(h, host.EvCallReceived, 0), "index", 2) }},
		{"call index repeats call 0", func(h *host.History) { setField(h, find(h, host.EvCallReceived, 0), "index", nil) }},
		{"call index negative", func(h *host.History) { setField(h, find(h, host.EvCallReceived, 0), "index", -1) }},
		{"call index a string", func(h *host.History) { setField(h, find(h, host.EvCallReceived, 0), "index", "1") }},
		{"call input not JSON", func(h *host.History) {
			i := find(h, host.EvCallReceived, 0)
			h.Events[i].Data = json.RawMessage(strings.Replace(string(h.Events[i].Data), `"input":{"n":1}`, `"input":{n:1}`, 1))
		}},
		{"call before the run", func(h *host.History) { move(h, find(h, host.EvCallReceived, 0), 0) }},
		{"call dropped", func(h *host.History) {
			i := find(h, host.EvCallReceived, 0)
			h.Events = append(h.Events[:i], h.Events[i+1:]...)
			renumber(h)
		}},
		{"call twice", func(h *host.History) {
			i := find(h, host.EvCallReceived, 0)
			h.Events = append(h.Events[:i+1], h.Events[i:]...)
			renumber(h)
		}},
		{"reply answers too many", func(h *host.History) { setField(h, find(h, host.EvReplied, 1), "answered", 2) }},
		{"reply answers none", func(h *host.History) { setField(h, find(h, host.EvReplied, 1), "answered", nil) }},
		{"reply answers a negative count", func(h *host.History) { setField(h, find(h, host.EvReplied, 0), "answered", -1) }},
		{"reply at a taken position", func(h *host.History) { setField(h, find(h, host.EvReplied, 1), "op", 1) }},
		{"reply payload not JSON", func(h *host.History) {
			i := find(h, host.EvReplied, 0)
			h.Events[i].Data = json.RawMessage(strings.Replace(string(h.Events[i].Data), `"payload":{"n":0}`, `"payload":{n:0}`, 1))
		}},
		{"receive at a taken position", func(h *host.History) { setField(h, find(h, host.EvReceive, 1), "op", 1) }},
		{"receive at position 0", func(h *host.History) { setField(h, find(h, host.EvReceive, 0), "op", 0) }},
		{"receive before any activation", func(h *host.History) { move(h, find(h, host.EvReceive, 0), 1) }},
		{"reply without its receive", func(h *host.History) {
			i := find(h, host.EvReceive, 0)
			h.Events = append(h.Events[:i], h.Events[i+1:]...)
			renumber(h)
		}},
		// A reply that counts a call recorded after its own activation
		// began is impossible live (calls are recorded between
		// activations): the history is refused, not blamed on the module
		// with a NonDeterminismError.
		{"call moved past the activation that read it", func(h *host.History) { move(h, find(h, host.EvCallReceived, 0), find(h, host.EvRunResumed, 1)) }},
		// call_received events the host could never write (no callId; an
		// input that is not a JSON object, which SendCall's schema check
		// refuses) are refused, so no guest replays with an input its
		// schema forbids.
		{"call with an empty id", func(h *host.History) { setField(h, find(h, host.EvCallReceived, 0), "callId", nil) }},
		{"call input not an object", func(h *host.History) { setField(h, find(h, host.EvCallReceived, 0), "input", 7) }},
		{"call after the run ended", func(h *host.History) {
			h.Events = append(h.Events, host.HistoryEvent{Kind: host.EvRunCancelled, Time: h.Events[len(h.Events)-1].Time, Data: json.RawMessage(`{"reason":"x"}`)},
				host.HistoryEvent{Kind: host.EvCallReceived, Time: h.Events[len(h.Events)-1].Time, Data: json.RawMessage(`{"index":2,"callId":"c2","input":{}}`)})
			renumber(h)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := clone()
			tc.damage(h)
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				_, err = f.h.CheckReplay(ctx, h, nil)
			}()
			if !errors.Is(err, host.ErrBadHistory) {
				t.Errorf("CheckReplay: %v, want ErrBadHistory", err)
			}
		})
	}
	if rep, err := f.h.CheckReplay(ctx, base, nil); err != nil || rep.Ops != rep.RecordedOps {
		t.Errorf("the undamaged history: %+v %v", rep, err)
	}
}

// receive and reply are refused (StatusNotAllowed) in a run whose tool is
// not a serve tool, as in-step-only ops are outside a step: abi/README.md
// documents them for "a tool whose manifest entry is serve". A task tool's
// body that tries to reply early leaves its run working with no calls.
func TestReceiveAndReplyAreRefusedOutsideServe(t *testing.T) {
	f := newScriptFixture(t, nil, map[string]scriptGuest{
		"replier": func(g *sg) {
			r := g.op(abi.OpReceive, "", nil)
			out := map[string]any{"receive": int(r.st)}
			a := g.op(abi.OpReply, "", []byte(`"early"`))
			out["reply"] = int(a.st)
			g.value(g.sleep(3_600_000))
			g.complete(out)
		},
	})
	f.addScript("replier", host.EntryTask)
	ri := f.call("replier", `{}`)
	if ri.Status != store.StatusWaiting {
		t.Fatalf("%s %+v", ri.Status, ri.Error)
	}
	if !ri.Working() || len(ri.Calls) != 0 {
		t.Errorf("a task tool's run that sleeps: Working()=%v, calls %+v", ri.Working(), ri.Calls)
	}
	if _, err := f.h.FireDue(context.Background(), time.Now().Add(2*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	ri, _ = f.h.Drive(context.Background(), ri.ID)
	if string(ri.Result) != fmt.Sprintf(`{"receive":%d,"reply":%d}`, abi.StatusNotAllowed, abi.StatusNotAllowed) {
		t.Errorf("receive and reply in a task tool answered %s, want both refused with %d", ri.Result, abi.StatusNotAllowed)
	}
}
