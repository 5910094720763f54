package engine

import "github.com/sandflow/sandflow/abi"

// Replayer is implemented by an OpHandler that can give its engine the
// recorded part of the run its guest is about to replay. An engine whose
// guest runs away from the handler (in another process, say) sends the
// log there once, so the guest's replayed ops are answered near it instead
// of one round trip each; it then passes those ops to Op in their order,
// with what it answered, and checks that Op answers the same. Op stays the
// judge: an engine that finds a difference must not go on with the answer
// it gave (ErrInstanceLost makes the host run the activation again).
type Replayer interface {
	// ReplayLog returns the log from the guest's position on, or nil
	// when there is nothing to replay. It is valid until the next Op.
	ReplayLog() *ReplayLog
}

// ReplayLog is what a replaying guest is answered from: the answers of
// the ops that are not recorded, and the recorded ops with their
// settlements, as the handler answers them.
type ReplayLog struct {
	// Input and Metadata answer OpInput and OpMetadata.
	Input, Metadata []byte
	// Activation is the activation the guest is in, Cursor how many
	// recorded ops it has issued.
	Activation int
	Cursor     uint32
	// Markers are the activations' starts, one per activation the run
	// has begun; the last is the activation being run.
	Markers []ReplayMarker
	// Ops are the recorded ops from position Cursor+1 on.
	Ops []ReplayOp
}

// ReplayMarker is an activation's start: its event's sequence number and
// time (unix ns).
type ReplayMarker struct {
	Seq  uint64
	Time int64
}

// ReplayOp is one recorded op.
type ReplayOp struct {
	Kind       abi.OpKind
	Name       string
	Activation int   // the activation it was issued in
	Time       int64 // its event's time, unix ns: the guest's clock after it
	// Refused is the status a refused op was answered with (0: it was
	// not), Value its error object, or the op's value (a future's when it
	// settled).
	Refused abi.Status
	Value   []byte
	// A future's settlement: Settled, with State, by the event SettleSeq
	// (visible from the activation that begins after it), or ByGuest, by
	// the guest's own op at position SettleOp (visible from that op on).
	Settled   bool
	State     abi.FutureState
	ByGuest   bool
	SettleOp  uint32
	SettleSeq uint64
}
