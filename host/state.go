package host

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
	created *evData
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

	scratch *evData           // apply's decoding buffer
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
	detail    runDetail
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

// runDetail is the host's summary kept in the run record. The log is the
// truth; the detail only saves work (what to wait for) and answers lists.
type runDetail struct {
	Waiting *waitSet         `json:"waiting,omitempty"`
	Result  json.RawMessage  `json:"result,omitempty"`
	Error   *abi.ErrorObject `json:"error,omitempty"`
	// Stalled is why the last attempt to continue the run failed while the
	// run stayed intact (a non-deterministic plugin, say).
	Stalled string `json:"stalled,omitempty"`
}

// waitSet is the unsatisfied await a suspended guest repeats when resumed.
type waitSet struct {
	Mode    abi.AwaitMode `json:"mode"`
	Futures []uint32      `json:"futures"`
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
	if decodeAskFast(o.request, r) {
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
func (rs *runState) newOp(e store.Event, p uint32, kind abi.OpKind, name string) (*opRec, error) {
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

func (rs *runState) existingOp(e store.Event, p uint32, kind abi.OpKind) (*opRec, error) {
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

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// apply folds one event into the state. Events must come in order.
func (rs *runState) apply(e store.Event) error {
	if e.Seq != rs.lastSeq+1 {
		return fmt.Errorf("%w: event %d follows event %d", ErrBadHistory, e.Seq, rs.lastSeq)
	}
	// One evData, reused: apply keeps values of its fields, never it.
	if rs.scratch == nil {
		rs.scratch, rs.strs = new(evData), map[string]string{}
	}
	d := rs.scratch
	if rs.scratchFull {
		*d = evData{}
	} else {
		d.clearHot()
	}
	hot, err := decodeEvDataInto(e, d, rs.strs)
	rs.scratchFull = !hot
	if err != nil {
		return err
	}
	if rs.created == nil && e.Kind != EvRunCreated {
		return fmt.Errorf("%w: first event is %s, not %s", ErrBadHistory, e.Kind, EvRunCreated)
	}
	if rs.status.Terminal() && e.Kind != EvOutput {
		return fmt.Errorf("%w: event %d (%s) after the run ended", ErrBadHistory, e.Seq, e.Kind)
	}
	switch e.Kind {
	case EvRunCreated:
		if rs.created != nil {
			return fmt.Errorf("%w: second %s at event %d", ErrBadHistory, e.Kind, e.Seq)
		}
		seed, err := hex.DecodeString(d.Seed)
		if err != nil || len(seed) != 32 {
			return fmt.Errorf("%w: run seed %q", ErrBadHistory, d.Seed)
		}
		created := *d
		rs.created, rs.start = &created, e.Time
		rs.pinVersion, rs.pinHash = d.Version, d.ModuleHash
		copy(rs.seed[:], seed)
		rs.calls = []callRec{{seq: e.Seq, id: rs.id, input: d.Input}}
	case EvRunResumed:
		rs.markers = append(rs.markers, marker{seq: e.Seq, t: e.Time})
	case EvStepStarted:
		if o := rs.op(d.Op); o != nil && d.Attempt > 1 {
			if o.kind != abi.OpStep || o.settled || o.attemptOpen {
				return fmt.Errorf("%w: event %d starts attempt %d of op %d, which cannot retry", ErrBadHistory, e.Seq, d.Attempt, d.Op)
			}
			o.attempt, o.attemptOpen, o.retryAt = d.Attempt, true, time.Time{}
			break
		}
		o, err := rs.newOp(e, d.Op, abi.OpStep, d.Name)
		if err != nil {
			return err
		}
		o.input, o.retry, o.attempt, o.attemptOpen = d.Input, d.Retry, 1, true
	case EvStepCompleted, EvStepFailed:
		o, err := rs.existingOp(e, d.Op, abi.OpStep)
		if err != nil {
			return err
		}
		if !o.attemptOpen {
			return fmt.Errorf("%w: event %d ends an attempt of op %d that was not started", ErrBadHistory, e.Seq, d.Op)
		}
		o.attemptOpen = false
		switch {
		case e.Kind == EvStepCompleted:
			o.settle(e.Seq, abi.FutureFulfilled, nullIfEmpty(d.Result), 0)
		case d.RetryAt != nil:
			o.retryAt = *d.RetryAt
		default:
			o.settle(e.Seq, abi.FutureRejected, mustJSON(errOrUnknown(d.Error)), 0)
		}
	case EvTimerSet:
		o, err := rs.newOp(e, d.Op, abi.OpSleep, "")
		if err != nil {
			return err
		}
		if d.FireAt != nil {
			o.fireAt = *d.FireAt
		}
		if d.Immediate {
			o.settle(e.Seq, abi.FutureFulfilled, []byte("null"), d.Op)
		}
	case EvTimerFired:
		o, err := rs.existingOp(e, d.Op, abi.OpSleep)
		if err != nil {
			return err
		}
		if o.settled {
			return fmt.Errorf("%w: timer of op %d fired twice", ErrBadHistory, d.Op)
		}
		o.settle(e.Seq, abi.FutureFulfilled, []byte("null"), 0)
	case EvAskOpened:
		o, err := rs.newOp(e, d.Op, abi.OpAsk, "")
		if err != nil {
			return err
		}
		o.askID, o.request = d.AskID, d.Request
		if d.Answer != nil {
			o.settle(e.Seq, abi.FutureFulfilled, answerJSON(d.Answer), d.Op)
		} else {
			rs.openAsks++
		}
	case EvAskSettled:
		o, err := rs.existingOp(e, d.Op, abi.OpAsk)
		if err != nil {
			return err
		}
		if o.settled || d.Answer == nil {
			return fmt.Errorf("%w: question of op %d settled twice or without an answer", ErrBadHistory, d.Op)
		}
		o.settle(e.Seq, abi.FutureFulfilled, answerJSON(d.Answer), 0)
		rs.openAsks--
	case EvHookCreated:
		o, err := rs.newOp(e, d.Op, abi.OpHookCreate, "")
		if err != nil {
			return err
		}
		o.settle(e.Seq, abi.FutureFulfilled, mustJSON(abi.HookCreated{Token: d.Token, Conflict: d.Conflict, URL: d.URL}), d.Op)
		rs.hooks[d.Op] = &hookRec{token: d.Token, conflict: d.Conflict, webhook: d.Webhook, url: d.URL}
	case EvHookNext:
		h := rs.hooks[d.Hook]
		if h == nil {
			return fmt.Errorf("%w: event %d waits on unknown hook %d", ErrBadHistory, e.Seq, d.Hook)
		}
		o, err := rs.newOp(e, d.Op, abi.OpHookNext, "")
		if err != nil {
			return err
		}
		o.hook, o.index = d.Hook, len(h.nexts)
		h.nexts = append(h.nexts, d.Op)
		switch {
		case h.conflict != "":
			o.settle(e.Seq, abi.FutureRejected, mustJSON(abi.ErrorObject{Type: abi.ErrTypeHookConflict,
				Message: fmt.Sprintf("hook token %q is held by run %s", h.token, h.conflict)}), d.Op)
		case h.disposed:
			// After a dispose every wait rejects, even if payloads that
			// arrived earlier were never taken.
			o.settle(e.Seq, abi.FutureRejected, hookDisposedErr(h), d.Op)
		case o.index < len(h.received):
			r := h.received[o.index]
			o.settle(r.seq, abi.FutureFulfilled, r.payload, 0)
		}
	case EvHookReceived:
		h := rs.hooks[d.Hook]
		if h == nil || h.disposed || h.conflict != "" {
			return fmt.Errorf("%w: event %d delivers to hook %d, which cannot receive", ErrBadHistory, e.Seq, d.Hook)
		}
		h.received = append(h.received, hookPayload{seq: e.Seq, payload: nullIfEmpty(d.Payload)})
		if i := len(h.received) - 1; i < len(h.nexts) {
			rs.op(h.nexts[i]).settle(e.Seq, abi.FutureFulfilled, nullIfEmpty(d.Payload), 0)
		}
	case EvHookDisposed:
		h := rs.hooks[d.Hook]
		if h == nil {
			return fmt.Errorf("%w: event %d disposes unknown hook %d", ErrBadHistory, e.Seq, d.Hook)
		}
		if d.Op != 0 { // disposed by the guest, not when the run ended
			if _, err := rs.newOp(e, d.Op, abi.OpHookDispose, ""); err != nil {
				return err
			}
		}
		h.disposed = true
		for _, p := range h.nexts {
			if o := rs.op(p); !o.settled {
				o.settle(e.Seq, abi.FutureRejected, hookDisposedErr(h), d.Op)
			}
		}
	case EvProgress:
		if _, err := rs.newOp(e, d.Op, abi.OpProgress, ""); err != nil {
			return err
		}
		rs.lastProgress = d.Value
	case EvOutput:
		if d.Step == 0 {
			rs.outProduced = d.Produced
		}
		rs.outRecorded += int64(len(d.Data))
	case EvRunCompleted, EvRunFailed:
		if d.Op != 0 {
			if _, err := rs.newOp(e, d.Op, abi.OpComplete, ""); err != nil {
				return err
			}
		}
		rs.endCalls(e.Seq)
		if e.Kind == EvRunCompleted {
			rs.status, rs.result = store.StatusCompleted, nullIfEmpty(d.Result)
		} else {
			rs.status, rs.failure, rs.endResult = store.StatusFailed, errOrUnknown(d.Error), d.Result
		}
	case EvRunCancelled:
		if d.Op != 0 { // the body's own end, after an abort
			if _, err := rs.newOp(e, d.Op, abi.OpComplete, ""); err != nil {
				return err
			}
		}
		rs.endCalls(e.Seq)
		rs.status, rs.failure, rs.endResult = store.StatusCancelled, d.Error, d.Result
	case EvWebhookResponded:
		h := rs.hooks[d.Hook]
		if h == nil || h.webhook == nil || !h.webhook.Manual || d.Index < 0 || d.Index >= len(h.received) || h.responses[d.Index] != nil || d.Response == nil {
			return fmt.Errorf("%w: event %d answers request %d of hook %d, which cannot be answered", ErrBadHistory, e.Seq, d.Index, d.Hook)
		}
		if _, err := rs.newOp(e, d.Op, abi.OpWebhookRespond, ""); err != nil {
			return err
		}
		if h.responses == nil {
			h.responses = map[int]*abi.HTTPResponse{}
		}
		h.responses[d.Index] = d.Response
	case EvAgentSent:
		o, err := rs.newOp(e, d.Op, abi.OpAgent, d.Name)
		if err != nil {
			return err
		}
		o.input, o.request = d.Input, d.Request
		if d.AgentRequest != nil {
			a := *d.AgentRequest
			o.agent = &a
		}
		if key := o.session(); key != "" {
			if rs.sessions == nil {
				rs.sessions = map[string]*childSession{}
			}
			cs := rs.sessions[key]
			switch {
			case cs == nil:
				rs.sessions[key] = &childSession{agent: d.Name, running: d.Op}
			case cs.agent != d.Name:
				return fmt.Errorf("%w: event %d sends to session %q of agent %s as agent %s", ErrBadHistory, e.Seq, key, cs.agent, d.Name)
			case cs.running != 0:
				cs.queued = append(cs.queued, d.Op)
			default:
				cs.running = d.Op
			}
		}
	case EvAgentSettled:
		o, err := rs.existingOp(e, d.Op, abi.OpAgent)
		if err != nil {
			return err
		}
		if o.settled || d.Agent == nil {
			return fmt.Errorf("%w: agent turn of op %d settled twice or without a result", ErrBadHistory, d.Op)
		}
		v := mustJSON(d.Agent)
		o.settle(e.Seq, abi.FutureFulfilled, v, 0)
		if cs := rs.sessions[o.session()]; o.session() != "" && cs != nil {
			if cs.running != d.Op {
				return fmt.Errorf("%w: event %d ends a turn of session %q that is not running", ErrBadHistory, e.Seq, o.session())
			}
			// The messages that went with the turn end with it; those
			// sent meanwhile are the next turn.
			for _, j := range cs.joined[d.Op] {
				if q := rs.op(j); !q.settled {
					q.settle(e.Seq, abi.FutureFulfilled, v, 0)
				}
			}
			cs.turns = append(cs.turns, d.Op)
			cs.running = 0
			if len(cs.queued) > 0 {
				cs.running = cs.queued[0]
				if len(cs.queued) > 1 {
					if cs.joined == nil {
						cs.joined = map[uint32][]uint32{}
					}
					cs.joined[cs.running] = append([]uint32(nil), cs.queued[1:]...)
				}
				cs.queued = nil
			}
		}
	case EvCallReceived:
		if d.Index != len(rs.calls) {
			return fmt.Errorf("%w: event %d delivers call %d, expected call %d", ErrBadHistory, e.Seq, d.Index, len(rs.calls))
		}
		if in := bytes.TrimLeft(d.Input, " \t\r\n"); d.CallID == "" || len(in) == 0 || in[0] != '{' {
			return fmt.Errorf("%w: event %d delivers call %d without an id or an object input", ErrBadHistory, e.Seq, d.Index)
		}
		rs.calls = append(rs.calls, callRec{seq: e.Seq, id: d.CallID, input: d.Input})
		if d.Index < len(rs.receives) {
			rs.op(rs.receives[d.Index]).settle(e.Seq, abi.FutureFulfilled, rs.serveCall(d.Index), 0)
		}
	case EvReceive:
		o, err := rs.newOp(e, d.Op, abi.OpReceive, "")
		if err != nil {
			return err
		}
		o.index = len(rs.receives)
		rs.receives = append(rs.receives, d.Op)
		if o.index < len(rs.calls) {
			o.settle(rs.calls[o.index].seq, abi.FutureFulfilled, rs.serveCall(o.index), 0)
		}
	case EvReplied:
		o, err := rs.newOp(e, d.Op, abi.OpReply, "")
		if err != nil {
			return err
		}
		if d.Index < 0 || d.Index > rs.receivable() || d.Answered < 0 {
			return fmt.Errorf("%w: event %d replies to %d received calls, but %d could have been received", ErrBadHistory, e.Seq, d.Index, rs.receivable())
		}
		n := 0
		for i := range d.Index {
			if c := &rs.calls[i]; !c.answered {
				c.answered, c.output, c.by = true, nullIfEmpty(d.Payload), e.Seq
				n++
			}
		}
		if n != d.Answered {
			return fmt.Errorf("%w: event %d answers %d calls, but %d were waiting", ErrBadHistory, e.Seq, d.Answered, n)
		}
		o.settle(e.Seq, abi.FutureFulfilled, mustJSON(abi.ReplyResult{Answered: n}), d.Op)
	case EvAbortRequested:
		if d.Index != len(rs.aborts) {
			return fmt.Errorf("%w: event %d is abort %d, expected abort %d", ErrBadHistory, e.Seq, d.Index, len(rs.aborts))
		}
		rs.aborts = append(rs.aborts, abortRec{seq: e.Seq, reason: d.Reason})
		v := mustJSON(abi.AbortInfo{Reason: d.Reason})
		for _, o := range rs.ops {
			if o != nil && o.kind == abi.OpSignal && !o.settled { // nil: left out of an image, settled
				o.settle(e.Seq, abi.FutureFulfilled, v, 0)
			}
		}
		// A serve run's calls still waiting end as cancelled.
		for i := range rs.calls {
			if c := &rs.calls[i]; !c.answered {
				c.answered, c.cancelled, c.by = true, true, e.Seq
			}
		}
	case EvSignal:
		o, err := rs.newOp(e, d.Op, abi.OpSignal, "")
		if err != nil {
			return err
		}
		if d.Reason != "" {
			o.settle(e.Seq, abi.FutureFulfilled, mustJSON(abi.AbortInfo{Reason: d.Reason}), d.Op)
		}
	case EvOpRefused:
		kind, ok := abi.OpKindByName(d.Kind)
		if !ok || !kind.Recorded() || d.Status < uint32(abi.StatusBadRequest) || d.Error == nil {
			return fmt.Errorf("%w: event %d refuses op kind %q with status %d", ErrBadHistory, e.Seq, d.Kind, d.Status)
		}
		o, err := rs.newOp(e, d.Op, kind, d.Name)
		if err != nil {
			return err
		}
		o.refused, o.value = abi.Status(d.Status), mustJSON(d.Error)
	case EvRunUpgraded:
		// The record carries the new pin; nothing in the model changes.
		rs.pinVersion, rs.pinHash = d.Version, d.ModuleHash
	default:
		return fmt.Errorf("%w: unknown event kind %q at %d", ErrBadHistory, e.Kind, e.Seq)
	}
	rs.lastSeq = e.Seq
	if rs.lazy != nil {
		rs.lazy.tail = append(rs.lazy.tail, e)
	}
	return nil
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
func (rs *runState) satisfied(w *waitSet) bool {
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
