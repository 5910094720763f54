package host_test

import (
	"bytes"
	"context"
	"encoding/binary"
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

// Review cases for serve runs: receive and reply ops, SendCall, RunInfo's
// calls, and histories with call_received, receive and replied events.
// Cases marked FINDING fail against the code as it is.
//
// The guests here are Go functions run by a fake source engine (no
// WebAssembly): each activation runs the function from the top against
// the host's op handler, awaiting with the block flag as the rawabi guest
// does, so every activation replays the run.

// scriptGuest is a guest body: it issues ops through g and ends with
// g.complete or g.fail.
type scriptGuest func(g *sg)

type scriptEngine struct {
	mu      sync.Mutex
	scripts map[string]scriptGuest
}

const scriptEngineName = "reviewscript"

func newScriptEngine(scripts map[string]scriptGuest) *scriptEngine {
	return &scriptEngine{scripts: scripts}
}

func (e *scriptEngine) Name() string { return scriptEngineName + "/v1" }

func (e *scriptEngine) Compile(ctx context.Context, module []byte) (host.CompiledModule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn := e.scripts[string(module)]
	if fn == nil {
		return nil, &host.PluginError{Reason: "bad_program", Detail: "no script " + string(module)}
	}
	return scriptModule{fn}, nil
}

func (e *scriptEngine) Close(context.Context) error { return nil }

func (e *scriptEngine) Check(context.Context, host.CompiledModule, host.Manifest, host.Limits) error {
	return nil
}

type scriptModule struct{ fn scriptGuest }

func (m scriptModule) Instantiate(ctx context.Context, cfg host.InstanceConfig) (host.Instance, error) {
	return &scriptInstance{fn: m.fn, ops: cfg.Ops}, nil
}

func (m scriptModule) Close(context.Context) error { return nil }

type scriptInstance struct {
	fn  scriptGuest
	ops host.OpHandler
}

// sgStop unwinds a guest body when the host ends the instance.
type sgStop struct{ err error }

func (i *scriptInstance) Call(ctx context.Context, export string) (res int32, err error) {
	switch export {
	case abi.VersionExport:
		return abi.Version, nil
	case abi.RunExport:
		defer func() {
			if p := recover(); p != nil {
				s, ok := p.(sgStop)
				if !ok {
					panic(p)
				}
				res, err = 0, s.err
			}
		}()
		i.fn(&sg{ctx: ctx, ops: i.ops})
		return abi.RunDone, nil
	}
	return 0, &host.GuestError{Message: "no export " + export}
}

func (i *scriptInstance) Close(context.Context) error { return nil }

// sg is what a guest body issues ops with.
type sg struct {
	ctx context.Context
	ops host.OpHandler

	received int // one past the highest call index received
}

type opAnswer struct {
	st      abi.Status
	future  uint32
	payload []byte
}

func (g *sg) op(kind abi.OpKind, name string, payload []byte) opAnswer {
	b, err := g.ops.Op(g.ctx, kind, []byte(name), payload)
	if err != nil {
		panic(sgStop{err})
	}
	return opAnswer{abi.Status(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint32(b[4:]), append([]byte(nil), b[abi.BodyHeaderSize:]...)}
}

// await blocks until future f settles and returns its value (the guest
// ends if it rejected).
func (g *sg) await(f uint32) []byte {
	req := binary.LittleEndian.AppendUint32(nil, uint32(abi.AwaitAll|abi.AwaitBlock))
	req = binary.LittleEndian.AppendUint32(req, f)
	a := g.op(abi.OpAwait, "", req)
	if a.st != abi.StatusOK || len(a.payload) < 12 {
		panic(sgStop{&host.GuestError{Message: fmt.Sprintf("await answered %d", a.st)}})
	}
	if abi.FutureState(binary.LittleEndian.Uint32(a.payload[4:])) != abi.FutureFulfilled {
		panic(sgStop{&host.GuestError{Message: "future rejected: " + string(a.payload[12:])}})
	}
	return a.payload[12 : 12+binary.LittleEndian.Uint32(a.payload[8:])]
}

// value is an op's value: at once, or by a blocking await.
func (g *sg) value(a opAnswer) []byte {
	switch a.st {
	case abi.StatusOK:
		return a.payload
	case abi.StatusPending:
		return g.await(a.future)
	}
	panic(sgStop{&host.GuestError{Message: fmt.Sprintf("op answered %d: %s", a.st, a.payload)}})
}

func (g *sg) receive() abi.ServeCall {
	var c abi.ServeCall
	if err := json.Unmarshal(g.value(g.op(abi.OpReceive, "", nil)), &c); err != nil {
		panic(err)
	}
	g.received = max(g.received, c.Index+1)
	return c
}

func (g *sg) reply(v any) int {
	out, _ := json.Marshal(v)
	b, _ := json.Marshal(abi.ReplyRequest{Received: g.received, Output: out})
	a := g.op(abi.OpReply, "", b)
	if a.st != abi.StatusOK {
		panic(sgStop{&host.GuestError{Message: "reply refused: " + string(a.payload)}})
	}
	var r abi.ReplyResult
	_ = json.Unmarshal(a.payload, &r)
	return r.Answered
}

func (g *sg) complete(v any) {
	b, _ := json.Marshal(v)
	out, _ := json.Marshal(abi.Outcome{Result: b})
	g.op(abi.OpComplete, "", out)
}

func (g *sg) sleep(ms int64) opAnswer {
	b, _ := json.Marshal(abi.SleepRequest{Ms: &ms})
	return g.op(abi.OpSleep, "", b)
}

// scriptFixture is a host whose tools are script guests.
type scriptFixture struct {
	*fixture
	eng *scriptEngine
}

func newScriptFixture(t *testing.T, opts *host.Options, scripts map[string]scriptGuest) *scriptFixture {
	t.Helper()
	eng := newScriptEngine(scripts)
	var o host.Options
	if opts != nil {
		o = *opts
	}
	o.Engines = map[string]host.Engine{scriptEngineName: eng}
	return &scriptFixture{fixture: newFixture(t, &o), eng: eng}
}

func (f *scriptFixture) addScript(name, entry string) {
	f.t.Helper()
	m := host.Manifest{Name: name, Description: "a review script", Entry: entry, Engine: scriptEngineName,
		InputSchema: json.RawMessage(`{"type":"object"}`)}
	if _, err := f.h.AddPlugin(context.Background(), []byte(name), m); err != nil {
		f.t.Fatal(err)
	}
}

func (f *scriptFixture) exportHistory(id string) *host.History {
	f.t.Helper()
	var buf strings.Builder
	if err := f.h.ExportHistory(context.Background(), id, &buf); err != nil {
		f.t.Fatal(err)
	}
	hist, err := host.ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		f.t.Fatal(err)
	}
	return hist
}

// echoServe answers each call with its input, forever.
func echoServe(g *sg) {
	for {
		c := g.receive()
		g.reply(json.RawMessage(c.Input))
	}
}

// Fixed finding, as first reported: SendCall cannot record a call while the run's work runs. A
// serve body that sends an agent turn (or runs a step) for a call holds
// the run's lock for the whole turn (Host.Drive -> withRun -> drive ->
// runWork, host/run.go), and SendCall takes the same lock
// (host/serve.go: h.withRun), so a call sent meanwhile blocks until the
// turn ends and the run waits again; its ctx is not honoured either
// (runHandle.mu.Lock in withRun, host/run.go:109). The host keeps calls
// that arrive while the body is busy ("eve keeps calls that arrive while
// the body isn't waiting"), and a session's call by taskId is a receipt
// the model gets at once; session.sendToTask holds the session's mutex
// across this SendCall, so the whole session stalls with it.
func TestReviewSendCallWhileRunWorks(t *testing.T) {
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
func TestReviewSendCallQueuedAndRecovered(t *testing.T) {
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
func TestReviewServeDamagedHistories(t *testing.T) {
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
		// Fixed finding, as first reported: a reply that counts a call recorded after its own
		// activation began (impossible live: calls are recorded between
		// activations) is accepted by runState.apply's replied check,
		// which counts received() = min(calls, receives) without the
		// call's seq (host/state.go, case EvReplied); CheckReplay then
		// blames the module with a NonDeterminismError instead of
		// refusing the history with ErrBadHistory.
		{"call moved past the activation that read it", func(h *host.History) { move(h, find(h, host.EvCallReceived, 0), find(h, host.EvRunResumed, 1)) }},
		// Fixed finding, as first reported: call_received events the host could never write (no
		// callId; an input that is not a JSON object, which SendCall's
		// schema check refuses) are accepted (host/state.go, case
		// EvCallReceived checks only the index); the guest then replays
		// with an input its schema forbids.
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

// Fixed finding, as first reported: receive and reply are accepted from a run whose tool is not a
// serve tool. wfInstance.perform (host/workflow.go, cases OpReceive and
// OpReply) never looks at the manifest's entry, so a task tool's body can
// reply: its run then reports the call completed and Working() false
// (host/info.go) while the body still works, and a session or client that
// reads Calls/Working sees a finished call with the early reply as its
// output. abi/README.md documents the ops for "a tool whose manifest
// entry is serve"; for other entries they should be refused
// (StatusNotAllowed) as in-step-only ops are.
func TestReviewReceiveReplyOutsideServe(t *testing.T) {
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
