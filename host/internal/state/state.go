package state

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/internal/jsonutil"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// Run is a run's model, rebuilt from its log by Apply and kept in
// step with it: every event the host appends goes through apply too. It is
// not safe for concurrent use; the run's handle lock guards it.
type Run struct {
	ID      string
	Rec     store.Run
	Created *history.Data
	// pinVersion and pinHash are the plugin version and module the log
	// last pinned the run to: run_created's, or the last run_upgraded's
	// (of those applied: a lazy state has not applied those before its
	// image).
	PinVersion int
	PinHash    string
	Start      time.Time
	Seed       [32]byte
	LastSeq    uint64

	Ops     []*Op    // ops[p-1] is the op at position p
	Markers []Marker // the run_resumed events: one per activation, from markBase
	Hooks   map[uint32]*Hook

	// A serve run's calls (the first is the one that created the run) and
	// its receive ops, in order: receive i takes call i.
	Calls    []Call
	Receives []uint32
	// settledBelow caches workFrom: every step and agent op before it has
	// settled (ops never unsettle).
	settledBelow int
	// openAsks counts the questions not settled, so that a reply that
	// withdraws none does not look through every op.
	OpenAsks int

	// aborts are the run's abort_requested events, in order.
	Aborts []Abort

	// sessions are the run's child agent sessions by key.
	Sessions map[string]*ChildSession

	OutProduced int64 // guest output bytes produced, including dropped ones
	OutRecorded int64 // bytes of output recorded in the log

	// markBase is how many activations' markers a lazy state left out:
	// markers holds activation markBase's and those after it. Zero once
	// the state is complete (expand).
	MarkBase int

	scratch *history.Data     // apply's decoding buffer
	strs    map[string]string // the names apply has decoded, interned
	slab    []Op              // ops are taken from it while it lasts (reserve)
	// scratchFull: the last event decoded into scratch took the slow path,
	// which may have set any field (else only clearHot's are set).
	scratchFull bool

	// lazy is set on a state loaded from an image (image.go): ops it
	// left out are nil, and markers before markBase absent, until expand
	// completes it.
	Lazy *lazyLog
	// imageSeq is the event the run's last state image was taken at, and
	// imageFrom the index of ops where its scan may begin (image).
	ImageSeq  uint64
	imageFrom int

	LastProgress json.RawMessage
	Status       store.RunStatus
	Result       json.RawMessage
	Failure      *abi.ErrorObject
	// endResult is the result the body ended with when the run did not
	// complete with it: run_cancelled keeps it (a body that finished
	// unwinding after an abort), and run_failed for an OutputSchemaError.
	// A replay check compares the guest's own end with it.
	EndResult json.RawMessage
	Detail    history.Detail
}

// Marker is an activation's run_resumed event: its sequence number and time.
type Marker struct {
	Seq  uint64
	Time time.Time
}

// Op is one recorded op and, for ops that make futures, its settlement.
//
// The fields are ordered to pack (256 bytes, where the order of their
// meanings took 288): a long run's state holds every op, and a replay
// of one allocates them all at once. Those a replay reads for every op
// come first.
type Op struct {
	Kind abi.OpKind
	// settleOp: see byGuest
	SettleOp uint32
	Name     string
	Seq      uint64    // the op's first event
	Time     time.Time // and its time
	Act      int       // activation it was issued in

	SettleSeq uint64
	State     abi.FutureState
	Settled   bool
	// byGuest: settled by an event of the guest's own (an immediate answer,
	// or a dispose), so visible from the op at position settleOp on, rather
	// than from the next activation.
	ByGuest     bool
	AttemptOpen bool // a step's attempt started and not ended
	Value       []byte

	// step
	Input   json.RawMessage
	Retry   *abi.RetryPolicy
	Attempt int
	RetryAt time.Time
	// sleep
	FireAt time.Time
	// ask
	AskID   string
	Request json.RawMessage
	// hook_next
	Hook uint32
	// refused is the status of an op the host refused; value holds the error.
	Refused abi.Status
	Index   int // hook_next
	// agent: the message (with its session key); a pointer, since most
	// ops are not agent turns and a long run's state holds every op
	Agent *abi.AgentRequest
}

// Session is the key of the agent session an agent op sends to, if any.
func (o *Op) Session() string {
	if o.Agent == nil {
		return ""
	}
	return o.Agent.Session
}

// Call is one call of a serve run. A reply answers the calls received
// so far; the run's end answers the rest (with its result, or its error).
type Call struct {
	Seq      uint64
	ID       string
	Input    json.RawMessage
	Answered bool
	Output   json.RawMessage
	// cancelled: an abort ended the call before a reply (answered is set
	// too, so no reply answers it).
	Cancelled bool
	// by is the sequence number of the event that answered the call (a
	// reply, an abort, the run's end); calls answered together share it.
	By uint64
}

// ChildSession is an agent session a run sends several messages to. One
// turn runs at a time; messages sent meanwhile wait and go together as the
// next turn.
type ChildSession struct {
	Agent   string
	Turns   []uint32 // the first messages of its ended turns, in order
	running uint32   // the first message of the turn that runs
	queued  []uint32
	Joined  map[uint32][]uint32 // a turn's first message: the others that went with it
}

// Abort is one abort_requested event of the run.
type Abort struct {
	Seq    uint64
	Reason string
}

// endCalls notes the run's end, at seq, as the answer of the calls
// still waiting.
func (rs *Run) endCalls(seq uint64) {
	for i := range rs.Calls {
		if c := &rs.Calls[i]; !c.Answered {
			c.By = seq
		}
	}
}

// Received is how many calls a receive op has taken.
func (rs *Run) Received() int { return min(len(rs.Calls), len(rs.Receives)) }

// Receivable is how many calls the current activation's guest can have
// received: those a receive op has taken that were recorded before the
// activation began (a call arrives between activations).
func (rs *Run) Receivable() int {
	n := rs.Received()
	if rs.Acts() == 0 {
		return 0
	}
	at := rs.Marker(rs.Acts() - 1).Seq
	for n > 0 && rs.Calls[n-1].Seq > at {
		n--
	}
	return n
}

// Hook is a hook or webhook the run created, with what it received.
type Hook struct {
	Token    string
	Conflict string
	Disposed bool
	Received []HookPayload
	Nexts    []uint32 // positions of this hook's hook_next ops, in order
	// webhook is set for a webhook; responses holds a manual one's answers
	// by request index.
	Webhook   *abi.WebhookSpec
	URL       string
	Responses map[int]*abi.HTTPResponse
}

// HookPayload is one payload a hook received, at event Seq.
type HookPayload struct {
	Seq     uint64
	payload json.RawMessage
}

func New(rec store.Run) *Run {
	rs := &Run{ID: rec.ID, Rec: rec, Hooks: map[uint32]*Hook{}, Status: store.StatusRunning}
	if len(rec.Detail) > 0 {
		_ = json.Unmarshal(rec.Detail, &rs.Detail) // a summary only; the log rules
	}
	return rs
}

// AskRequest decodes the request of the question whose op is o. Requests
// are stored in json.Marshal's layout, which the hand reader takes; it is
// read to answer a question and to list it.
func AskRequest(o *Op) (*abi.AskRequest, error) {
	r := new(abi.AskRequest)
	if history.DecodeAskRequest(o.Request, r) {
		return r, nil
	}
	*r = abi.AskRequest{}
	if err := json.Unmarshal(o.Request, r); err != nil {
		return nil, err
	}
	return r, nil
}

// Op is the op at position p, or nil. On a lazy state that left it out,
// it completes the state first (nil if that fails: see lazyErr).
func (rs *Run) Op(p uint32) *Op {
	if p == 0 || int(p) > len(rs.Ops) {
		return nil
	}
	if o := rs.Ops[p-1]; o != nil || rs.Lazy == nil {
		return o
	}
	if rs.Expand() != nil {
		return nil
	}
	return rs.Ops[p-1]
}

func (rs *Run) Activation() int { return rs.Acts() - 1 }

// Acts is how many activations the run has begun.
func (rs *Run) Acts() int { return rs.MarkBase + len(rs.Markers) }

// newOp adds the op that event e creates at position p.
func (rs *Run) newOp(e *store.Event, p uint32, kind abi.OpKind, name string) (*Op, error) {
	if int(p) != len(rs.Ops)+1 {
		return nil, fmt.Errorf("%w: event %d creates op %d, expected op %d", history.ErrBadHistory, e.Seq, p, len(rs.Ops)+1)
	}
	if rs.Acts() == 0 {
		return nil, fmt.Errorf("%w: event %d records an op before any activation", history.ErrBadHistory, e.Seq)
	}
	var o *Op
	if len(rs.slab) < cap(rs.slab) {
		rs.slab = rs.slab[:len(rs.slab)+1]
		o = &rs.slab[len(rs.slab)-1]
	} else {
		o = new(Op)
	}
	*o = Op{Kind: kind, Name: name, Seq: e.Seq, Time: e.Time, Act: rs.Activation()}
	rs.Ops = append(rs.Ops, o)
	return o, nil
}

func (rs *Run) existingOp(e *store.Event, p uint32, kind abi.OpKind) (*Op, error) {
	o := rs.Op(p)
	if o == nil || o.Kind != kind {
		return nil, fmt.Errorf("%w: event %d (%s) names op %d, which is not a %s", history.ErrBadHistory, e.Seq, e.Kind, p, kind)
	}
	return o, nil
}

// settle settles the op's future: by the event seq, or (byOp > 0) by the
// guest's own op at that position.
func (o *Op) settle(seq uint64, st abi.FutureState, v []byte, byOp uint32) {
	o.Settled, o.SettleSeq, o.State, o.Value, o.ByGuest, o.SettleOp = true, seq, st, v, byOp > 0, byOp
}

// Apply folds one event into the state. Events must come in order. It
// checks the event's place in the log, decodes its data into the state's
// scratch history.Data, and calls the apply function of its kind (apply.go)
// with it. The admission is here rather than in a function of its own,
// and the event goes to the kind's function by pointer: a call per event
// and copies of the event were a tenth of a replay's time. The dispatch
// is a switch, not a table of funcs: Go compiles a switch on these
// constant strings to a search by length and content, cheaper on the
// replay path than a map lookup and an indirect call (see RATIONALE.md).
func (rs *Run) Apply(e store.Event) error {
	if e.Seq != rs.LastSeq+1 {
		return fmt.Errorf("%w: event %d follows event %d", history.ErrBadHistory, e.Seq, rs.LastSeq)
	}
	d := rs.clearScratch()
	hot, err := history.DecodeInto(&e, d, rs.strs)
	rs.scratchFull = !hot
	switch {
	case err != nil:
		return err
	case rs.Created == nil && e.Kind != history.KindRunCreated:
		return fmt.Errorf("%w: first event is %s, not %s", history.ErrBadHistory, e.Kind, history.KindRunCreated)
	case rs.Status.Terminal() && e.Kind != history.KindOutput:
		return fmt.Errorf("%w: event %d (%s) after the run ended", history.ErrBadHistory, e.Seq, e.Kind)
	}
	switch e.Kind {
	case history.KindRunCreated:
		err = rs.applyRunCreated(&e, d)
	case history.KindRunResumed:
		rs.applyRunResumed(&e)
	case history.KindStepStarted:
		err = rs.applyStepStarted(&e, d)
	case history.KindStepCompleted, history.KindStepFailed:
		err = rs.applyStepEnded(&e, d)
	case history.KindTimerSet:
		err = rs.applyTimerSet(&e, d)
	case history.KindTimerFired:
		err = rs.applyTimerFired(&e, d)
	case history.KindAskOpened:
		err = rs.applyAskOpened(&e, d)
	case history.KindAskSettled:
		err = rs.applyAskSettled(&e, d)
	case history.KindHookCreated:
		err = rs.applyHookCreated(&e, d)
	case history.KindHookNext:
		err = rs.applyHookNext(&e, d)
	case history.KindHookReceived:
		err = rs.applyHookReceived(&e, d)
	case history.KindHookDisposed:
		err = rs.applyHookDisposed(&e, d)
	case history.KindProgress:
		err = rs.applyProgress(&e, d)
	case history.KindOutput:
		rs.applyOutput(d)
	case history.KindRunCompleted, history.KindRunFailed:
		err = rs.applyRunEnded(&e, d)
	case history.KindRunCancelled:
		err = rs.applyRunCancelled(&e, d)
	case history.KindWebhookResponded:
		err = rs.applyWebhookResponded(&e, d)
	case history.KindAgentSent:
		err = rs.applyAgentSent(&e, d)
	case history.KindAgentSettled:
		err = rs.applyAgentSettled(&e, d)
	case history.KindCallReceived:
		err = rs.applyCallReceived(&e, d)
	case history.KindReceive:
		err = rs.applyReceive(&e, d)
	case history.KindReplied:
		err = rs.applyReplied(&e, d)
	case history.KindAbortRequested:
		err = rs.applyAbortRequested(&e, d)
	case history.KindSignal:
		err = rs.applySignal(&e, d)
	case history.KindOpRefused:
		err = rs.applyOpRefused(&e, d)
	case history.KindRunUpgraded:
		rs.applyRunUpgraded(d)
	default:
		err = fmt.Errorf("%w: unknown event kind %q at %d", history.ErrBadHistory, e.Kind, e.Seq)
	}
	if err != nil {
		return err
	}
	rs.LastSeq = e.Seq
	if rs.Lazy != nil {
		rs.Lazy.tail = append(rs.Lazy.tail, e)
	}
	return nil
}

// clearScratch returns the state's scratch history.Data, zeroed for the next
// event: one history.Data, reused, for apply keeps values of its fields, never
// it.
func (rs *Run) clearScratch() *history.Data {
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

func HookDisposedErr(h *Hook) []byte {
	return jsonutil.Must(abi.ErrorObject{Type: abi.ErrTypeHookDisposed, Message: fmt.Sprintf("hook %q was disposed", h.Token)})
}

func NullIfEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func ErrOrUnknown(e *abi.ErrorObject) *abi.ErrorObject {
	if e == nil {
		return &abi.ErrorObject{Type: abi.ErrTypeError, Message: "unknown error"}
	}
	return e
}

// Visible reports whether a guest in activation act, having issued ops up
// to position cursor, can see the op's settlement: settlements recorded
// before the activation began, and those of its own ops it has issued.
func (rs *Run) Visible(o *Op, act int, cursor uint32) bool {
	if !o.Settled {
		return false
	}
	if o.ByGuest {
		return cursor >= o.SettleOp
	}
	return act < rs.Acts() && o.SettleSeq < rs.Marker(act).Seq
}

// Satisfied reports whether a wait set is satisfied by everything recorded.
func (rs *Run) Satisfied(w *history.WaitSet) bool {
	if w == nil {
		return true
	}
	any := w.Mode&^abi.AwaitBlock == abi.AwaitAny
	done := 0
	for _, p := range w.Futures {
		o := rs.Op(p)
		if o == nil {
			return true // an unknown future: let the guest find out
		}
		if o.Settled {
			if any || o.State == abi.FutureRejected {
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
func (rs *Run) workFrom() int {
	i := rs.settledBelow
	for i < len(rs.Ops) {
		if o := rs.Ops[i]; (o.Kind == abi.OpStep || o.Kind == abi.OpAgent) && !o.Settled && o.Refused == 0 {
			break
		}
		i++
	}
	rs.settledBelow = i
	return i
}

// PendingAgents returns the agent turns sent and not settled.
func (rs *Run) PendingAgents() []uint32 {
	var out []uint32
	for i := rs.workFrom(); i < len(rs.Ops); i++ {
		o := rs.Ops[i]
		p := uint32(i + 1)
		if o.Kind != abi.OpAgent || o.Settled || o.Refused != 0 {
			continue
		}
		// A session's turn runs once, for its first message; the others
		// wait for it, or for the turn before it to end.
		if key := o.Session(); key != "" && rs.Sessions[key] != nil && rs.Sessions[key].running != p {
			continue
		}
		out = append(out, p)
	}
	return out
}

func FirstOf(cs *ChildSession, p uint32) uint32 {
	if len(cs.Turns) > 0 {
		return cs.Turns[0]
	}
	return p
}

// AgentRequest is what the agent op at p sent.
func (rs *Run) AgentRequest(p uint32) abi.AgentRequest {
	o := rs.Op(p)
	var req abi.AgentRequest
	if o.Agent != nil {
		req = *o.Agent
	}
	if req.Message == "" && len(req.Parts) == 0 {
		_ = json.Unmarshal(o.Input, &req.Message)
	}
	if len(req.OutputSchema) == 0 {
		req.OutputSchema = o.Request
	}
	return req
}

// RunnableSteps returns the steps with an attempt started and not finished.
func (rs *Run) RunnableSteps() []uint32 {
	var out []uint32
	for i := rs.workFrom(); i < len(rs.Ops); i++ {
		if o := rs.Ops[i]; o.Kind == abi.OpStep && o.AttemptOpen {
			out = append(out, uint32(i+1))
		}
	}
	return out
}

// ServeCall is the value a receive op takes for call i.
func (rs *Run) ServeCall(i int) []byte {
	c := rs.Calls[i]
	return jsonutil.Must(abi.ServeCall{Input: NullIfEmpty(c.Input), CallID: c.ID, Index: i})
}

// Reserve sizes the state for a log of n events (kind gives each one's
// kind): its activations and ops, and a block the ops are taken from, so
// that loading a long log does not grow them step by step.
func (rs *Run) Reserve(n int, kind func(int) string) {
	acts, ops := 0, 0
	for i := range n {
		switch kind(i) {
		case history.KindRunResumed:
			acts++
		case history.KindStepStarted, history.KindTimerSet, history.KindAskOpened, history.KindHookCreated, history.KindHookNext, history.KindHookDisposed, history.KindProgress, history.KindRunCompleted,
			history.KindRunFailed, history.KindRunCancelled, history.KindWebhookResponded, history.KindAgentSent, history.KindReceive, history.KindReplied, history.KindSignal, history.KindOpRefused:
			ops++
		}
	}
	rs.Markers = slices.Grow(rs.Markers, acts)
	rs.Ops = slices.Grow(rs.Ops, ops)
	rs.slab = make([]Op, 0, ops)
}

// AbortsBefore counts the run's aborts recorded before event seq.
func (rs *Run) AbortsBefore(seq uint64) int {
	n := 0
	for _, a := range rs.Aborts {
		if a.Seq < seq {
			n++
		}
	}
	return n
}
