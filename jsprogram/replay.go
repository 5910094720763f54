package jsprogram

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/host/engine"
)

// Fast replay. A program that replays (a start or resume of a run with a
// log, whose program is not parked) would cost a pipe round trip per
// recorded op. Instead the parent sends the worker the run's log once
// ('L', after the activation), and the worker answers the replayed ops
// from it as the host's handler does (replayer.answer mirrors it). At the
// first op it cannot answer so (past the log, a wait the log does not
// satisfy, anything it does not know), and before it ends the activation,
// it sends the ops it answered ('Y'): the parent passes each to the
// host's handler, which stays the judge, and checks that the handler
// answers the same bytes (by CRC-32C and length), clock and budget
// restart. Only then does the worker's first round trip go out. A
// difference is a bug of this file: the engine turns fast replay off and
// the activation runs again (host.ErrInstanceLost) by round trips.
//
// Log ('L'):
//
//	u32 activation | u32 cursor | u32 len | input | u32 len | metadata
//	u32 markers, each: u64 seq | i64 time
//	u32 ops, each: u32 kind | u32 len | name | u32 activation | i64 time |
//	  u32 refused | u8 flags (1 settled, 2 by guest) | u32 state |
//	  u32 settle op | u64 settle seq | u32 len | value
//
// Answered ops ('Y'), each:
//
//	u32 kind | u32 len | name | u32 payload length as issued | u32 len |
//	payload as sent (an await's or a complete's; the handler reads no
//	other replayed op's) | u32 answer length | u32 answer CRC-32C |
//	i64 clock after | u8 budget restarted
//
// Renew ('H', empty, one-way): the worker's replay passed a recorded
// activation, whose budget starts afresh; the parent's backstop does too.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// logBytes is the encoded size of a log.
func logBytes(l *engine.ReplayLog) int64 {
	n := int64(16 + len(l.Input) + len(l.Metadata) + 4 + 16*len(l.Markers) + 4)
	for i := range l.Ops {
		n += int64(45 + len(l.Ops[i].Name) + len(l.Ops[i].Value))
	}
	return n
}

func encodeLog(l *engine.ReplayLog) []byte {
	b := make([]byte, 0, logBytes(l))
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(l.Activation))
	b = le.AppendUint32(b, l.Cursor)
	b = appendBytes(b, l.Input)
	b = appendBytes(b, l.Metadata)
	b = le.AppendUint32(b, uint32(len(l.Markers)))
	for _, m := range l.Markers {
		b = le.AppendUint64(b, m.Seq)
		b = le.AppendUint64(b, uint64(m.Time))
	}
	b = le.AppendUint32(b, uint32(len(l.Ops)))
	for i := range l.Ops {
		o := &l.Ops[i]
		b = le.AppendUint32(b, uint32(o.Kind))
		b = appendBytes(b, []byte(o.Name))
		b = le.AppendUint32(b, uint32(o.Activation))
		b = le.AppendUint64(b, uint64(o.Time))
		b = le.AppendUint32(b, uint32(o.Refused))
		var flags byte
		if o.Settled {
			flags |= 1
		}
		if o.ByGuest {
			flags |= 2
		}
		b = append(b, flags)
		b = le.AppendUint32(b, uint32(o.State))
		b = le.AppendUint32(b, o.SettleOp)
		b = le.AppendUint64(b, o.SettleSeq)
		b = appendBytes(b, o.Value)
	}
	return b
}

func appendBytes(b, p []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// reader decodes what encodeLog and the answered ops append; a short
// input sets bad and reads zeros (up to 8 of them: never what a length
// read from the input asks for).
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if n < 0 || n > len(r.b) {
		r.bad, r.b = true, nil
		return make([]byte, 8)[:min(max(n, 0), 8)]
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) u8() byte      { return r.take(1)[0] }
func (r *reader) u32() uint32   { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64   { return binary.LittleEndian.Uint64(r.take(8)) }
func (r *reader) bytes() []byte { return r.take(int(r.u32())) }

var errBadLog = errors.New("jsprogram worker: malformed replay log")

func decodeLog(b []byte) (*engine.ReplayLog, error) {
	r := &reader{b: b}
	l := &engine.ReplayLog{Activation: int(r.u32()), Cursor: r.u32(), Input: r.bytes(), Metadata: r.bytes()}
	n := int(r.u32())
	if n > len(r.b)/16 {
		return nil, errBadLog
	}
	l.Markers = make([]engine.ReplayMarker, n)
	for i := range l.Markers {
		l.Markers[i] = engine.ReplayMarker{Seq: r.u64(), Time: int64(r.u64())}
	}
	n = int(r.u32())
	if n > len(r.b)/45 { // an op takes 45 bytes and more
		return nil, errBadLog
	}
	l.Ops = make([]engine.ReplayOp, n)
	for i := range l.Ops {
		o := &l.Ops[i]
		o.Kind, o.Name, o.Activation = abi.OpKind(r.u32()), string(r.bytes()), int(r.u32())
		o.Time, o.Refused = int64(r.u64()), abi.Status(r.u32())
		flags := r.u8()
		o.Settled, o.ByGuest = flags&1 != 0, flags&2 != 0
		r.bad = r.bad || flags > 3
		o.State, o.SettleOp, o.SettleSeq, o.Value = abi.FutureState(r.u32()), r.u32(), r.u64(), r.bytes()
	}
	if r.bad || len(r.b) != 0 || len(l.Markers) == 0 || l.Activation >= len(l.Markers) {
		return nil, errBadLog
	}
	return l, nil
}

// replayer answers a replaying program's ops in the worker, as the host's
// handler answers them from the log (host/workflow.go: op, answer, await,
// wait), and keeps what it answered for the parent to check.
type replayer struct {
	l         *engine.ReplayLog
	act       int
	cursor    uint32
	clock     int64
	completed bool
	// answered is the 'Y' frame being built.
	answered []byte
	// renewed is when the worker last sent 'H'.
	renewed time.Time
}

func newReplayer(l *engine.ReplayLog, now int64) *replayer {
	return &replayer{l: l, act: l.Activation, cursor: l.Cursor, clock: now, renewed: time.Now()}
}

// op is the recorded op at position p, or nil.
func (r *replayer) op(p uint32) *engine.ReplayOp {
	if p <= r.l.Cursor || int(p-r.l.Cursor) > len(r.l.Ops) {
		return nil
	}
	return &r.l.Ops[p-r.l.Cursor-1]
}

func (r *replayer) advance(t int64) { r.clock = max(r.clock, t) }

// body is an answer, in a buffer of its own: the program may keep it, as
// it keeps a reply frame's.
func (r *replayer) body(st abi.Status, future uint32, payload []byte) []byte {
	b := make([]byte, 0, abi.BodyHeaderSize+len(payload))
	b = binary.LittleEndian.AppendUint32(b, uint32(st))
	b = binary.LittleEndian.AppendUint32(b, future)
	return append(b, payload...)
}

// answer answers an op as the host's handler would on replay: ok false
// when it cannot say (the op goes to the host instead). fresh: the answer
// passed a recorded activation, whose JavaScript budget starts afresh.
func (r *replayer) answer(kind abi.OpKind, name string, payload []byte) (body []byte, fresh, ok bool) {
	if r.completed {
		return nil, false, false
	}
	switch kind {
	case abi.OpInput:
		return r.body(abi.StatusOK, 0, r.l.Input), false, true
	case abi.OpMetadata:
		return r.body(abi.StatusOK, 0, r.l.Metadata), false, true
	case abi.OpAwait:
		return r.await(payload)
	}
	if !kind.Recorded() || !kind.InWorkflow() {
		return nil, false, false
	}
	p := r.cursor + 1
	o := r.op(p)
	if o == nil || o.Kind != kind || o.Name != name || o.Activation != r.act {
		return nil, false, false
	}
	r.cursor = p
	r.advance(o.Time)
	if o.Refused != 0 {
		return r.body(o.Refused, 0, o.Value), false, true
	}
	switch kind {
	case abi.OpStep, abi.OpSleep, abi.OpAsk, abi.OpHookNext, abi.OpAgent, abi.OpReceive, abi.OpSignal:
		return r.future(o, p), false, true
	case abi.OpHookCreate:
		return r.body(abi.StatusOK, p, o.Value), false, true
	case abi.OpReply:
		return r.body(abi.StatusOK, 0, o.Value), false, true
	case abi.OpComplete:
		r.completed = true
	}
	return r.body(abi.StatusOK, 0, nil), false, true
}

func (r *replayer) visible(o *engine.ReplayOp) bool {
	switch {
	case !o.Settled:
		return false
	case o.ByGuest:
		return r.cursor >= o.SettleOp
	}
	return r.act < len(r.l.Markers) && o.SettleSeq < r.l.Markers[r.act].Seq
}

func (r *replayer) future(o *engine.ReplayOp, p uint32) []byte {
	switch {
	case !r.visible(o):
		return r.body(abi.StatusPending, p, nil)
	case o.State == abi.FutureRejected:
		return r.body(abi.StatusRejected, p, o.Value)
	}
	return r.body(abi.StatusOK, p, o.Value)
}

// await answers an await the log satisfies, moving through the recorded
// activations; a refusal, or a wait the log does not satisfy, is the
// host's to answer.
func (r *replayer) await(payload []byte) (body []byte, fresh, ok bool) {
	if len(payload) < 8 || len(payload)%4 != 0 || (len(payload)-4)/4 > abi.MaxFuturesPerAwait {
		return nil, false, false
	}
	mode := abi.AwaitMode(binary.LittleEndian.Uint32(payload)) &^ abi.AwaitBlock
	if mode != abi.AwaitAll && mode != abi.AwaitAny {
		return nil, false, false
	}
	futures := make([]uint32, (len(payload)-4)/4)
	for i := range futures {
		f := binary.LittleEndian.Uint32(payload[4+4*i:])
		o := r.op(f)
		if o == nil || f > r.cursor || o.Refused != 0 || !o.Kind.MakesFuture() {
			return nil, false, false
		}
		futures[i] = f
	}
	for !r.satisfied(mode, futures) {
		if o := r.op(r.cursor + 1); o != nil && o.Activation <= r.act {
			return nil, false, false
		}
		if r.act >= len(r.l.Markers)-1 {
			return nil, false, false // the run waits: the host's to say
		}
		r.act++
		r.advance(r.l.Markers[r.act].Time)
		fresh = true
	}
	n := abi.BodyHeaderSize
	for _, f := range futures {
		if o := r.op(f); r.visible(o) {
			n += 12 + len(o.Value)
		}
	}
	b := r.body(abi.StatusOK, 0, make([]byte, 0, n-abi.BodyHeaderSize))
	for _, f := range futures {
		if o := r.op(f); r.visible(o) {
			b = binary.LittleEndian.AppendUint32(b, f)
			b = binary.LittleEndian.AppendUint32(b, uint32(o.State))
			b = appendBytes(b, o.Value)
		}
	}
	return b, fresh, true
}

func (r *replayer) satisfied(mode abi.AwaitMode, futures []uint32) bool {
	settled, rejected := 0, false
	for _, f := range futures {
		if o := r.op(f); r.visible(o) {
			settled++
			rejected = rejected || o.State == abi.FutureRejected
		}
	}
	return mode == abi.AwaitAny && settled > 0 || settled == len(futures) || rejected
}

// record keeps an answered op for the parent to check.
func (r *replayer) record(kind abi.OpKind, name string, payload, body []byte, fresh bool) {
	le := binary.LittleEndian
	b := le.AppendUint32(r.answered, uint32(kind))
	b = appendBytes(b, []byte(name))
	b = le.AppendUint32(b, uint32(len(payload)))
	if kind != abi.OpAwait && kind != abi.OpComplete {
		payload = nil
	}
	b = appendBytes(b, payload)
	b = le.AppendUint32(b, uint32(len(body)))
	b = le.AppendUint32(b, crc32.Checksum(body, castagnoli))
	b = le.AppendUint64(b, uint64(r.clock))
	if fresh {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	r.answered = b
}

// errReplayDiffers: the worker answered a replayed op otherwise than the
// host's handler.
var errReplayDiffers = errors.New("jsprogram: the worker's replay answered an op otherwise than the host")

// checkAnswered passes the ops a worker answered from the log to the
// host's handler, in order, and checks its answers against the worker's.
// fresh is set when the handler restarts the budget; count is called with
// each op's share of the activation's in-flight bytes, as a round trip
// would have carried it, and may stop the check with its error.
func (i *instance) checkAnswered(ctx context.Context, b []byte, fresh *bool, count func(int64) error) error {
	r := &reader{b: b}
	for n := 1; len(r.b) > 0; n++ {
		kind, name, issued, payload := abi.OpKind(r.u32()), r.bytes(), r.u32(), r.bytes()
		size, sum, clock, restarted := r.u32(), r.u32(), int64(r.u64()), r.u8() == 1
		if r.bad {
			return fmt.Errorf("jsprogram: a malformed list of replayed ops: %w", errReplayDiffers)
		}
		body, err := i.cfg.Ops.Op(ctx, kind, name, payload)
		if err != nil {
			return err
		}
		if uint32(len(body)) != size || crc32.Checksum(body, castagnoli) != sum || i.cfg.Clock.Now() != clock || *fresh != restarted {
			return fmt.Errorf("%w (op %d of the list, %s)", errReplayDiffers, n, kind)
		}
		*fresh = false
		i.c.e.logReplayed.Add(1)
		if err := count(int64(8 + len(name) + int(issued) + len(body))); err != nil {
			return err
		}
	}
	return nil
}

// replayLog is the log a starting activation replays from, when the
// host's handler gives one and it is worth sending: nil otherwise.
func (i *instance) replayLog(kind string, lim Limits) []byte {
	i.logActs = 0
	if kind != kindProgram && kind != kindTool || i.c.e.slowReplay.Load() {
		return nil
	}
	rp, ok := i.cfg.Ops.(engine.Replayer)
	if !ok {
		return nil
	}
	l := rp.ReplayLog()
	// A log over the in-flight limit replays by round trips, which stop
	// where the limit does.
	if l == nil || logBytes(l) > lim.InFlightBytes {
		return nil
	}
	i.logActs = len(l.Markers)
	return encodeLog(l)
}

// replayDiffered turns fast replay off for the engine and loses the
// activation, which the host runs again.
func (i *instance) replayDiffered(err error) error {
	i.c.e.slowReplay.Store(true)
	return fmt.Errorf("%v: %w", err, host.ErrInstanceLost)
}

// readLog reads the 'L' frame that follows an activation saying so.
func readLog(r *bufio.Reader, lim Limits) (*engine.ReplayLog, error) {
	typ, body, err := readLarge(r, int(min(lim.InFlightBytes, 1<<40))+maxFrame)
	if err != nil {
		return nil, err
	}
	if typ != frameLog {
		return nil, fmt.Errorf("want the log, got frame %q", typ)
	}
	return decodeLog(body)
}

// flushAnswered sends the ops answered from the log so far, for the parent
// to check before anything else of the activation.
func (s *session) flushAnswered() error {
	if len(s.rp.answered) == 0 {
		return nil
	}
	if err := writeFrame(s.w, frameReplayed, s.rp.answered); err != nil {
		s.broken = true
		return fmt.Errorf("jsprogram worker: sending the replayed ops: %w", err)
	}
	s.rp.answered = s.rp.answered[:0]
	return nil
}

// sendAnswered ends the replay from the log: what it answered is sent,
// and every op from now on goes to the host.
func (s *session) sendAnswered() error {
	if s.rp == nil {
		return nil
	}
	err := s.flushAnswered()
	s.rp = nil
	return err
}

// renewEvery is how much of its replay the worker computes at most
// between two 'H' frames, at the recorded activations' ends: the parent's
// backstop then runs out no sooner than without the log (each recorded
// activation is within its own budget, and renewEvery is far under the
// kill grace), and the pipe carries a frame per 10 ms, not one per
// activation.
const renewEvery = 10 * time.Millisecond

// renew tells the parent, at a recorded activation's end, that its
// backstop may start afresh, at most every renewEvery.
func (s *session) renew() error {
	if time.Since(s.rp.renewed) < renewEvery {
		return nil
	}
	s.rp.renewed = time.Now()
	if err := writeFrame(s.w, frameRenew); err != nil {
		s.broken = true
		return fmt.Errorf("jsprogram worker: sending renew: %w", err)
	}
	return nil
}
