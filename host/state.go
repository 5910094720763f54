package host

import (
	"encoding/json"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"slices"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// runState is a run's model, rebuilt from its log by apply and kept in
// step with it: every event the host appends goes through apply too. It is
// not safe for concurrent use; the run's handle lock guards it.
type runState struct {
	id      string
	rec     store.Run
	created *history.Data
	// pinVersion and pinHash are the plugin version and module the log
	// last pinned the run to: run_created's, or the last run_upgraded's
	// (of those applied: a lazy state has not applied those before its
	// image).
	pinVersion int
	pinHash    string
	start      time.Time
	seed       [32]byte
	lastSeq    uint64

	ops     []*opRec // ops[p-1] is the op at position p
	markers []marker // the run_resumed events: one per activation, from markBase
	hooks   map[uint32]*hookRec

	// A serve run's calls (the first is the one that created the run) and
	// its receive ops, in order: receive i takes call i.
	calls    []callRec
	receives []uint32
	// settledBelow caches workFrom: every step and agent op before it has
	// settled (ops never unsettle).
	settledBelow int
	// openAsks counts the questions not settled, so that a reply that
	// withdraws none does not look through every op.
	openAsks int

	// aborts are the run's abort_requested events, in order.
	aborts []abortRec

	// sessions are the run's child agent sessions by key.
	sessions map[string]*childSession

	outProduced int64 // guest output bytes produced, including dropped ones
	outRecorded int64 // bytes of output recorded in the log

	// markBase is how many activations' markers a lazy state left out:
	// markers holds activation markBase's and those after it. Zero once
	// the state is complete (expand).
	markBase int

	scratch *history.Data     // apply's decoding buffer
	strs    map[string]string // the names apply has decoded, interned
	slab    []opRec           // ops are taken from it while it lasts (reserve)
	// scratchFull: the last event decoded into scratch took the slow path,
	// which may have set any field (else only clearHot's are set).
	scratchFull bool

	// lazy is set on a state loaded from an image (stateimage.go): ops it
	// left out are nil, and markers before markBase absent, until expand
	// completes it.
	lazy *lazyLog
	// imageSeq is the event the run's last state image was taken at, and
	// imageFrom the index of ops where its scan may begin (image).
	imageSeq  uint64
	imageFrom int

	lastProgress json.RawMessage
	status       store.RunStatus
	result       json.RawMessage
	failure      *abi.ErrorObject
	// endResult is the result the body ended with when the run did not
	// complete with it: run_cancelled keeps it (a body that finished
	// unwinding after an abort), and run_failed for an OutputSchemaError.
	// A replay check compares the guest's own end with it.
	endResult json.RawMessage
	detail    history.Detail
}

type marker struct {
	seq uint64
	t   time.Time
}

// opRec is one recorded op and, for ops that make futures, its settlement.
//
// The fields are ordered to pack (256 bytes, where the order of their
// meanings took 288): a long run's state holds every op, and a replay
// of one allocates them all at once. Those a replay reads for every op
// come first.
type opRec struct {
	kind abi.OpKind
	// settleOp: see byGuest
	settleOp uint32
	name     string
	seq      uint64    // the op's first event
	t        time.Time // and its time
	act      int       // activation it was issued in

	settleSeq uint64
	state     abi.FutureState
	settled   bool
	// byGuest: settled by an event of the guest's own (an immediate answer,
	// or a dispose), so visible from the op at position settleOp on, rather
	// than from the next activation.
	byGuest     bool
	attemptOpen bool // a step's attempt started and not ended
	value       []byte

	// step
	input   json.RawMessage
	retry   *abi.RetryPolicy
	attempt int
	retryAt time.Time
	// sleep
	fireAt time.Time
	// ask
	askID   string
	request json.RawMessage
	// hook_next
	hook uint32
	// refused is the status of an op the host refused; value holds the error.
	refused abi.Status
	index   int // hook_next
	// agent: the message (with its session key); a pointer, since most
	// ops are not agent turns and a long run's state holds every op
	agent *abi.AgentRequest
}

// session is the key of the agent session an agent op sends to, if any.
func (o *opRec) session() string {
	if o.agent == nil {
		return ""
	}
	return o.agent.Session
}

// callRec is one call of a serve run. A reply answers the calls received
// so far; the run's end answers the rest (with its result, or its error).
type callRec struct {
	seq      uint64
	id       string
	input    json.RawMessage
	answered bool
	output   json.RawMessage
	// cancelled: an abort ended the call before a reply (answered is set
	// too, so no reply answers it).
	cancelled bool
	// by is the sequence number of the event that answered the call (a
	// reply, an abort, the run's end); calls answered together share it.
	by uint64
}

// childSession is an agent session a run sends several messages to. One
// turn runs at a time; messages sent meanwhile wait and go together as the
// next turn.
type childSession struct {
	agent   string
	turns   []uint32 // the first messages of its ended turns, in order
	running uint32   // the first message of the turn that runs
	queued  []uint32
	joined  map[uint32][]uint32 // a turn's first message: the others that went with it
}

type abortRec struct {
	seq    uint64
	reason string
}

// endCalls notes the run's end, at seq, as the answer of the calls
// still waiting.
func (rs *runState) endCalls(seq uint64) {
	for i := range rs.calls {
		if c := &rs.calls[i]; !c.answered {
			c.by = seq
		}
	}
}

// received is how many calls a receive op has taken.
func (rs *runState) received() int { return min(len(rs.calls), len(rs.receives)) }

// receivable is how many calls the current activation's guest can have
// received: those a receive op has taken that were recorded before the
// activation began (a call arrives between activations).
func (rs *runState) receivable() int {
	n := rs.received()
	if rs.acts() == 0 {
		return 0
	}
	at := rs.marker(rs.acts() - 1).seq
	for n > 0 && rs.calls[n-1].seq > at {
		n--
	}
	return n
}

type hookRec struct {
	token    string
	conflict string
	disposed bool
	received []hookPayload
	nexts    []uint32 // positions of this hook's hook_next ops, in order
	// webhook is set for a webhook; responses holds a manual one's answers
	// by request index.
	webhook   *abi.WebhookSpec
	url       string
	responses map[int]*abi.HTTPResponse
}

type hookPayload struct {
	seq     uint64
	payload json.RawMessage
}

func newRunState(rec store.Run) *runState {
	rs := &runState{id: rec.ID, rec: rec, hooks: map[uint32]*hookRec{}, status: store.StatusRunning}
	if len(rec.Detail) > 0 {
		_ = json.Unmarshal(rec.Detail, &rs.detail) // a summary only; the log rules
	}
	return rs
}

// askRequest decodes the request of the question whose op is o. Requests
// are stored in json.Marshal's layout, which the hand reader takes; it is
// read to answer a question and to list it.
func askRequest(o *opRec) (*abi.AskRequest, error) {
	r := new(abi.AskRequest)
	if history.DecodeAskRequest(o.request, r) {
		return r, nil
	}
	*r = abi.AskRequest{}
	if err := json.Unmarshal(o.request, r); err != nil {
		return nil, err
	}
	return r, nil
}

// op is the op at position p, or nil. On a lazy state that left it out,
// it completes the state first (nil if that fails: see lazyErr).
func (rs *runState) op(p uint32) *opRec {
	if p == 0 || int(p) > len(rs.ops) {
		return nil
	}
	if o := rs.ops[p-1]; o != nil || rs.lazy == nil {
		return o
	}
	if rs.expand() != nil {
		return nil
	}
	return rs.ops[p-1]
}

func (rs *runState) activation() int { return rs.acts() - 1 }

// acts is how many activations the run has begun.
func (rs *runState) acts() int { return rs.markBase + len(rs.markers) }

// newOp adds the op that event e creates at position p.
func (rs *runState) newOp(e *store.Event, p uint32, kind abi.OpKind, name string) (*opRec, error) {
	if int(p) != len(rs.ops)+1 {
		return nil, fmt.Errorf("%w: event %d creates op %d, expected op %d", ErrBadHistory, e.Seq, p, len(rs.ops)+1)
	}
	if rs.acts() == 0 {
		return nil, fmt.Errorf("%w: event %d records an op before any activation", ErrBadHistory, e.Seq)
	}
	var o *opRec
	if len(rs.slab) < cap(rs.slab) {
		rs.slab = rs.slab[:len(rs.slab)+1]
		o = &rs.slab[len(rs.slab)-1]
	} else {
		o = new(opRec)
	}
	*o = opRec{kind: kind, name: name, seq: e.Seq, t: e.Time, act: rs.activation()}
	rs.ops = append(rs.ops, o)
	return o, nil
}

func (rs *runState) existingOp(e *store.Event, p uint32, kind abi.OpKind) (*opRec, error) {
	o := rs.op(p)
	if o == nil || o.kind != kind {
		return nil, fmt.Errorf("%w: event %d (%s) names op %d, which is not a %s", ErrBadHistory, e.Seq, e.Kind, p, kind)
	}
	return o, nil
}

// settle settles the op's future: by the event seq, or (byOp > 0) by the
// guest's own op at that position.
func (o *opRec) settle(seq uint64, st abi.FutureState, v []byte, byOp uint32) {
	o.settled, o.settleSeq, o.state, o.value, o.byGuest, o.settleOp = true, seq, st, v, byOp > 0, byOp
}

// apply folds one event into the state. Events must come in order. It
// checks the event's place in the log, decodes its data into the state's
// scratch evData, and calls the apply function of its kind (apply.go)
// with it. The admission is here rather than in a function of its own,
// and the event goes to the kind's function by pointer: a call per event
// and copies of the event were a tenth of a replay's time. The dispatch
// is a switch, not a table of funcs: Go compiles a switch on these
// constant strings to a search by length and content, cheaper on the
// replay path than a map lookup and an indirect call (see RATIONALE.md).
func (rs *runState) apply(e store.Event) error {
	if e.Seq != rs.lastSeq+1 {
		return fmt.Errorf("%w: event %d follows event %d", ErrBadHistory, e.Seq, rs.lastSeq)
	}
	d := rs.clearScratch()
	hot, err := history.DecodeInto(&e, d, rs.strs)
	rs.scratchFull = !hot
	switch {
	case err != nil:
		return err
	case rs.created == nil && e.Kind != EvRunCreated:
		return fmt.Errorf("%w: first event is %s, not %s", ErrBadHistory, e.Kind, EvRunCreated)
	case rs.status.Terminal() && e.Kind != EvOutput:
		return fmt.Errorf("%w: event %d (%s) after the run ended", ErrBadHistory, e.Seq, e.Kind)
	}
	switch e.Kind {
	case EvRunCreated:
		err = rs.applyRunCreated(&e, d)
	case EvRunResumed:
		rs.applyRunResumed(&e)
	case EvStepStarted:
		err = rs.applyStepStarted(&e, d)
	case EvStepCompleted, EvStepFailed:
		err = rs.applyStepEnded(&e, d)
	case EvTimerSet:
		err = rs.applyTimerSet(&e, d)
	case EvTimerFired:
		err = rs.applyTimerFired(&e, d)
	case EvAskOpened:
		err = rs.applyAskOpened(&e, d)
	case EvAskSettled:
		err = rs.applyAskSettled(&e, d)
	case EvHookCreated:
		err = rs.applyHookCreated(&e, d)
	case EvHookNext:
		err = rs.applyHookNext(&e, d)
	case EvHookReceived:
		err = rs.applyHookReceived(&e, d)
	case EvHookDisposed:
		err = rs.applyHookDisposed(&e, d)
	case EvProgress:
		err = rs.applyProgress(&e, d)
	case EvOutput:
		rs.applyOutput(d)
	case EvRunCompleted, EvRunFailed:
		err = rs.applyRunEnded(&e, d)
	case EvRunCancelled:
		err = rs.applyRunCancelled(&e, d)
	case EvWebhookResponded:
		err = rs.applyWebhookResponded(&e, d)
	case EvAgentSent:
		err = rs.applyAgentSent(&e, d)
	case EvAgentSettled:
		err = rs.applyAgentSettled(&e, d)
	case EvCallReceived:
		err = rs.applyCallReceived(&e, d)
	case EvReceive:
		err = rs.applyReceive(&e, d)
	case EvReplied:
		err = rs.applyReplied(&e, d)
	case EvAbortRequested:
		err = rs.applyAbortRequested(&e, d)
	case EvSignal:
		err = rs.applySignal(&e, d)
	case EvOpRefused:
		err = rs.applyOpRefused(&e, d)
	case EvRunUpgraded:
		rs.applyRunUpgraded(d)
	default:
		err = fmt.Errorf("%w: unknown event kind %q at %d", ErrBadHistory, e.Kind, e.Seq)
	}
	if err != nil {
		return err
	}
	rs.lastSeq = e.Seq
	if rs.lazy != nil {
		rs.lazy.tail = append(rs.lazy.tail, e)
	}
	return nil
}

// clearScratch returns the state's scratch evData, zeroed for the next
// event: one evData, reused, for apply keeps values of its fields, never
// it.
func (rs *runState) clearScratch() *history.Data {
	if rs.scratch == nil {
		rs.scratch, rs.strs = new(history.Data), map[string]string{}
	}
	d := rs.scratch
	if rs.scratchFull {
		*d = history.Data{}
	} else {
		d.ClearHot()
	}
	return d
}

func hookDisposedErr(h *hookRec) []byte {
	return mustJSON(abi.ErrorObject{Type: abi.ErrTypeHookDisposed, Message: fmt.Sprintf("hook %q was disposed", h.token)})
}

func nullIfEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func errOrUnknown(e *abi.ErrorObject) *abi.ErrorObject {
	if e == nil {
		return &abi.ErrorObject{Type: abi.ErrTypeError, Message: "unknown error"}
	}
	return e
}

// visible reports whether a guest in activation act, having issued ops up
// to position cursor, can see the op's settlement: settlements recorded
// before the activation began, and those of its own ops it has issued.
func (rs *runState) visible(o *opRec, act int, cursor uint32) bool {
	if !o.settled {
		return false
	}
	if o.byGuest {
		return cursor >= o.settleOp
	}
	return act < rs.acts() && o.settleSeq < rs.marker(act).seq
}

// satisfied reports whether a wait set is satisfied by everything recorded.
func (rs *runState) satisfied(w *history.WaitSet) bool {
	if w == nil {
		return true
	}
	any := w.Mode&^abi.AwaitBlock == abi.AwaitAny
	done := 0
	for _, p := range w.Futures {
		o := rs.op(p)
		if o == nil {
			return true // an unknown future: let the guest find out
		}
		if o.settled {
			if any || o.state == abi.FutureRejected {
				return true
			}
			done++
		}
	}
	return done == len(w.Futures)
}

// workFrom returns an index into ops before which every step and agent
// op has settled, so the scans for work need not look there: they cost
// what is outstanding, not the length of the history.
func (rs *runState) workFrom() int {
	i := rs.settledBelow
	for i < len(rs.ops) {
		if o := rs.ops[i]; (o.kind == abi.OpStep || o.kind == abi.OpAgent) && !o.settled && o.refused == 0 {
			break
		}
		i++
	}
	rs.settledBelow = i
	return i
}

// pendingAgents returns the agent turns sent and not settled.
func (rs *runState) pendingAgents() []uint32 {
	var out []uint32
	for i := rs.workFrom(); i < len(rs.ops); i++ {
		o := rs.ops[i]
		p := uint32(i + 1)
		if o.kind != abi.OpAgent || o.settled || o.refused != 0 {
			continue
		}
		// A session's turn runs once, for its first message; the others
		// wait for it, or for the turn before it to end.
		if key := o.session(); key != "" && rs.sessions[key] != nil && rs.sessions[key].running != p {
			continue
		}
		out = append(out, p)
	}
	return out
}

// agentTurn is the turn that the agent op at p starts.
func (rs *runState) agentTurn(p uint32) AgentTurn {
	o := rs.op(p)
	req := rs.agentRequest(p)
	t := AgentTurn{RunID: rs.id, TurnID: stepID(rs.id, p), Agent: o.name, Message: req.Message, Parts: req.Parts,
		OutputSchema: o.request, Model: req.Model}
	key := o.session()
	cs := rs.sessions[key]
	if key == "" || cs == nil {
		return t
	}
	t.SessionID = rs.id + ":" + key
	for _, j := range cs.joined[p] {
		t.More = append(t.More, rs.agentRequest(j))
	}
	// A session's model is the one its first message set.
	if t.Model == nil {
		t.Model = rs.agentRequest(firstOf(cs, p)).Model
	}
	for _, first := range cs.turns {
		x := AgentExchange{Messages: []abi.AgentRequest{rs.agentRequest(first)}}
		for _, j := range cs.joined[first] {
			x.Messages = append(x.Messages, rs.agentRequest(j))
		}
		var res abi.AgentResult
		_ = json.Unmarshal(rs.op(first).value, &res)
		x.Reply, x.Data = res.Reply, res.Data
		t.History = append(t.History, x)
	}
	return t
}

func firstOf(cs *childSession, p uint32) uint32 {
	if len(cs.turns) > 0 {
		return cs.turns[0]
	}
	return p
}

// agentRequest is what the agent op at p sent.
func (rs *runState) agentRequest(p uint32) abi.AgentRequest {
	o := rs.op(p)
	var req abi.AgentRequest
	if o.agent != nil {
		req = *o.agent
	}
	if req.Message == "" && len(req.Parts) == 0 {
		_ = json.Unmarshal(o.input, &req.Message)
	}
	if len(req.OutputSchema) == 0 {
		req.OutputSchema = o.request
	}
	return req
}

// runnableSteps returns the steps with an attempt started and not finished.
func (rs *runState) runnableSteps() []uint32 {
	var out []uint32
	for i := rs.workFrom(); i < len(rs.ops); i++ {
		if o := rs.ops[i]; o.kind == abi.OpStep && o.attemptOpen {
			out = append(out, uint32(i+1))
		}
	}
	return out
}

// serveCall is the value a receive op takes for call i.
func (rs *runState) serveCall(i int) []byte {
	c := rs.calls[i]
	return mustJSON(abi.ServeCall{Input: nullIfEmpty(c.input), CallID: c.id, Index: i})
}

// reserve sizes the state for a log of n events (kind gives each one's
// kind): its activations and ops, and a block the ops are taken from, so
// that loading a long log does not grow them step by step.
func (rs *runState) reserve(n int, kind func(int) string) {
	acts, ops := 0, 0
	for i := range n {
		switch kind(i) {
		case EvRunResumed:
			acts++
		case EvStepStarted, EvTimerSet, EvAskOpened, EvHookCreated, EvHookNext, EvHookDisposed, EvProgress, EvRunCompleted,
			EvRunFailed, EvRunCancelled, EvWebhookResponded, EvAgentSent, EvReceive, EvReplied, EvSignal, EvOpRefused:
			ops++
		}
	}
	rs.markers = slices.Grow(rs.markers, acts)
	rs.ops = slices.Grow(rs.ops, ops)
	rs.slab = make([]opRec, 0, ops)
}

// abortsBefore counts the run's aborts recorded before event seq.
func (rs *runState) abortsBefore(seq uint64) int {
	n := 0
	for _, a := range rs.aborts {
		if a.seq < seq {
			n++
		}
	}
	return n
}
