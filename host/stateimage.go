package host

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"hash/crc32"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// State images. A run's state (runState) is rebuilt from its log, which
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
// holds nil and zero in their places, and is lazy (runState.lazy). Any
// access to a left-out op (runState.op) or marker (runState.marker), and
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
const stateEvery = 64

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
	// refuse is called when the log disagrees with the image: the host
	// loads the run from its log from then on.
	refuse func()
}

type stateImage struct {
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
	Kept         []imageOp   `json:"kept"`
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

// imageOp is an opRec; raw values are []byte so that they come back as
// they were, nil included.
type imageOp struct {
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

func toImageOp(p uint32, o *opRec) imageOp {
	return imageOp{P: p, Kind: o.kind, Name: o.name, Seq: o.seq, T: o.t, Act: o.act,
		Settled: o.settled, SettleSeq: o.settleSeq, ByGuest: o.byGuest, SettleOp: o.settleOp, State: o.state, Value: o.value,
		Input: o.input, Retry: o.retry, Attempt: o.attempt, AttemptOpen: o.attemptOpen, RetryAt: o.retryAt, FireAt: o.fireAt,
		AskID: o.askID, Request: o.request, Hook: o.hook, Index: o.index, Agent: o.agent, Refused: o.refused}
}

func (io *imageOp) opRec() opRec {
	return opRec{kind: io.Kind, name: io.Name, seq: io.Seq, t: io.T, act: io.Act,
		settled: io.Settled, settleSeq: io.SettleSeq, byGuest: io.ByGuest, settleOp: io.SettleOp, state: io.State, value: io.Value,
		input: io.Input, retry: io.Retry, attempt: io.Attempt, attemptOpen: io.AttemptOpen, retryAt: io.RetryAt, fireAt: io.FireAt,
		askID: io.AskID, request: io.Request, hook: io.Hook, index: io.Index, agent: io.Agent, refused: io.Refused}
}

// imageable reports whether the run's state is of the kind an image holds.
func (rs *runState) imageable() bool {
	return rs.created != nil && !rs.status.Terminal() && rs.acts() > 0 && len(rs.hooks) == 0 &&
		len(rs.sessions) == 0 && len(rs.calls) == 1 && len(rs.receives) == 0 && len(rs.aborts) == 0
}

// image encodes the run's state as of its last event, or returns nil when
// it is not imageable.
func (rs *runState) image() []byte {
	if !rs.imageable() {
		return nil
	}
	work := rs.workFrom()
	// Ops before imageFrom had settled, and were before workFrom, when
	// the last image was made: they still are, so only the futures the
	// run waits on are looked at there (and the last op, always kept).
	start := min(rs.imageFrom, work, max(len(rs.ops)-1, 0))
	var waiting map[uint32]bool
	var before []int
	if w := rs.detail.Waiting; w != nil {
		waiting = make(map[uint32]bool, len(w.Futures))
		for _, f := range w.Futures {
			if !waiting[f] && f > 0 && int(f) <= start {
				before = append(before, int(f)-1)
			}
			waiting[f] = true
		}
		slices.Sort(before)
	}
	last := rs.markers[len(rs.markers)-1]
	im := stateImage{V: stateImageVersion, Run: rs.id, Seq: rs.lastSeq,
		Created: history.NewEvent(EvRunCreated, rs.start, rs.created).Data, Start: rs.start,
		Acts: rs.acts(), Last: imageMarker{Seq: last.seq, T: last.t}, Ops: len(rs.ops),
		SettledBelow: work, OpenAsks: rs.openAsks, OutProduced: rs.outProduced, OutRecorded: rs.outRecorded,
		Progress: rs.lastProgress}
	for _, i := range before {
		if o := rs.ops[i]; o != nil {
			im.Kept = append(im.Kept, toImageOp(uint32(i+1), o))
		}
	}
	from := work
	for i := start; i < len(rs.ops); i++ {
		o := rs.ops[i]
		if o == nil {
			continue
		}
		p := uint32(i + 1)
		// A refused op made no future and waits on nothing: it is left
		// out like a settled one. The last op is kept, so that a load
		// can check the op count against the log.
		done := o.settled || o.refused != 0
		if done && i < work && !waiting[p] && i < len(rs.ops)-1 {
			continue
		}
		if !done {
			from = min(from, i)
		}
		im.Kept = append(im.Kept, toImageOp(p, o))
	}
	rs.imageFrom = from
	b := mustJSON(&im)
	// A CRC-32C of the JSON: a damaged image is refused, not loaded.
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// stateFromImage makes the lazy state of the run whose record is rec from
// its image st; load reads the run's first events. The caller applies the
// events after st.Seq.
func stateFromImage(rec store.Run, st store.State, load func(n int) ([]store.Event, error)) (*runState, error) {
	b := st.Data
	if len(b) < 4 || crc32.Checksum(b[:len(b)-4], castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("state image: checksum")
	}
	var im stateImage
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
	rs := newRunState(rec)
	if err := rs.apply(store.Event{Seq: 1, Kind: EvRunCreated, Time: im.Start, Data: im.Created}); err != nil {
		return nil, fmt.Errorf("state image: %w", err)
	}
	// Room for the ops and activations of the events after the image, so
	// that they do not copy the slices.
	rs.ops = make([]*opRec, im.Ops, im.Ops+stateEvery)
	rs.slab = make([]opRec, len(im.Kept))
	prev := uint32(0)
	for i := range im.Kept {
		k := &im.Kept[i]
		if k.P <= prev || int(k.P) > im.Ops || !k.Kind.Recorded() {
			return nil, fmt.Errorf("state image: op %d after op %d of %d", k.P, prev, im.Ops)
		}
		prev = k.P
		rs.slab[i] = k.opRec()
		rs.ops[k.P-1] = &rs.slab[i]
	}
	rs.markBase = im.Acts - 1
	rs.markers = make([]marker, 1, 1+stateEvery)
	rs.markers[0] = marker{seq: im.Last.Seq, t: im.Last.T}
	rs.lastSeq, rs.settledBelow, rs.openAsks = im.Seq, im.SettledBelow, im.OpenAsks
	rs.outProduced, rs.outRecorded, rs.lastProgress = im.OutProduced, im.OutRecorded, im.Progress
	rs.imageSeq, rs.imageFrom = im.Seq, im.SettledBelow
	if len(im.Kept) > 0 {
		rs.imageFrom = min(rs.imageFrom, int(im.Kept[0].P)-1)
	}
	rs.lazy = &lazyLog{seq: im.Seq, load: load}
	return rs, nil
}

// expand completes a lazy state in place: it folds the events the image
// stood for and those applied since, then takes the result, keeping the
// objects the lazy state held. A failure leaves the state lazy and is
// returned again by later calls.
func (rs *runState) expand() error {
	lz := rs.lazy
	if lz == nil {
		return nil
	}
	if lz.err != nil {
		return lz.err
	}
	full, err := rs.fold(lz)
	if err != nil {
		if errors.Is(err, ErrBadHistory) && lz.refuse != nil {
			lz.refuse()
		}
		lz.err = fmt.Errorf("host: run %s: completing its state from the log: %w", rs.id, err)
		return lz.err
	}
	for i, o := range rs.ops {
		if o != nil {
			*o = *full.ops[i]
			full.ops[i] = o
		}
	}
	for k, hr := range rs.hooks {
		*hr = *full.hooks[k]
		full.hooks[k] = hr
	}
	for k, cs := range rs.sessions {
		*cs = *full.sessions[k]
		full.sessions[k] = cs
	}
	full.rec, full.detail, full.imageSeq, full.imageFrom = rs.rec, rs.detail, rs.imageSeq, rs.imageFrom
	*rs = *full
	return nil
}

// fold is the state the lazy one stands for, folded from the log.
func (rs *runState) fold(lz *lazyLog) (*runState, error) {
	evs, err := lz.load(int(lz.seq))
	if err != nil {
		return nil, err
	}
	if uint64(len(evs)) != lz.seq {
		return nil, fmt.Errorf("%w: the log has %d events before the state image at %d", ErrBadHistory, len(evs), lz.seq)
	}
	all := append(evs, lz.tail...)
	full := newRunState(rs.rec)
	full.reserve(len(all), func(i int) string { return all[i].Kind })
	for _, e := range all {
		if err := full.apply(e); err != nil {
			return nil, err
		}
	}
	switch {
	case full.lastSeq != rs.lastSeq || len(full.ops) != len(rs.ops) || full.acts() != rs.acts():
	case len(full.hooks) != len(rs.hooks) || len(full.sessions) != len(rs.sessions):
	default:
		for k := range rs.hooks {
			if full.hooks[k] == nil {
				return nil, fmt.Errorf("%w: hook %d is not in the log", ErrBadHistory, k)
			}
		}
		for k := range rs.sessions {
			if full.sessions[k] == nil {
				return nil, fmt.Errorf("%w: session %q is not in the log", ErrBadHistory, k)
			}
		}
		return full, nil
	}
	return nil, fmt.Errorf("%w: the log folds to %d events, %d ops, %d activations; the state image and the events after it to %d, %d, %d",
		ErrBadHistory, full.lastSeq, len(full.ops), full.acts(), rs.lastSeq, len(rs.ops), rs.acts())
}

// stored notes that the log holds every event applied to the state: a
// lazy state need not keep them to complete itself.
func (rs *runState) stored() {
	if lz := rs.lazy; lz != nil {
		lz.seq, lz.tail = rs.lastSeq, nil
	}
}

// marker is activation i's marker, completing a lazy state that left it
// out. It returns the zero marker when that fails (the failure is kept in
// lazy.err).
func (rs *runState) marker(i int) marker {
	if i >= rs.markBase {
		return rs.markers[i-rs.markBase]
	}
	if rs.expand() != nil {
		return marker{}
	}
	return rs.markers[i]
}

// lazyErr is why a lazy state could not be completed, if it could not.
func (rs *runState) lazyErr() error {
	if rs.lazy == nil {
		return nil
	}
	return rs.lazy.err
}

// imageCounters count the host's use of state images (SnapshotStats).
type imageCounters struct{ loaded, refused, completed atomic.Int64 }

// fromImage loads the lazy state of the run whose record is rec from its
// image and the events after it, or returns nil when it has no image the
// host can use, or one the events after it do not follow (the log rules:
// the caller reads it whole). The error is the store's.
func (h *Host) fromImage(ctx context.Context, rec store.Run) (*runState, error) {
	rs := h.loadImage(ctx, rec)
	if rs == nil {
		return nil, nil
	}
	evs, err := h.store.Events(ctx, rec.ID, rs.lastSeq, 0)
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		if err = rs.apply(e); err != nil {
			break
		}
	}
	if err != nil || rs.lastSeq != rec.LastSeq {
		h.distrustImage(rec.ID, rs.imageSeq)
		return nil, nil
	}
	h.images.loaded.Add(1)
	return rs, nil
}

// loadImage is the lazy state the run's stored image makes, checked against
// the log, or nil.
func (h *Host) loadImage(ctx context.Context, rec store.Run) *runState {
	if h.opts.Snapshots < 0 || rec.Status.Terminal() {
		return nil
	}
	st, err := h.store.State(ctx, rec.ID)
	if err != nil {
		return nil // none, or the log read after says what is wrong
	}
	id := rec.ID
	h.mu.Lock()
	bad, ok := h.badImages[id]
	h.mu.Unlock()
	if ok && st.Seq <= bad {
		return nil
	}
	rs, err := stateFromImage(rec, st, func(n int) ([]store.Event, error) {
		h.images.completed.Add(1)
		return h.store.Events(h.life, id, 0, n)
	})
	if err == nil {
		err = h.checkImage(ctx, rs)
	}
	if err != nil {
		h.images.refused.Add(1)
		return nil
	}
	rs.lazy.refuse = func() { h.distrustImage(id, st.Seq) }
	return rs
}

// checkImage checks a loaded state's shape against the log: the event of
// its last op is that op's, and the last activation's marker is a
// run_resumed event of that activation. The events after the image must
// then go on from there (apply checks each op's position).
func (h *Host) checkImage(ctx context.Context, rs *runState) error {
	at := func(seq uint64) (*history.Data, string, error) {
		evs, err := h.store.Events(ctx, rs.id, seq-1, 1)
		if err != nil {
			return nil, "", err
		}
		if len(evs) != 1 || evs[0].Seq != seq {
			return nil, "", fmt.Errorf("%w: no event %d", ErrBadHistory, seq)
		}
		d, err := history.Decode(evs[0])
		return d, evs[0].Kind, err
	}
	if n := len(rs.ops); n > 0 {
		o := rs.ops[n-1]
		d, kind, err := at(o.seq)
		if err != nil {
			return err
		}
		if d.Op != uint32(n) || kind == EvRunResumed || kind == EvOutput {
			return fmt.Errorf("%w: event %d (%s, op %d) is not the first of op %d", ErrBadHistory, o.seq, kind, d.Op, n)
		}
	}
	m := rs.markers[len(rs.markers)-1]
	d, kind, err := at(m.seq)
	if err != nil {
		return err
	}
	if kind != EvRunResumed || d.Activation != rs.acts()-1 {
		return fmt.Errorf("%w: event %d (%s) is not activation %d's", ErrBadHistory, m.seq, kind, rs.acts()-1)
	}
	return nil
}

// distrustImage stops the run's state images up to seq from being
// loaded, and counts the refusal.
func (h *Host) distrustImage(runID string, seq uint64) {
	h.images.refused.Add(1)
	h.markBad(&h.badImages, runID, seq)
}
