package replay

import (
	"encoding/binary"
	"hash/crc32"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host/engine"
)

// Replayer answers a replaying program's ops in the worker, as the host's
// handler answers them from the log (host/workflow.go: op, answer, await,
// wait), and keeps what it answered for the parent to check.
type Replayer struct {
	l      *engine.ReplayLog
	act    int
	cursor uint32
	// Clock is the run's clock after the last op answered.
	Clock     int64
	completed bool
	// Answered is the 'Y' frame being built.
	Answered []byte
	// Renewed is when the worker last sent 'H'.
	Renewed time.Time
}

// New is a replayer of l for an activation that starts at now.
func New(l *engine.ReplayLog, now int64) *Replayer {
	return &Replayer{l: l, act: l.Activation, cursor: l.Cursor, Clock: now, Renewed: time.Now()}
}

// op is the recorded op at position p, or nil.
func (r *Replayer) op(p uint32) *engine.ReplayOp {
	if p <= r.l.Cursor || int(p-r.l.Cursor) > len(r.l.Ops) {
		return nil
	}
	return &r.l.Ops[p-r.l.Cursor-1]
}

func (r *Replayer) advance(t int64) { r.Clock = max(r.Clock, t) }

// body is an answer, in a buffer of its own: the program may keep it, as
// it keeps a reply frame's.
func (r *Replayer) body(st abi.Status, future uint32, payload []byte) []byte {
	b := make([]byte, 0, abi.BodyHeaderSize+len(payload))
	b = binary.LittleEndian.AppendUint32(b, uint32(st))
	b = binary.LittleEndian.AppendUint32(b, future)
	return append(b, payload...)
}

// Answer answers an op as the host's handler would on replay: ok false
// when it cannot say (the op goes to the host instead). fresh: the answer
// passed a recorded activation, whose JavaScript budget starts afresh.
func (r *Replayer) Answer(kind abi.OpKind, name string, payload []byte) (body []byte, fresh, ok bool) {
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

func (r *Replayer) visible(o *engine.ReplayOp) bool {
	switch {
	case !o.Settled:
		return false
	case o.ByGuest:
		return r.cursor >= o.SettleOp
	}
	return r.act < len(r.l.Markers) && o.SettleSeq < r.l.Markers[r.act].Seq
}

func (r *Replayer) future(o *engine.ReplayOp, p uint32) []byte {
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
func (r *Replayer) await(payload []byte) (body []byte, fresh, ok bool) {
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

func (r *Replayer) satisfied(mode abi.AwaitMode, futures []uint32) bool {
	settled, rejected := 0, false
	for _, f := range futures {
		if o := r.op(f); r.visible(o) {
			settled++
			rejected = rejected || o.State == abi.FutureRejected
		}
	}
	return mode == abi.AwaitAny && settled > 0 || settled == len(futures) || rejected
}

// Record keeps an answered op for the parent to check.
func (r *Replayer) Record(kind abi.OpKind, name string, payload, body []byte, fresh bool) {
	le := binary.LittleEndian
	b := le.AppendUint32(r.Answered, uint32(kind))
	b = appendBytes(b, []byte(name))
	b = le.AppendUint32(b, uint32(len(payload)))
	if kind != abi.OpAwait && kind != abi.OpComplete {
		payload = nil
	}
	b = appendBytes(b, payload)
	b = le.AppendUint32(b, uint32(len(body)))
	b = le.AppendUint32(b, crc32.Checksum(body, castagnoli))
	b = le.AppendUint64(b, uint64(r.Clock))
	if fresh {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	r.Answered = b
}
