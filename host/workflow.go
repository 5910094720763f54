package host

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"
	"github.com/sandflow/sandflow/internal/jsonutil"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/internal/schema"
	"github.com/sandflow/sandflow/store"
)

// errBlockSuspend ends an instance whose blocking await cannot be
// satisfied; the activation counts as suspended.
var errBlockSuspend = errors.New("blocking await suspended the instance")

// frontierError ends a check-only replay when the guest goes past the
// recorded history.
type frontierError struct{ next OpRef }

func (e *frontierError) Error() string {
	return "history ends; guest continues with " + e.next.String()
}

// wfInstance is a workflow instance bound to one run for its whole life. It
// answers the guest's ops: from the run's log while the guest replays, by
// doing them and recording events once it is past the log.
type wfInstance struct {
	h      *Host
	rs     *state.Run
	plugin *loadedPlugin
	inst   Instance
	bind   *binding // the pooled instance's sources, bound to this run; nil when made for it
	limits Limits

	act    int    // the activation the guest is in (its view of the log)
	cursor uint32 // recorded ops the guest has issued
	// startCursor is cursor when the activation began (begin): the ops
	// replayed in it are those between it and the first live op.
	startCursor uint32
	clock       logicalClock
	rng         *rand.ChaCha8

	// checkOnly: a replay that must not do anything new (a history check,
	// an upgrade check). The guest is stopped at the end of the history.
	checkOnly bool
	// ended is what the guest's replayed complete op asked for, kept by a
	// check (checkOnly) to compare with the recorded end; endProbed: it
	// sent the op with the if-recorded flag, so without its payload.
	ended     []byte
	endProbed bool

	// State of the current activation.
	ctx       context.Context // of the op in progress, for the CPU meter
	live0     bool            // the guest has gone past the history
	batch     *batch
	suspended bool
	completed bool
	waiting   *history.WaitSet
	err       error // a host-side failure to report after the call
	// cpu is the CPU budget ctx carries (cpuOf), found once per ctx: a
	// replay renews it at every recorded activation.
	cpu    cpuClock
	cpuCtx context.Context
	one    [1]uint32 // the future an op with the await flag waits on

	outProduced int64
	outBuf      []outputChunk // not yet recorded

	parkedBytes uint64 // its memory when it was parked (Host.warmBytes)
	parkedSeq   uint64 // the run's last event when it was parked
	restored    bool   // made from a snapshot
	warmed      bool   // taken from the warm pool for this activation

	buf  []byte
	meta []byte
}

func (h *Host) newWorkflowInstance(ctx context.Context, rs *state.Run, lp *loadedPlugin, checkOnly bool) (*wfInstance, error) {
	// The guest replays from the start: the whole state.
	if err := rs.Expand(); err != nil {
		return nil, err
	}
	w := &wfInstance{h: h, rs: rs, plugin: lp, limits: lp.limits, checkOnly: checkOnly, rng: newRNG(rs)}
	w.clock.advance(rs.Start)
	if rs.Acts() > 0 {
		w.clock.advance(rs.Marker(0).Time) // the guest starts in activation 0
	}
	if rs.Created != nil && rs.Created.SharedInit {
		// Initialised alike, then bound to the run (preinit.go).
		f, err := h.takeFresh(ctx, lp)
		if err != nil {
			return nil, err
		}
		f.b.bind(w)
		w.inst = f.inst
		return w, nil
	}
	inst, err := lp.cm.Instantiate(ctx, InstanceConfig{
		Clock:       &w.clock,
		Random:      w.rng,
		Stdout:      outWriter{w, "stdout"},
		Stderr:      outWriter{w, "stderr"},
		MemoryLimit: lp.limits.MemoryBytes,
		CPULimit:    lp.limits.CPUTime,
		Name:        lp.m.Name,
		Ops:         w,
	})
	if err != nil {
		return nil, err
	}
	h.insts.made.Add(1)
	w.inst = inst
	if err := checkVersion(ctx, inst); err != nil {
		inst.Close(ctx)
		return nil, err
	}
	return w, nil
}

// newRNG is the run's generator: seeded per run, recorded in the log.
func newRNG(rs *state.Run) *rand.ChaCha8 { return rand.NewChaCha8(rs.Seed) }

func checkVersion(ctx context.Context, inst Instance) error {
	v, err := inst.Call(ctx, abi.VersionExport)
	if err != nil {
		return err
	}
	if v != abi.Version {
		return &PluginError{Reason: "abi_version", Detail: fmt.Sprintf("guest reports ABI version %d; this host implements version %d", v, abi.Version)}
	}
	return nil
}

// begin prepares the instance for an activation of its run.
func (w *wfInstance) begin(b *batch) {
	w.batch, w.suspended, w.completed, w.waiting, w.err = b, false, false, nil, nil
	w.startCursor = w.cursor
}

func (w *wfInstance) close(ctx context.Context) {
	if w.inst != nil {
		w.inst.Close(ctx)
		w.inst = nil
	}
}

// Op implements OpHandler.
func (w *wfInstance) Op(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
	body, err := w.op(ctx, kind, name, payload)
	if err == nil {
		// A lazy state that could not be completed answered as if ops it
		// left out did not exist: the activation fails instead, and the
		// run stays as it was.
		err = w.rs.LazyErr()
	}
	return body, err
}

// op answers one op of the guest's: it checks the op's flags and kind,
// answers the ops that are not recorded, then the recorded ones from the
// log while the guest replays and for real past it (frontier).
func (w *wfInstance) op(ctx context.Context, kind abi.OpKind, name, payload []byte) ([]byte, error) {
	w.ctx = ctx
	probe := kind&abi.OpFlagIfRecorded != 0
	andWait := kind&abi.OpFlagAwait != 0
	kind &^= abi.OpFlagIfRecorded | abi.OpFlagAwait
	if probe && !kind.Recorded() {
		return w.refuse(abi.StatusBadRequest, fmt.Sprintf("op %s takes no if-recorded flag: it is not recorded", kind)), nil
	}
	if andWait {
		if !kind.MakesFuture() {
			return w.refuse(abi.StatusBadRequest, fmt.Sprintf("op %s takes no await flag: it makes no future", kind)), nil
		}
		k := kind
		if probe {
			k |= abi.OpFlagIfRecorded
		}
		return w.waitIfPending(w.Op(ctx, k, name, payload))
	}
	// unfit's checks but the name's concern few ops: the others have only
	// the name checked, here, without a call on the replay path.
	if !kind.InWorkflow() || w.suspended || w.completed || kind == abi.OpReceive || kind == abi.OpReply {
		if body, err := w.unfit(kind, name); body != nil || err != nil {
			return body, err
		}
	} else if kind.Recorded() {
		if msg := checkName(kind, name); msg != "" {
			return w.refuse(abi.StatusBadRequest, kind.String()+": "+msg), nil
		}
	}
	switch kind {
	case abi.OpInput:
		return w.ok(0, w.rs.Created.Input), nil
	case abi.OpMetadata:
		if w.meta == nil {
			w.meta = mustJSON(metadata(w.rs, ""))
		}
		return w.ok(0, w.meta), nil
	case abi.OpAwait:
		return w.await(payload)
	}
	p := w.cursor + 1
	o := w.rs.Op(p)
	if o == nil {
		return w.frontier(ctx, kind, probe, name, payload, p)
	}
	// Replay, inline (the replay path's cost is per op): the guest must
	// ask for what the history recorded, in the activation it recorded it.
	if o.Kind != kind || o.Name != string(name) {
		return nil, w.nondet(p, OpRef{Kind: kind, Name: string(name), Activation: w.act}, "")
	}
	if o.Act != w.act {
		return nil, w.nondet(p, OpRef{Kind: kind, Name: string(name), Activation: w.act},
			fmt.Sprintf("recorded in activation %d, asked for in activation %d", o.Act, w.act))
	}
	w.cursor = p
	w.clock.advance(o.Time)
	if w.checkOnly && kind == abi.OpComplete {
		w.ended, w.endProbed = bytes.Clone(payload), probe
	}
	return w.answer(o, p), nil
}

// waitIfPending completes an op sent with the await flag, whose answer
// without the flag is body: if the op's future is pending, a wait for it
// alone.
func (w *wfInstance) waitIfPending(body []byte, err error) ([]byte, error) {
	if err != nil || len(body) < abi.BodyHeaderSize || abi.Status(binary.LittleEndian.Uint32(body)) != abi.StatusPending {
		return body, err
	}
	p := binary.LittleEndian.Uint32(body[4:])
	w.one[0] = p // wait does not keep it
	return w.wait(abi.AwaitAll, w.one[:], p)
}

// unfit refuses an op the workflow body may not make, or fails the
// activation for one made after the body suspended or completed; nil, nil
// for an op that may go on. Its refusals are not recorded: they depend on
// nothing but the op and the plugin, so a replay gets them again.
func (w *wfInstance) unfit(kind abi.OpKind, name []byte) ([]byte, error) {
	if !kind.InWorkflow() {
		switch {
		case kind == abi.OpDescribe:
			return w.refuse(abi.StatusNotAllowed, "op describe is allowed only in sandflow_describe, at upload"), nil
		case kind.Valid():
			return w.refuse(abi.StatusNotAllowed, fmt.Sprintf("op %s is allowed only in a step", kind)), nil
		}
		return w.refuse(abi.StatusUnknownOp, fmt.Sprintf("unknown op kind %d", uint32(kind))), nil
	}
	if w.suspended || w.completed {
		return nil, &GuestError{Message: fmt.Sprintf("ABI violation: op %s after the workflow suspended or completed", kind)}
	}
	if kind.Recorded() {
		// A malformed name is refused before anything else and takes no
		// position: the refusal depends on nothing but the op, so a replay
		// gets it again without its being recorded.
		if msg := checkName(kind, name); msg != "" {
			return w.refuse(abi.StatusBadRequest, kind.String()+": "+msg), nil
		}
	}
	if (kind == abi.OpReceive || kind == abi.OpReply) && w.plugin.m.Entry != EntryServe {
		// Like a malformed name: depends only on the plugin, so not recorded.
		return w.refuse(abi.StatusNotAllowed, fmt.Sprintf("op %s is allowed only in a serve tool (this tool's entry is %s)", kind, w.plugin.m.Entry)), nil
	}
	return nil, nil
}

// frontier answers a recorded op past the history, at position p: it runs
// for real (live), unless this is a check-only replay, which stops here,
// or the guest is still in an activation the history went past.
func (w *wfInstance) frontier(ctx context.Context, kind abi.OpKind, probe bool, name, payload []byte, p uint32) ([]byte, error) {
	actual := OpRef{Kind: kind, Name: string(name), Activation: w.act}
	if !w.live0 && !w.checkOnly {
		// The replay is over: the new work gets a fresh CPU budget.
		w.live0 = true
		RestartCPU(ctx)
	}
	if w.checkOnly {
		return nil, &frontierError{next: actual}
	}
	if w.act != w.rs.Activation() {
		return nil, w.nondet(p, actual, fmt.Sprintf("the history has no such op but goes on to activation %d", w.act+1))
	}
	if probe {
		return w.body(abi.StatusLive, 0, nil), nil
	}
	if w.rs.LastSeq >= uint64(w.limits.Events) {
		return nil, &LimitError{Limit: "events", Max: int64(w.limits.Events), What: "run " + w.rs.ID}
	}
	if err := w.flushOutput(); err != nil {
		return nil, err
	}
	return w.live(ctx, kind, string(name), payload, p)
}

func (w *wfInstance) nondet(p uint32, actual OpRef, detail string) error {
	var exp OpRef
	if o := w.rs.Op(p); o != nil {
		exp = OpRef{Kind: o.Kind, Name: o.Name, Activation: o.Act}
	}
	return &NonDeterminismError{RunID: w.rs.ID, Position: p, Expected: exp, Actual: actual, Detail: detail}
}

// answer responds to a replayed op.
func (w *wfInstance) answer(o *state.Op, p uint32) []byte {
	if o.Refused != 0 {
		return w.body(o.Refused, 0, o.Value)
	}
	switch o.Kind {
	case abi.OpStep, abi.OpSleep, abi.OpAsk, abi.OpHookNext, abi.OpAgent, abi.OpReceive, abi.OpSignal:
		return w.future(o, p)
	case abi.OpHookCreate:
		return w.ok(p, o.Value)
	case abi.OpReply:
		return w.ok(0, o.Value)
	case abi.OpComplete:
		w.completed = true
	}
	return w.ok(0, nil)
}

func (w *wfInstance) future(o *state.Op, p uint32) []byte {
	if !w.rs.Visible(o, w.act, w.cursor) {
		return w.body(abi.StatusPending, p, nil)
	}
	if o.State == abi.FutureRejected {
		return w.body(abi.StatusRejected, p, o.Value)
	}
	return w.ok(p, o.Value)
}

// live performs a recorded op for the first time. A refused op is
// recorded too, and takes its position: on replay the guest gets the same
// refusal from the log, so a guest that carries on after a refusal replays.
func (w *wfInstance) live(ctx context.Context, kind abi.OpKind, name string, payload []byte, p uint32) ([]byte, error) {
	rs, b := w.rs, w.batch
	var start time.Time
	var o Observer
	if w.h != nil {
		o = w.h.observer()
	}
	if o != nil {
		start = time.Now()
	}
	ev, st, msg, err := w.perform(ctx, kind, name, payload, p)
	if o != nil {
		o.Op(kind, time.Since(start))
	}
	if err != nil {
		return nil, err
	}
	if st != abi.StatusOK {
		ev, err = b.push(EvOpRefused, &history.Data{Op: p, Kind: kind.String(), Name: name, Status: uint32(st),
			Error: &abi.ErrorObject{Type: refusalType(st), Message: kind.String() + ": " + msg}})
		if err != nil {
			return nil, err
		}
	}
	w.cursor = p
	w.clock.advance(ev.Time)
	return w.answer(rs.Op(p), p), nil
}

// perform validates a live op and pushes its event. A refusal is returned
// as a status and a message, with no event pushed. Each op kind has its
// own perform function (perform.go).
func (w *wfInstance) perform(ctx context.Context, kind abi.OpKind, name string, payload []byte, p uint32) (ev store.Event, st abi.Status, msg string, err error) {
	maxPayload := w.limits.PayloadBytes
	if kind == abi.OpComplete {
		maxPayload += abi.EnvelopeBytes // the result itself is checked below
	}
	if len(payload) > maxPayload {
		return refusal(abi.StatusTooLarge, fmt.Sprintf("payload of %d bytes is over the limit of %d", len(payload), maxPayload))
	}
	switch kind {
	case abi.OpStep:
		return w.performStep(name, payload, p)
	case abi.OpSleep:
		return w.performSleep(payload, p)
	case abi.OpAsk:
		return w.performAsk(payload, p)
	case abi.OpHookCreate:
		return w.performHookCreate(ctx, payload, p)
	case abi.OpHookNext, abi.OpHookDispose:
		return w.performHookRef(kind, payload, p)
	case abi.OpWebhookRespond:
		return w.performWebhookRespond(payload, p)
	case abi.OpAgent:
		return w.performAgent(name, payload, p)
	case abi.OpProgress:
		return w.performProgress(payload, p)
	case abi.OpReceive:
		return w.performReceive(payload, p)
	case abi.OpSignal:
		return w.performSignal(payload, p)
	case abi.OpReply:
		return w.performReply(payload, p)
	case abi.OpComplete:
		return w.performComplete(payload, p)
	}
	return refusal(abi.StatusUnknownOp, "unknown op")
}

// outputProblems checks a run's result against its tool's outputSchema,
// returning what fails, or "" when it matches or there is no schema.
func (w *wfInstance) outputProblems(res json.RawMessage) string {
	if w.plugin.output == nil {
		return ""
	}
	v, err := schema.Decode(res)
	if err != nil {
		return err.Error()
	}
	return strings.Join(w.plugin.output.Validate(v), "; ")
}

// hookHolder returns the run that holds a token, other than through a hook
// this run has disposed: "" when it is free. A token held by another live
// hook of this run is held by this run.
func (w *wfInstance) hookHolder(ctx context.Context, tok string) (string, error) {
	for _, h := range w.rs.Hooks {
		if h.Token == tok && !h.Disposed && h.Conflict == "" {
			return w.rs.ID, nil
		}
	}
	hk, err := w.h.store.Hook(ctx, tok)
	switch {
	case errors.Is(err, store.ErrHookNotFound):
		return "", nil
	case err != nil:
		return "", err
	case hk.RunID == w.rs.ID:
		return "", nil // a claim of this run's, released by a dispose not yet committed
	}
	return hk.RunID, nil
}

// maxSleepMs bounds a sleep at about 100 years, and maxUntilMs a wake-up
// time at the start of 2200: the store keeps times up to 2262.
const (
	maxSleepMs = state.MaxSleepMs
	maxUntilMs = 7258118400000
)

// checkName checks a recorded op's name: a step's or an agent's is 1-256
// bytes of UTF-8, the others have none.
func checkName(kind abi.OpKind, name []byte) string {
	if kind != abi.OpStep && kind != abi.OpAgent {
		if len(name) != 0 {
			return "takes no name"
		}
		return ""
	}
	if len(name) == 0 || len(name) > 256 || !utf8.Valid(name) {
		return "name must be 1-256 bytes of UTF-8"
	}
	return ""
}

// await answers an OpAwait: from what the guest's activation can see, moving
// through the recorded activations on replay, suspending at the end.
func (w *wfInstance) await(payload []byte) ([]byte, error) {
	if len(payload) < 8 || len(payload)%4 != 0 {
		return w.refuse(abi.StatusBadRequest, "await: payload must be a u32 mode and 1 or more u32 future ids"), nil
	}
	mode := abi.AwaitMode(binary.LittleEndian.Uint32(payload))
	if m := mode &^ abi.AwaitBlock; m != abi.AwaitAll && m != abi.AwaitAny {
		return w.refuse(abi.StatusBadRequest, fmt.Sprintf("await: unknown mode %#x", uint32(mode))), nil
	}
	n := (len(payload) - 4) / 4
	if n > abi.MaxFuturesPerAwait {
		return w.refuse(abi.StatusBadRequest, fmt.Sprintf("await: %d futures is over the limit of %d", n, abi.MaxFuturesPerAwait)), nil
	}
	futures := make([]uint32, n)
	for i := range futures {
		f := binary.LittleEndian.Uint32(payload[4+4*i:])
		o := w.rs.Op(f)
		if o == nil || f > w.cursor {
			return w.refuse(abi.StatusNotFound, fmt.Sprintf("await: no future %d", f)), nil
		}
		switch {
		case o.Refused != 0:
			return w.refuse(abi.StatusBadRequest, fmt.Sprintf("await: op %d (%s) was refused and made no future", f, o.Kind)), nil
		case !o.Kind.MakesFuture():
			return w.refuse(abi.StatusBadRequest, fmt.Sprintf("await: op %d (%s) is not a future", f, o.Kind)), nil
		}
		futures[i] = f
	}
	return w.wait(mode, futures, 0)
}

// wait waits for futures as an await does. opFuture is set when the wait
// follows an op sent with the await flag: a suspension then names that
// future, and a satisfied wait answers as the op would.
func (w *wfInstance) wait(mode abi.AwaitMode, futures []uint32, opFuture uint32) ([]byte, error) {
	for {
		if w.awaitSatisfied(mode, futures) {
			if opFuture != 0 {
				return w.future(w.rs.Op(opFuture), opFuture), nil
			}
			return w.awaitBody(futures), nil
		}
		// The original execution suspended here. Every op it issued in this
		// activation must have been issued again.
		if o := w.rs.Op(w.cursor + 1); o != nil && o.Act <= w.act {
			return nil, w.nondet(w.cursor+1, OpRef{}, "the guest waits where the history goes on")
		}
		if w.act < w.rs.Activation() {
			w.act++
			w.clock.advance(w.rs.Marker(w.act).Time)
			// Each recorded activation ran within its own CPU budget; its
			// replay gets one too, so whether a run survives does not
			// depend on whether its instance stayed warm.
			if c := w.cpuOf(w.ctx); c != nil {
				c.RenewCPU()
			}
			continue
		}
		break
	}
	w.suspended = true
	if opFuture != 0 {
		futures = []uint32{opFuture} // not w.one, which the next such op reuses
	}
	w.waiting = &history.WaitSet{Mode: mode &^ abi.AwaitBlock, Futures: futures}
	if !w.checkOnly {
		if err := w.flushOutput(); err != nil {
			return nil, err
		}
	}
	if mode&abi.AwaitBlock != 0 {
		return nil, errBlockSuspend
	}
	return w.body(abi.StatusSuspend, opFuture, nil), nil
}

// awaitSatisfied reports whether the guest's activation can see enough of
// the futures settled for the wait to end: any of them (AwaitAny), all,
// or one rejected.
func (w *wfInstance) awaitSatisfied(mode abi.AwaitMode, futures []uint32) bool {
	anyMode := mode&^abi.AwaitBlock == abi.AwaitAny
	settled, rejected := 0, false
	for _, f := range futures {
		if o := w.rs.Op(f); w.rs.Visible(o, w.act, w.cursor) {
			settled++
			rejected = rejected || o.State == abi.FutureRejected
		}
	}
	return anyMode && settled > 0 || settled == len(futures) || rejected
}

// awaitBody is an await's answer: each visible future's state and value.
// It is made at its final size: a fan-out's answer holds every reply, and
// growing it by appends would allocate it about twice over. One larger
// than keepBuf is not kept as w.buf, where an instance that waits would
// hold it.
func (w *wfInstance) awaitBody(futures []uint32) []byte {
	n := abi.BodyHeaderSize
	for _, f := range futures {
		if o := w.rs.Op(f); w.rs.Visible(o, w.act, w.cursor) {
			n += 12 + len(o.Value)
		}
	}
	b := w.buf[:0]
	if n > cap(b) {
		b = make([]byte, 0, n)
	}
	b = appendHeader(b, abi.StatusOK, 0)
	for _, f := range futures {
		o := w.rs.Op(f)
		if !w.rs.Visible(o, w.act, w.cursor) {
			continue
		}
		b = binary.LittleEndian.AppendUint32(b, f)
		b = binary.LittleEndian.AppendUint32(b, uint32(o.State))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(o.Value)))
		b = append(b, o.Value...)
	}
	if cap(b) <= keepBuf {
		w.buf = b
	}
	return b
}

// keepBuf is the largest answer buffer an instance keeps for the next op.
const keepBuf = 1 << 20

// cpuOf is the CPU budget ctx carries, as RestartCPU finds it.
func (w *wfInstance) cpuOf(ctx context.Context) cpuClock {
	if ctx != w.cpuCtx {
		w.cpu, w.cpuCtx = clockOf(ctx), ctx
	}
	return w.cpu
}

func appendHeader(b []byte, st abi.Status, future uint32) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(st))
	return binary.LittleEndian.AppendUint32(b, future)
}

func (w *wfInstance) body(st abi.Status, future uint32, payload []byte) []byte {
	w.buf = appendHeader(w.buf[:0], st, future)
	w.buf = append(w.buf, payload...)
	return w.buf
}

func (w *wfInstance) ok(future uint32, payload []byte) []byte {
	return w.body(abi.StatusOK, future, payload)
}

func (w *wfInstance) refuse(st abi.Status, msg string) []byte {
	return w.body(st, 0, mustJSON(abi.ErrorObject{Type: refusalType(st), Message: msg}))
}

// refusalType is the error type of a refusal: a value over a limit is a
// PayloadTooLargeError, anything else a BadRequestError.
func refusalType(st abi.Status) string {
	if st == abi.StatusTooLarge {
		return abi.ErrTypeTooLarge
	}
	return abi.ErrTypeBadRequest
}

// outWriter captures a workflow instance's stdout or stderr.
type outWriter struct {
	w      *wfInstance
	stream string
}

func (o outWriter) Write(p []byte) (int, error) {
	o.w.output(o.stream, p)
	return len(p), nil
}

// output takes guest output. Output the log already holds (the guest is
// replaying) is skipped by count: a deterministic guest writes the same
// bytes again.
func (w *wfInstance) output(stream string, p []byte) {
	start := w.outProduced
	w.outProduced += int64(len(p))
	if w.checkOnly || w.outProduced <= w.rs.OutProduced {
		return
	}
	if start < w.rs.OutProduced {
		p = p[w.rs.OutProduced-start:]
	}
	if n := len(w.outBuf); n > 0 && w.outBuf[n-1].stream == stream {
		w.outBuf[n-1].data = append(w.outBuf[n-1].data, p...)
	} else {
		w.outBuf = append(w.outBuf, outputChunk{stream: stream, data: append([]byte(nil), p...)})
	}
}

// flushOutput records buffered output, an event per stream switch, within
// the run's cap.
func (w *wfInstance) flushOutput() error {
	if len(w.outBuf) == 0 || w.batch == nil {
		return nil
	}
	chunks := w.outBuf
	w.outBuf = nil
	produced := w.outProduced
	for _, c := range chunks {
		produced -= int64(len(c.data))
	}
	for _, c := range chunks {
		produced += int64(len(c.data))
		data, cut := capOutput(c.data, w.limits.OutputBytes-w.rs.OutRecorded)
		if len(data) == 0 && !cut {
			continue
		}
		if _, err := w.batch.push(EvOutput, &history.Data{Stream: c.stream, Data: string(data), Produced: produced, Cut: cut}); err != nil {
			return err
		}
	}
	return nil
}

func capOutput(b []byte, room int64) ([]byte, bool) {
	if room <= 0 {
		return nil, len(b) > 0
	}
	if int64(len(b)) > room {
		return b[:room], true
	}
	return b, false
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

func checkToken(tok string) string {
	if len(tok) > 256 {
		return "token is over 256 bytes"
	}
	for _, r := range tok {
		if r < 0x21 || r > 0x7e {
			return "token must be printable ASCII without spaces"
		}
	}
	return ""
}

func checkWebhook(w *abi.WebhookSpec) string {
	if w.Manual && w.RespondWith != nil {
		return "a webhook responds manually or with respondWith, not both"
	}
	if w.RespondWith != nil {
		return checkResponse(w.RespondWith)
	}
	return ""
}

func checkResponse(r *abi.HTTPResponse) string {
	if r.Status < 100 || r.Status > 599 {
		return fmt.Sprintf("status %d is not an HTTP status", r.Status)
	}
	switch r.BodyEncoding {
	case "":
	case "base64":
		if _, err := base64.StdEncoding.DecodeString(r.Body); err != nil {
			return "body is not base64"
		}
	default:
		return fmt.Sprintf("bodyEncoding %q is not base64", r.BodyEncoding)
	}
	if len(r.Headers) > 64 {
		return "more than 64 headers"
	}
	for k, v := range r.Headers {
		if k == "" || !validHeader(k) || strings.ContainsAny(v, "\r\n") {
			return fmt.Sprintf("header %q is not a valid HTTP header", k)
		}
	}
	return ""
}

// validHeader reports whether a header name is an HTTP token.
func validHeader(k string) bool {
	for _, c := range k {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", c) {
			return false
		}
	}
	return true
}

func checkRetry(r *abi.RetryPolicy) string {
	if r == nil {
		return ""
	}
	switch {
	case r.MaxAttempts < 0 || r.MaxAttempts > 100:
		return "retry.maxAttempts must be 1-100"
	case r.InitialBackoffMs < 0 || r.MaxBackoffMs < 0:
		return "retry backoff must not be negative"
	case r.BackoffFactor != 0 && (r.BackoffFactor < 1 || r.BackoffFactor > 100):
		return "retry.backoffFactor must be 1-100"
	}
	return ""
}

// parseAsk validates an ask request and fills its defaults.
func parseAsk(payload []byte) (abi.AskRequest, string) {
	var req abi.AskRequest
	if !history.DecodeAskRequest(payload, &req) {
		req = abi.AskRequest{}
		if msg := decodeStrict(payload, &req); msg != "" {
			return req, msg
		}
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return req, "prompt is required"
	}
	if req.Display == "" {
		req.Display = abi.DisplayText
		if len(req.Options) > 0 {
			req.Display = abi.DisplayConfirmation
		}
	}
	switch req.Display {
	case abi.DisplayConfirmation, abi.DisplaySelect, abi.DisplayText:
	default:
		return req, fmt.Sprintf("display %q is not confirmation, select or text", req.Display)
	}
	seen := map[string]bool{}
	for _, o := range req.Options {
		if o.ID == "" || o.Label == "" {
			return req, "every option needs an id and a label"
		}
		if seen[o.ID] {
			return req, fmt.Sprintf("option id %q is repeated", o.ID)
		}
		seen[o.ID] = true
		switch o.Style {
		case "", abi.StylePrimary, abi.StyleDanger, abi.StyleDefault:
		default:
			return req, fmt.Sprintf("option %q has style %q, not primary, danger or default", o.ID, o.Style)
		}
	}
	if len(req.Options) == 0 && req.Display != abi.DisplayText && !req.AllowFreeform {
		return req, "a question with no options must allow a text answer"
	}
	return req, ""
}

// ReplayLog implements engine.Replayer: the log from the guest's position
// on, for an engine that answers a replay near its guest and then passes
// the ops here to check (see op).
func (w *wfInstance) ReplayLog() *engine.ReplayLog {
	rs := w.rs
	if rs.Expand() != nil || int(w.cursor) >= len(rs.Ops) {
		return nil
	}
	if w.meta == nil {
		w.meta = mustJSON(metadata(rs, ""))
	}
	l := &engine.ReplayLog{Input: rs.Created.Input, Metadata: w.meta, Activation: w.act, Cursor: w.cursor,
		Markers: make([]engine.ReplayMarker, rs.Acts()), Ops: make([]engine.ReplayOp, 0, len(rs.Ops)-int(w.cursor))}
	for i := range l.Markers {
		m := rs.Marker(i)
		l.Markers[i] = engine.ReplayMarker{Seq: m.Seq, Time: m.Time.UnixNano()}
	}
	for _, o := range rs.Ops[w.cursor:] {
		l.Ops = append(l.Ops, engine.ReplayOp{Kind: o.Kind, Name: o.Name, Activation: o.Act, Time: o.Time.UnixNano(),
			Refused: o.Refused, Value: o.Value, Settled: o.Settled, State: o.State, ByGuest: o.ByGuest,
			SettleOp: o.SettleOp, SettleSeq: o.SettleSeq})
	}
	return l
}

// decodeStrict decodes a JSON object payload and returns a message saying
// what is wrong with it, or "".
func decodeStrict(payload []byte, v any) string { return jsonutil.DecodeStrict(payload, v) }

func mustJSON(v any) []byte { return jsonutil.Must(v) }
