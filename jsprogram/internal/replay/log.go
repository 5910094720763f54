package replay

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/sandflow/sandflow/abi"
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

// LogBytes is the encoded size of a log.
func LogBytes(l *engine.ReplayLog) int64 {
	n := int64(16 + len(l.Input) + len(l.Metadata) + 4 + 16*len(l.Markers) + 4)
	for i := range l.Ops {
		n += int64(45 + len(l.Ops[i].Name) + len(l.Ops[i].Value))
	}
	return n
}

func EncodeLog(l *engine.ReplayLog) []byte {
	b := make([]byte, 0, LogBytes(l))
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

// reader decodes what EncodeLog and the answered ops append; a short
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

var ErrBadLog = errors.New("jsprogram worker: malformed replay log")

func DecodeLog(b []byte) (*engine.ReplayLog, error) {
	r := &reader{b: b}
	l := &engine.ReplayLog{Activation: int(r.u32()), Cursor: r.u32(), Input: r.bytes(), Metadata: r.bytes()}
	n := int(r.u32())
	if n > len(r.b)/16 {
		return nil, ErrBadLog
	}
	l.Markers = make([]engine.ReplayMarker, n)
	for i := range l.Markers {
		l.Markers[i] = engine.ReplayMarker{Seq: r.u64(), Time: int64(r.u64())}
	}
	n = int(r.u32())
	if n > len(r.b)/45 { // an op takes 45 bytes and more
		return nil, ErrBadLog
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
		return nil, ErrBadLog
	}
	return l, nil
}
