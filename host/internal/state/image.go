package state

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"time"

	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/internal/jsonutil"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// State images. A run's state (Run) is rebuilt from its log, which
// costs time in proportion to the log: a run restored from a snapshot
// after a restart would read and fold its whole history before its guest,
// restored in constant time, could go on. So while a run waits, the host
// keeps in the store an image of its state as of an event (written in
// the batch that recorded that event, every stateEvery events), and a
// run's state is loaded from its image and the events after it.
//
// An image holds only what a resume can need: the ops not settled (nor
// refused), the
// ops a scan for work still looks at (from workFrom on), the ops of the
// await the run waits on, the last activation's marker, and the run's
// counters. The other ops and markers are left out: the loaded state
// holds nil and zero in their places, and is lazy (Run.lazy). Any
// access to a left-out op (Run.op) or marker (Run.marker), and
// anything that replays the guest from the start (newWorkflowInstance),
// first completes the state in place from the events the image stood for
// and the events applied since; the objects the lazy state held (ops,
// hooks, sessions) stay the same objects. A snapshot restored at the end
// of the log needs none of that, so resuming it costs the same for a run
// of ten steps as for one of ten thousand.
//
// Only runs whose state is made of ops and markers get images: a run with
// hooks, child sessions, serve calls or aborts loads from its whole log.
// An image is a cache, like a snapshot, and is checked before it is used:
// its CRC, its run and position, and its shape against the log (the
// event of its last op, which it always keeps, and of its last
// activation: checkImage). One that fails, or that the events after it do
// not follow, is dropped and the log is read; one the log turns out to
// disagree with when the state is completed is not loaded again.

// stateEvery is how many events a waiting run's log grows by between two
// images of its state: at most that many events are folded on a load.
const ImageEvery = 64

// stateImageVersion is the image format; an image of another is dropped.
const stateImageVersion = 1

// lazyLog is what completes a state loaded from an image.
type lazyLog struct {
	// load reads the run's first n events.
	load func(n int) ([]store.Event, error)
	// seq is the last event the log held when the state was loaded or
	// last committed (stored), and tail the events applied since.
	seq  uint64
	tail []store.Event
	// err is why completing the state failed; the state stays lazy.
	err error
	// Refuse is called when the log disagrees with the image: the host
	// loads the run from its log from then on.
	Refuse func()
}

// Image is a state image as stored: the run's counters and the ops and
// marker a resume can need (see the comment at the top of this file).
type Image struct {
	V   int    `json:"v"`
	Run string `json:"run"`
	Seq uint64 `json:"seq"`
	// Created is the run_created event's data, and Start its time.
	Created []byte    `json:"created"`
	Start   time.Time `json:"start"`
	// Acts is how many activations began; Last is the last one's marker.
	Acts         int         `json:"acts"`
	Last         imageMarker `json:"last"`
	Ops          int         `json:"ops"`
	Kept         []ImageOp   `json:"kept"`
	SettledBelow int         `json:"settledBelow"`
	OpenAsks     int         `json:"openAsks"`
	OutProduced  int64       `json:"outProduced"`
	OutRecorded  int64       `json:"outRecorded"`
	Progress     []byte      `json:"progress,omitempty"`
}

type imageMarker struct {
	Seq uint64    `json:"seq"`
	T   time.Time `json:"t"`
}

// ImageOp is an Op; raw values are []byte so that they come back as
// they were, nil included.
type ImageOp struct {
	P           uint32            `json:"p"`
	Kind        abi.OpKind        `json:"kind"`
	Name        string            `json:"name,omitempty"`
	Seq         uint64            `json:"seq"`
	T           time.Time         `json:"t"`
	Act         int               `json:"act"`
	Settled     bool              `json:"settled,omitempty"`
	SettleSeq   uint64            `json:"settleSeq,omitempty"`
	ByGuest     bool              `json:"byGuest,omitempty"`
	SettleOp    uint32            `json:"settleOp,omitempty"`
	State       abi.FutureState   `json:"state,omitempty"`
	Value       []byte            `json:"value,omitempty"`
	Input       []byte            `json:"input,omitempty"`
	Retry       *abi.RetryPolicy  `json:"retry,omitempty"`
	Attempt     int               `json:"attempt,omitempty"`
	AttemptOpen bool              `json:"attemptOpen,omitempty"`
	RetryAt     time.Time         `json:"retryAt"`
	FireAt      time.Time         `json:"fireAt"`
	AskID       string            `json:"askId,omitempty"`
	Request     []byte            `json:"request,omitempty"`
	Hook        uint32            `json:"hook,omitempty"`
	Index       int               `json:"index,omitempty"`
	Agent       *abi.AgentRequest `json:"agent,omitempty"`
	Refused     abi.Status        `json:"refused,omitempty"`
}

func ToImageOp(p uint32, o *Op) ImageOp {
	return ImageOp{P: p, Kind: o.Kind, Name: o.Name, Seq: o.Seq, T: o.Time, Act: o.Act,
		Settled: o.Settled, SettleSeq: o.SettleSeq, ByGuest: o.ByGuest, SettleOp: o.SettleOp, State: o.State, Value: o.Value,
		Input: o.Input, Retry: o.Retry, Attempt: o.Attempt, AttemptOpen: o.AttemptOpen, RetryAt: o.RetryAt, FireAt: o.FireAt,
		AskID: o.AskID, Request: o.Request, Hook: o.Hook, Index: o.Index, Agent: o.Agent, Refused: o.Refused}
}

func (io *ImageOp) Op() Op {
	return Op{Kind: io.Kind, Name: io.Name, Seq: io.Seq, Time: io.T, Act: io.Act,
		Settled: io.Settled, SettleSeq: io.SettleSeq, ByGuest: io.ByGuest, SettleOp: io.SettleOp, State: io.State, Value: io.Value,
		Input: io.Input, Retry: io.Retry, Attempt: io.Attempt, AttemptOpen: io.AttemptOpen, RetryAt: io.RetryAt, FireAt: io.FireAt,
		AskID: io.AskID, Request: io.Request, Hook: io.Hook, Index: io.Index, Agent: io.Agent, Refused: io.Refused}
}

// Imageable reports whether the run's state is of the kind an image holds.
func (rs *Run) Imageable() bool {
	return rs.Created != nil && !rs.Status.Terminal() && rs.Acts() > 0 && len(rs.Hooks) == 0 &&
		len(rs.Sessions) == 0 && len(rs.Calls) == 1 && len(rs.Receives) == 0 && len(rs.Aborts) == 0
}

// Image encodes the run's state as of its last event, or returns nil when
// it is not imageable.
func (rs *Run) Image() []byte {
	if !rs.Imageable() {
		return nil
	}
	work := rs.workFrom()
	// Ops before imageFrom had settled, and were before workFrom, when
	// the last image was made: they still are, so only the futures the
	// run waits on are looked at there (and the last op, always kept).
	start := min(rs.imageFrom, work, max(len(rs.Ops)-1, 0))
	var waiting map[uint32]bool
	var before []int
	if w := rs.Detail.Waiting; w != nil {
		waiting = make(map[uint32]bool, len(w.Futures))
		for _, f := range w.Futures {
			if !waiting[f] && f > 0 && int(f) <= start {
				before = append(before, int(f)-1)
			}
			waiting[f] = true
		}
		slices.Sort(before)
	}
	last := rs.Markers[len(rs.Markers)-1]
	im := Image{V: stateImageVersion, Run: rs.ID, Seq: rs.LastSeq,
		Created: history.NewEvent(history.KindRunCreated, rs.Start, rs.Created).Data, Start: rs.Start,
		Acts: rs.Acts(), Last: imageMarker{Seq: last.Seq, T: last.Time}, Ops: len(rs.Ops),
		SettledBelow: work, OpenAsks: rs.OpenAsks, OutProduced: rs.OutProduced, OutRecorded: rs.OutRecorded,
		Progress: rs.LastProgress}
	for _, i := range before {
		if o := rs.Ops[i]; o != nil {
			im.Kept = append(im.Kept, ToImageOp(uint32(i+1), o))
		}
	}
	from := work
	for i := start; i < len(rs.Ops); i++ {
		o := rs.Ops[i]
		if o == nil {
			continue
		}
		p := uint32(i + 1)
		// A refused op made no future and waits on nothing: it is left
		// out like a settled one. The last op is kept, so that a load
		// can check the op count against the log.
		done := o.Settled || o.Refused != 0
		if done && i < work && !waiting[p] && i < len(rs.Ops)-1 {
			continue
		}
		if !done {
			from = min(from, i)
		}
		im.Kept = append(im.Kept, ToImageOp(p, o))
	}
	rs.imageFrom = from
	b := jsonutil.Must(&im)
	// A CRC-32C of the JSON: a damaged image is refused, not loaded.
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// stateFromImage makes the lazy state of the run whose record is rec from
// its image st; load reads the run's first events. The caller applies the
// events after st.Seq.
func FromImage(rec store.Run, st store.State, load func(n int) ([]store.Event, error)) (*Run, error) {
	b := st.Data
	if len(b) < 4 || crc32.Checksum(b[:len(b)-4], castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("state image: checksum")
	}
	var im Image
	if err := json.Unmarshal(b[:len(b)-4], &im); err != nil {
		return nil, fmt.Errorf("state image: %w", err)
	}
	switch {
	case im.V != stateImageVersion:
		return nil, fmt.Errorf("state image: format %d", im.V)
	case im.Run != rec.ID || im.Seq != st.Seq || im.Seq > rec.LastSeq || im.Seq < 2:
		return nil, fmt.Errorf("state image: of run %q at event %d, not of run %q at or before %d", im.Run, im.Seq, rec.ID, rec.LastSeq)
	case im.Acts < 1 || im.Last.Seq < 2 || im.Last.Seq > im.Seq || im.Ops < len(im.Kept) || im.Ops > int(im.Seq):
		return nil, fmt.Errorf("state image: %d activations, %d ops at event %d", im.Acts, im.Ops, im.Seq)
	case im.SettledBelow < 0 || im.SettledBelow > im.Ops || im.OpenAsks < 0:
		return nil, fmt.Errorf("state image: counters")
	case im.Ops > 0 && (len(im.Kept) == 0 || int(im.Kept[len(im.Kept)-1].P) != im.Ops):
		return nil, fmt.Errorf("state image: the last of its %d ops is not kept", im.Ops)
	}
	rs := New(rec)
	if err := rs.Apply(store.Event{Seq: 1, Kind: history.KindRunCreated, Time: im.Start, Data: im.Created}); err != nil {
		return nil, fmt.Errorf("state image: %w", err)
	}
	// Room for the ops and activations of the events after the image, so
	// that they do not copy the slices.
	rs.Ops = make([]*Op, im.Ops, im.Ops+ImageEvery)
	rs.slab = make([]Op, len(im.Kept))
	prev := uint32(0)
	for i := range im.Kept {
		k := &im.Kept[i]
		if k.P <= prev || int(k.P) > im.Ops || !k.Kind.Recorded() {
			return nil, fmt.Errorf("state image: op %d after op %d of %d", k.P, prev, im.Ops)
		}
		prev = k.P
		rs.slab[i] = k.Op()
		rs.Ops[k.P-1] = &rs.slab[i]
	}
	rs.MarkBase = im.Acts - 1
	rs.Markers = make([]Marker, 1, 1+ImageEvery)
	rs.Markers[0] = Marker{Seq: im.Last.Seq, Time: im.Last.T}
	rs.LastSeq, rs.settledBelow, rs.OpenAsks = im.Seq, im.SettledBelow, im.OpenAsks
	rs.OutProduced, rs.OutRecorded, rs.LastProgress = im.OutProduced, im.OutRecorded, im.Progress
	rs.ImageSeq, rs.imageFrom = im.Seq, im.SettledBelow
	if len(im.Kept) > 0 {
		rs.imageFrom = min(rs.imageFrom, int(im.Kept[0].P)-1)
	}
	rs.Lazy = &lazyLog{seq: im.Seq, load: load}
	return rs, nil
}

// Expand completes a lazy state in place: it folds the events the image
// stood for and those applied since, then takes the result, keeping the
// objects the lazy state held. A failure leaves the state lazy and is
// returned again by later calls.
func (rs *Run) Expand() error {
	lz := rs.Lazy
	if lz == nil {
		return nil
	}
	if lz.err != nil {
		return lz.err
	}
	full, err := rs.fold(lz)
	if err != nil {
		if errors.Is(err, history.ErrBadHistory) && lz.Refuse != nil {
			lz.Refuse()
		}
		lz.err = fmt.Errorf("host: run %s: completing its state from the log: %w", rs.ID, err)
		return lz.err
	}
	for i, o := range rs.Ops {
		if o != nil {
			*o = *full.Ops[i]
			full.Ops[i] = o
		}
	}
	for k, hr := range rs.Hooks {
		*hr = *full.Hooks[k]
		full.Hooks[k] = hr
	}
	for k, cs := range rs.Sessions {
		*cs = *full.Sessions[k]
		full.Sessions[k] = cs
	}
	full.Rec, full.Detail, full.ImageSeq, full.imageFrom = rs.Rec, rs.Detail, rs.ImageSeq, rs.imageFrom
	*rs = *full
	return nil
}

// fold is the state the lazy one stands for, folded from the log.
func (rs *Run) fold(lz *lazyLog) (*Run, error) {
	evs, err := lz.load(int(lz.seq))
	if err != nil {
		return nil, err
	}
	if uint64(len(evs)) != lz.seq {
		return nil, fmt.Errorf("%w: the log has %d events before the state image at %d", history.ErrBadHistory, len(evs), lz.seq)
	}
	all := append(evs, lz.tail...)
	full := New(rs.Rec)
	full.Reserve(len(all), func(i int) string { return all[i].Kind })
	for _, e := range all {
		if err := full.Apply(e); err != nil {
			return nil, err
		}
	}
	switch {
	case full.LastSeq != rs.LastSeq || len(full.Ops) != len(rs.Ops) || full.Acts() != rs.Acts():
	case len(full.Hooks) != len(rs.Hooks) || len(full.Sessions) != len(rs.Sessions):
	default:
		for k := range rs.Hooks {
			if full.Hooks[k] == nil {
				return nil, fmt.Errorf("%w: hook %d is not in the log", history.ErrBadHistory, k)
			}
		}
		for k := range rs.Sessions {
			if full.Sessions[k] == nil {
				return nil, fmt.Errorf("%w: session %q is not in the log", history.ErrBadHistory, k)
			}
		}
		return full, nil
	}
	return nil, fmt.Errorf("%w: the log folds to %d events, %d ops, %d activations; the state image and the events after it to %d, %d, %d",
		history.ErrBadHistory, full.LastSeq, len(full.Ops), full.Acts(), rs.LastSeq, len(rs.Ops), rs.Acts())
}

// Stored notes that the log holds every event applied to the state: a
// lazy state need not keep them to complete itself.
func (rs *Run) Stored() {
	if lz := rs.Lazy; lz != nil {
		lz.seq, lz.tail = rs.LastSeq, nil
	}
}

// Marker is activation i's marker, completing a lazy state that left it
// out. It returns the zero marker when that fails (the failure is kept in
// lazy.err).
func (rs *Run) Marker(i int) Marker {
	if i >= rs.MarkBase {
		return rs.Markers[i-rs.MarkBase]
	}
	if rs.Expand() != nil {
		return Marker{}
	}
	return rs.Markers[i]
}

// LazyErr is why a lazy state could not be completed, if it could not.
func (rs *Run) LazyErr() error {
	if rs.Lazy == nil {
		return nil
	}
	return rs.Lazy.err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
