package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"
	"math/rand/v2"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// FuzzWorkflowOp drives a workflow instance's op handler (what a guest
// reaches through sandflow.op) with fuzzer-chosen op sequences, without any
// WebAssembly, and checks that whatever a guest sends:
//
//   - Op never panics and, live, never fails: it answers every op with a
//     body of at least 8 bytes whose status is one of the ABI's, shaped as
//     the ABI says for that op;
//   - the events it records are a log the state machine accepts, from
//     scratch, after every op, and the batch commits to the store;
//   - a replay of the same op sequence on a fresh instance over the
//     recorded log gets byte-identical answers and records nothing.
//
// Input framing: byte 0 holds run flags (bit 0: the caller is NoAsk); then
// ops, each [kind][name len][payload len, u16 LE][name][payload], truncated
// at the end of the input. The kind byte: bits 0-3 are the op kind (0-15)
// when bits 4-6 are zero, else the byte itself is the kind (unknown kinds);
// bit 7 ors in abi.OpFlagIfRecorded. A guest that gets StatusLive for a
// flagged op sends it again without the flag, as the ABI says.
//
// Seeds: testdata/fuzz/FuzzWorkflowOp/: seed-* exercise every op kind with
// valid and malformed payloads, crash-* are the inputs of the bugs this
// target found (see fuzz_regress_internal_test.go). fuzzEncodeOps writes
// new ones.

type fuzzOp struct {
	kind          abi.OpKind
	name, payload []byte
}

const fuzzMaxOps = 64

func fuzzDecodeOps(data []byte) (noAsk bool, ops []fuzzOp) {
	if len(data) == 0 {
		return false, nil
	}
	noAsk, data = data[0]&1 != 0, data[1:]
	take := func(n int) []byte {
		n = min(n, len(data))
		b := data[:n:n]
		data = data[n:]
		return b
	}
	for len(data) > 0 && len(ops) < fuzzMaxOps {
		k := data[0]
		kind := abi.OpKind(k & 0x0f)
		if k&0x70 != 0 {
			kind = abi.OpKind(k & 0x7f)
		}
		if k&0x80 != 0 {
			kind |= abi.OpFlagIfRecorded
		}
		data = data[1:]
		var nl, pl int
		if h := take(3); len(h) == 3 {
			nl, pl = int(h[0]), int(binary.LittleEndian.Uint16(h[1:]))
		}
		name := take(nl)
		payload := take(pl)
		ops = append(ops, fuzzOp{kind: kind, name: name, payload: payload})
	}
	return noAsk, ops
}

func fuzzEncodeOps(noAsk bool, ops ...fuzzOp) []byte {
	b := []byte{0}
	if noAsk {
		b[0] = 1
	}
	for _, op := range ops {
		k := byte(op.kind &^ abi.OpFlagIfRecorded)
		if op.kind&^abi.OpFlagIfRecorded > 0x7f {
			panic("fuzzEncodeOps: kind does not fit the framing")
		}
		if op.kind&abi.OpFlagIfRecorded != 0 {
			k |= 0x80
		}
		b = append(b, k, byte(len(op.name)))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(op.payload)))
		b = append(b, op.name...)
		b = append(b, op.payload...)
	}
	return b
}

// fop builds a fuzzOp.
func fop(kind abi.OpKind, name, payload string) fuzzOp {
	return fuzzOp{kind: kind, name: []byte(name), payload: []byte(payload)}
}

func fawait(mode abi.AwaitMode, futures ...uint32) fuzzOp {
	b := binary.LittleEndian.AppendUint32(nil, uint32(mode))
	for _, f := range futures {
		b = binary.LittleEndian.AppendUint32(b, f)
	}
	return fuzzOp{kind: abi.OpAwait, payload: b}
}

// fuzzHeldToken is a hook token another run holds in every fuzz store.
const fuzzHeldToken = "held-by-other"

type fuzzOpsEnv struct {
	ctx context.Context
	st  *store.Bolt
	h   *Host
	n   atomic.Int64
}

func newFuzzOpsEnv(tb testing.TB) *fuzzOpsEnv {
	ctx := context.Background()
	st, err := store.Open(filepath.Join(tb.TempDir(), "fuzz.db"), &store.Options{NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	h, err := Open(ctx, st, nil)
	if err != nil {
		st.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		h.Close(ctx)
		st.Close()
	})
	if holder, err := st.ClaimHook(ctx, fuzzHeldToken, "fuzz-holder", 1); err != nil || holder != "" {
		tb.Fatalf("claiming the held token: %q, %v", holder, err)
	}
	return &fuzzOpsEnv{ctx: ctx, st: st, h: h}
}

// fuzzLimits are the default limits with a small payload limit, so that
// too_large is reachable.
var fuzzLimits = func() Limits {
	l := DefaultLimits
	l.PayloadBytes = 512
	return l
}()

// fuzzRun is a run created in the store, at its first activation.
type fuzzRun struct {
	rec     store.Run
	created store.Event
	rs      *state.Run
	b       *batch
	w       *wfInstance
}

func (env *fuzzOpsEnv) newRun(t testing.TB, noAsk bool) *fuzzRun {
	t.Helper()
	id := fmt.Sprintf("fuzz-%d", env.n.Add(1))
	now := time.Now().UTC()
	seed := bytes.Repeat([]byte{0x5a}, 32)
	created := history.NewEvent(EvRunCreated, now, &history.Data{Tool: "fuzz", Plugin: "fuzz", Version: 1, ModuleHash: "00",
		Input: json.RawMessage(`{"n":1}`), Seed: hex.EncodeToString(seed), NoAsk: noAsk})
	created.Seq = 1
	rec := store.Run{ID: id, Tool: "fuzz", Plugin: "fuzz", Version: 1, ModuleHash: "00",
		Status: store.StatusRunning, CreatedAt: now, UpdatedAt: now, LastSeq: 1}
	if err := env.st.CreateRun(env.ctx, rec, store.Batch{Events: []store.Event{created}}); err != nil {
		t.Fatal(err)
	}
	r := &fuzzRun{rec: rec, created: created}
	r.rs = r.replayState(t, nil)
	r.b = newBatch(r.rs)
	if _, err := r.b.push(EvRunResumed, &history.Data{Activation: 0}); err != nil {
		t.Fatal(err)
	}
	r.w = env.instance(r.rs)
	r.w.begin(r.b)
	return r
}

// replayState rebuilds the run's state from its first event and evs.
func (r *fuzzRun) replayState(t testing.TB, evs []store.Event) *state.Run {
	t.Helper()
	rs := state.New(r.rec)
	for _, e := range append([]store.Event{r.created}, evs...) {
		if err := rs.Apply(e); err != nil {
			t.Fatalf("the recorded log does not replay: event %d (%s %s): %v", e.Seq, e.Kind, e.Data, err)
		}
	}
	return rs
}

func (env *fuzzOpsEnv) instance(rs *state.Run) *wfInstance {
	w := &wfInstance{h: env.h, rs: rs, plugin: &loadedPlugin{limits: fuzzLimits}, limits: fuzzLimits, rng: rand.NewChaCha8(rs.Seed)}
	w.clock.advance(rs.Start)
	return w
}

// release frees the hook tokens the run claimed and drops its timers, so
// fuzz iterations do not see each other's.
func (env *fuzzOpsEnv) release(t testing.TB, id string, rs *state.Run) {
	var toks []string
	for _, h := range rs.Hooks {
		toks = append(toks, h.Token)
	}
	timers, err := env.st.DueTimers(env.ctx, fuzzFarFuture, 0)
	if err != nil {
		t.Fatal(err)
	}
	timers = slices.DeleteFunc(timers, func(tm store.Timer) bool { return tm.RunID != id })
	if len(toks) == 0 && len(timers) == 0 {
		return
	}
	rec, err := env.st.Run(env.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.st.Append(env.ctx, id, rec.LastSeq, store.Batch{Run: &rec, ReleaseHooks: toks, DeleteTimers: timers}); err != nil {
		t.Fatal(err)
	}
}

func FuzzWorkflowOp(f *testing.F) {
	env := newFuzzOpsEnv(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		noAsk, ops := fuzzDecodeOps(data)
		fuzzCheckOps(t, env, noAsk, ops)
	})
}

// fuzzCheckOps runs ops live in a new run, replays them, and commits the
// run, checking the properties of FuzzWorkflowOp.
func fuzzCheckOps(t *testing.T, env *fuzzOpsEnv, noAsk bool, ops []fuzzOp) {
	t.Helper()
	ctx := env.ctx
	r := env.newRun(t, noAsk)
	rs, b, w := r.rs, r.b, r.w
	defer func() { env.release(t, r.rec.ID, rs) }()

	// rs2 follows the log from scratch: after every op, the events it
	// recorded must apply.
	rs2 := r.replayState(t, nil)
	applied := 0
	follow := func(i int) {
		t.Helper()
		for _, e := range b.b.Events[applied:] {
			if err := rs2.Apply(e); err != nil {
				t.Fatalf("op %d: the recorded log does not replay: event %d (%s %s): %v", i, e.Seq, e.Kind, e.Data, err)
			}
		}
		applied = len(b.b.Events)
	}
	follow(-1)
	var answers [][]byte
	for i, op := range ops {
		if w.suspended || w.completed {
			break
		}
		answers = append(answers, fuzzLiveOp(t, i, w, b, op))
		follow(i)
	}
	if got, want := fuzzSummary(rs2), fuzzSummary(rs); got != want {
		t.Fatalf("the recorded log replays to another state:\nlive:   %s\nreplay: %s", want, got)
	}
	if w.completed {
		fuzzCheckEnded(t, rs)
	}

	// Replay: a fresh instance over the log, given the same ops, gives the
	// same answers and records nothing.
	w2 := env.instance(rs2)
	b2 := newBatch(rs2)
	w2.begin(b2)
	for i := range answers {
		op := ops[i]
		body, err := fuzzOpCall(t, w2, op.kind, op.name, op.payload)
		if answers[i] == nil { // the live instance ended in a blocking await
			if !errors.Is(err, errBlockSuspend) {
				t.Fatalf("op %d: a blocking await ended the live instance, the replay answers %x, %v", i, body, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("op %d (%s %q): replay fails where the live run answered %x: %v", i, op.kind, op.name, answers[i], err)
		}
		if !bytes.Equal(body, answers[i]) {
			t.Fatalf("op %d (%s %q): replay answers %x, live answered %x", i, op.kind, op.name, body, answers[i])
		}
	}
	if len(b2.b.Events) != 0 {
		t.Fatalf("the replay recorded %d events", len(b2.b.Events))
	}
	if w2.cursor != w.cursor || w2.suspended != w.suspended || w2.completed != w.completed {
		t.Fatalf("replay ends at op %d suspended=%v completed=%v, live at %d %v %v", w2.cursor, w2.suspended, w2.completed, w.cursor, w.suspended, w.completed)
	}

	// The batch commits as an activation would commit it, and the stored
	// log reads back to the same state.
	if err := w.flushOutput(); err != nil {
		t.Fatal(err)
	}
	want := fuzzSummary(rs)
	rh := &runHandle{id: r.rec.ID, rs: rs}
	if err := env.h.commit(ctx, rh, b, &history.Detail{Waiting: w.waiting}); err != nil {
		t.Fatalf("the activation's batch does not commit: %v", err)
	}
	rh2 := &runHandle{id: r.rec.ID}
	if err := env.h.reload(ctx, rh2, store.Run{}); err != nil {
		t.Fatalf("the committed run does not reload: %v", err)
	}
	if got := fuzzSummary(rh2.rs); got != want {
		t.Fatalf("the stored log reads back to another state:\nlive:   %s\nstored: %s", want, got)
	}
	env.checkIndexes(t, rs)
}

// checkIndexes checks that the store's indexes agree with the committed
// run: a timer for every pending sleep and no other (none once the run
// ended), every live hook's token claimed for it, every question recorded
// open or closed as its op is.
func (env *fuzzOpsEnv) checkIndexes(t *testing.T, rs *state.Run) {
	t.Helper()
	timers, err := env.st.DueTimers(env.ctx, fuzzFarFuture, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, tm := range timers {
		if tm.RunID == rs.ID {
			got = append(got, tm.ID)
		}
	}
	for i, o := range rs.Ops {
		if !rs.Status.Terminal() && o.Kind == abi.OpSleep && o.Refused == 0 && !o.Settled {
			want = append(want, sleepTimer(rs.ID, uint32(i+1), o.FireAt).ID)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the store holds timers %q for run %s (%s), want %q", got, rs.ID, rs.Status, want)
	}
	for id, h := range rs.Hooks {
		if h.Disposed || h.Conflict != "" {
			continue
		}
		hk, err := env.st.Hook(env.ctx, h.Token)
		if err != nil || hk.RunID != rs.ID || hk.HookID != id {
			t.Errorf("live hook %d of run %s has token %q, which the store gives to %+v (%v)", id, rs.ID, h.Token, hk, err)
		}
	}
	for i, o := range rs.Ops {
		if o.Kind != abi.OpAsk || o.AskID == "" {
			continue
		}
		a, err := env.st.Ask(env.ctx, o.AskID)
		if err != nil || a.RunID != rs.ID || a.Position != uint32(i+1) || a.Open != !o.Settled {
			t.Errorf("question %s of op %d (settled: %v) is stored as %+v (%v)", o.AskID, i+1, o.Settled, a, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// fuzzFarFuture is past every timer the store can hold.
var fuzzFarFuture = time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)

// fuzzOpCall calls w.Op, turning a panic into a test failure (so that one
// bad seed does not take the package's other tests down with it).
func fuzzOpCall(t *testing.T, w *wfInstance, kind abi.OpKind, name, payload []byte) (body []byte, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Op(%s, %q, %q) panics: %v\n%s", kind, name, payload, r, debug.Stack())
		}
	}()
	return w.Op(context.Background(), kind, name, payload)
}

// fuzzLiveOp issues one op on a live instance (again without the flag when
// the host answers StatusLive) and checks the answer. It returns a copy of
// the final answer.
func fuzzLiveOp(t *testing.T, i int, w *wfInstance, b *batch, op fuzzOp) []byte {
	t.Helper()
	kind, probe := op.kind&^abi.OpFlagIfRecorded, op.kind&abi.OpFlagIfRecorded != 0
	events, cursor := len(b.b.Events), w.cursor
	body, err := fuzzOpCall(t, w, op.kind, op.name, op.payload)
	if errors.Is(err, errBlockSuspend) && kind == abi.OpAwait && !probe {
		// A blocking await that cannot be satisfied ends the instance.
		if len(op.payload) < 4 || binary.LittleEndian.Uint32(op.payload)&uint32(abi.AwaitBlock) == 0 {
			t.Fatalf("op %d: a blocking suspension for an await without the block flag", i)
		}
		fuzzCheckAwaitAnswer(t, i, w, op.payload, abi.StatusSuspend, 0, nil)
		if len(b.b.Events) != events || w.cursor != cursor {
			t.Fatalf("op %d (await) recorded something", i)
		}
		return nil
	}
	if err != nil {
		t.Fatalf("op %d (%s %q %q): live op fails: %v", i, op.kind, op.name, op.payload, err)
	}
	st := fuzzCheckBody(t, i, body)
	if st == abi.StatusLive {
		if !probe || !kind.Recorded() || !kind.InWorkflow() {
			t.Fatalf("op %d (%s): StatusLive for an op without the if-recorded flag", i, op.kind)
		}
		if len(b.b.Events) != events || w.cursor != cursor {
			t.Fatalf("op %d (%s): StatusLive, yet something was recorded", i, op.kind)
		}
		body, err = fuzzOpCall(t, w, kind, op.name, op.payload)
		if err != nil {
			t.Fatalf("op %d (%s %q %q): live op fails: %v", i, kind, op.name, op.payload, err)
		}
		st = fuzzCheckBody(t, i, body)
		if st == abi.StatusLive {
			t.Fatalf("op %d (%s): StatusLive for an op without the if-recorded flag", i, kind)
		}
	}
	body = bytes.Clone(body)
	future := binary.LittleEndian.Uint32(body[4:])
	payload := body[8:]

	refused := func(want ...abi.Status) {
		t.Helper()
		if !slices.Contains(want, st) {
			t.Fatalf("op %d (%s): status %s, want one of %v", i, op.kind, st, want)
		}
		if len(b.b.Events) != events || w.cursor != cursor {
			t.Fatalf("op %d (%s): refused with %s, yet recorded", i, op.kind, st)
		}
	}
	switch {
	case probe && !kind.Recorded():
		refused(abi.StatusBadRequest)
	case kind.Recorded() && kind.InWorkflow() && checkName(kind, op.name) != "":
		// A malformed name is refused before anything else and takes no
		// position: the refusal depends only on the op, so replay repeats it.
		refused(abi.StatusBadRequest)
	case (kind == abi.OpReceive || kind == abi.OpReply) && w.plugin.m.Entry != EntryServe:
		// Like a malformed name: refused for the plugin's entry alone, so
		// it takes no position either.
		refused(abi.StatusNotAllowed)
	case !kind.InWorkflow():
		refused(abi.StatusNotAllowed, abi.StatusUnknownOp)
	case kind == abi.OpInput || kind == abi.OpMetadata:
		if st != abi.StatusOK || future != 0 || !json.Valid(payload) {
			t.Fatalf("op %d (%s): answer %s future %d payload %q", i, kind, st, future, payload)
		}
		if kind == abi.OpInput && !bytes.Equal(payload, w.rs.Created.Input) {
			t.Fatalf("op %d: input %s, the run's input is %s", i, payload, w.rs.Created.Input)
		}
		if len(b.b.Events) != events || w.cursor != cursor {
			t.Fatalf("op %d (%s) recorded something", i, kind)
		}
	case kind == abi.OpAwait:
		fuzzCheckAwaitAnswer(t, i, w, op.payload, st, future, payload)
		if len(b.b.Events) != events || w.cursor != cursor {
			t.Fatalf("op %d (await) recorded something", i)
		}
	default: // a recorded op: it takes the next position, refused or not
		p := cursor + 1
		o := w.rs.Op(p)
		if w.cursor != p || o == nil || len(w.rs.Ops) != int(p) || len(b.b.Events) <= events {
			t.Fatalf("op %d (%s): live op did not take position %d (cursor %d, %d ops, %d new events)", i, kind, p, w.cursor, len(w.rs.Ops), len(b.b.Events)-events)
		}
		if o.Kind != kind {
			t.Fatalf("op %d: position %d holds a %s, the guest asked for %s", i, p, o.Kind, kind)
		}
		futureOp := kind == abi.OpStep || kind == abi.OpSleep || kind == abi.OpAsk || kind == abi.OpHookNext
		switch {
		case st.IsRefusal():
			if o.Refused != st || future != 0 {
				t.Fatalf("op %d (%s): refusal %s with future %d recorded as %s", i, kind, st, future, o.Refused)
			}
		case st == abi.StatusPending && futureOp, st == abi.StatusRejected && futureOp:
			if future != p {
				t.Fatalf("op %d (%s): future %d, want %d", i, kind, future, p)
			}
		case st == abi.StatusOK && (futureOp || kind == abi.OpHookCreate):
			if future != p || !json.Valid(payload) {
				t.Fatalf("op %d (%s): ok with future %d (want %d) and payload %q", i, kind, future, p, payload)
			}
		case st == abi.StatusOK && (kind == abi.OpProgress || kind == abi.OpComplete || kind == abi.OpHookDispose):
			if future != 0 || len(payload) != 0 {
				t.Fatalf("op %d (%s): ok with future %d and payload %q", i, kind, future, payload)
			}
		default:
			t.Fatalf("op %d (%s): status %s", i, kind, st)
		}
		if kind == abi.OpComplete && st == abi.StatusOK && (!w.completed || !w.rs.Status.Terminal()) {
			t.Fatalf("op %d: complete answered ok, but the run did not end", i)
		}
	}
	return body
}

// fuzzCheckBody checks what every answer has in common and returns its
// status.
func fuzzCheckBody(t *testing.T, i int, body []byte) abi.Status {
	t.Helper()
	if len(body) < abi.BodyHeaderSize {
		t.Fatalf("op %d: answer of %d bytes", i, len(body))
	}
	st := abi.Status(binary.LittleEndian.Uint32(body))
	// Status.String falls back to "status(N)" for a code the ABI lacks.
	if strings.HasPrefix(st.String(), "status(") {
		t.Fatalf("op %d: status %d is not an ABI status", i, uint32(st))
	}
	payload := body[8:]
	switch {
	case st.IsRefusal() || st == abi.StatusRejected:
		var eo abi.ErrorObject
		if err := json.Unmarshal(payload, &eo); err != nil || eo.Type == "" {
			t.Fatalf("op %d: status %s with payload %q, not an error object (%v)", i, st, payload, err)
		}
	case st == abi.StatusPending || st == abi.StatusSuspend || st == abi.StatusLive:
		if len(payload) != 0 {
			t.Fatalf("op %d: status %s with payload %q", i, st, payload)
		}
	}
	return st
}

// fuzzCheckAwaitAnswer checks an await's answer against the ABI: the
// entries are the listed futures the activation can see, in the order
// listed, and the status follows from the mode.
func fuzzCheckAwaitAnswer(t *testing.T, i int, w *wfInstance, req []byte, st abi.Status, future uint32, payload []byte) {
	t.Helper()
	if future != 0 {
		t.Fatalf("op %d (await): future %d", i, future)
	}
	switch st {
	case abi.StatusBadRequest, abi.StatusNotFound:
		return
	case abi.StatusOK, abi.StatusSuspend:
	default:
		t.Fatalf("op %d (await): status %s", i, st)
	}
	if len(req) < 8 || len(req)%4 != 0 {
		t.Fatalf("op %d (await): answered %s to a payload of %d bytes", i, st, len(req))
	}
	mode := abi.AwaitMode(binary.LittleEndian.Uint32(req))
	if m := mode &^ abi.AwaitBlock; m != abi.AwaitAll && m != abi.AwaitAny {
		t.Fatalf("op %d (await): answered %s to mode %#x", i, st, uint32(mode))
	}
	var listed []uint32
	for j := 4; j < len(req); j += 4 {
		listed = append(listed, binary.LittleEndian.Uint32(req[j:]))
	}
	var want []uint32
	settled, rejected := 0, false
	for _, f := range listed {
		o := w.rs.Op(f)
		if o == nil || f > w.cursor {
			t.Fatalf("op %d (await): answered %s listing future %d, which the guest was never given", i, st, f)
		}
		if w.rs.Visible(o, w.act, w.cursor) {
			want = append(want, f)
			settled++
			rejected = rejected || o.State == abi.FutureRejected
		}
	}
	sat := settled == len(listed) || rejected || mode&^abi.AwaitBlock == abi.AwaitAny && settled > 0
	if st == abi.StatusSuspend {
		if payload != nil && mode&abi.AwaitBlock != 0 {
			t.Fatalf("op %d (await): a blocking await answered suspend instead of ending the instance", i)
		}
		if sat {
			t.Fatalf("op %d (await): suspended, yet %d of %d futures are settled (rejected: %v)", i, settled, len(listed), rejected)
		}
		if !w.suspended || w.waiting == nil || !slices.Equal(w.waiting.Futures, listed) {
			t.Fatalf("op %d (await): suspended without recording what it waits for", i)
		}
		return
	}
	if !sat {
		t.Fatalf("op %d (await): ok, yet only %d of %d futures are settled", i, settled, len(listed))
	}
	for _, f := range want {
		if len(payload) < 12 {
			t.Fatalf("op %d (await): answer ends before the entry of future %d", i, f)
		}
		gf, gs, n := binary.LittleEndian.Uint32(payload), abi.FutureState(binary.LittleEndian.Uint32(payload[4:])), binary.LittleEndian.Uint32(payload[8:])
		o := w.rs.Op(f)
		if gf != f || gs != o.State || uint64(n) > uint64(len(payload)-12) || !bytes.Equal(payload[12:12+n], o.Value) {
			t.Fatalf("op %d (await): entry for future %d is (%d, %s, %d bytes), want (%d, %s, %q)", i, f, gf, gs, n, f, o.State, o.Value)
		}
		payload = payload[12+n:]
	}
	if len(payload) != 0 {
		t.Fatalf("op %d (await): %d bytes after the last entry", i, len(payload))
	}
}

// fuzzCheckEnded checks what ending a run implies: no question left open,
// no hook left live.
func fuzzCheckEnded(t *testing.T, rs *state.Run) {
	t.Helper()
	if !rs.Status.Terminal() {
		t.Fatalf("completed, but the run is %s", rs.Status)
	}
	for i, o := range rs.Ops {
		if o.Kind == abi.OpAsk && o.Refused == 0 && !o.Settled {
			t.Fatalf("the run ended with question %d open", i+1)
		}
	}
	for id, h := range rs.Hooks {
		if !h.Disposed && h.Conflict == "" {
			t.Fatalf("the run ended with hook %d live", id)
		}
	}
}

// fuzzSummary renders what the run's state holds, for comparing states.
func fuzzSummary(rs *state.Run) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "seq=%d status=%s markers=%d+%d out=%d/%d progress=%s result=%s failure=%v\n",
		rs.LastSeq, rs.Status, rs.MarkBase, len(rs.Markers), rs.OutProduced, rs.OutRecorded, rs.LastProgress, rs.Result, rs.Failure)
	for _, m := range rs.Markers {
		fmt.Fprintf(&sb, "marker %d %s\n", m.Seq, m.Time.Format(time.RFC3339Nano))
	}
	for i, o := range rs.Ops {
		fmt.Fprintf(&sb, "op %d %s %q seq=%d t=%s act=%d settled=%v/%d/%v %s %q refused=%d attempt=%d/%v hook=%d/%d ask=%q fire=%s\n",
			i+1, o.Kind, o.Name, o.Seq, o.Time.Format(time.RFC3339Nano), o.Act, o.Settled, o.SettleSeq, o.ByGuest, o.State, o.Value,
			o.Refused, o.Attempt, o.AttemptOpen, o.Hook, o.Index, o.AskID, o.FireAt.Format(time.RFC3339Nano))
	}
	ids := make([]uint32, 0, len(rs.Hooks))
	for id := range rs.Hooks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		h := rs.Hooks[id]
		fmt.Fprintf(&sb, "hook %d %q conflict=%q disposed=%v received=%d nexts=%v\n", id, h.Token, h.Conflict, h.Disposed, len(h.Received), h.Nexts)
	}
	return sb.String()
}

// FuzzAwaitPayload feeds arbitrary await payloads to a live instance over a
// fixed log whose futures are in every state an activation can see them
// in, and checks the answer against the ABI's rules (fuzzCheckAwaitAnswer)
// and against a table of which futures this activation sees.
//
// The log: activation 0 issues step 1 (then fulfilled), step 2 (then
// rejected), sleep 3 (pending), hook_create 4, hook_next 5 on it (pending),
// progress 6, a refused step 7, hook_create 8 of a token another run holds
// and hook_next 9 on it (rejected at once); activation 1 issues an
// immediate sleep 10 and step 11, fulfilled during activation 1 and so not
// visible to it. The guest is live in activation 1, at op 11.
//
// Seeds: testdata/fuzz/FuzzAwaitPayload/ (crash-* is the input of
// TestRegressionAwaitOnRefusedOp).
func FuzzAwaitPayload(f *testing.F) {
	type vis struct {
		future  bool // the op makes a future
		visible bool
		state   abi.FutureState
	}
	table := map[uint32]vis{
		1: {true, true, abi.FutureFulfilled}, 2: {true, true, abi.FutureRejected}, 3: {true, false, 0},
		4: {false, false, 0}, 5: {true, false, 0}, 6: {false, false, 0}, 7: {false, false, 0},
		8: {false, false, 0}, 9: {true, true, abi.FutureRejected}, 10: {true, true, abi.FutureFulfilled},
		11: {true, false, 0},
	}
	env := newFuzzOpsEnv(f)
	f.Fuzz(func(t *testing.T, payload []byte) {
		r := env.newRun(t, false)
		rs, b := r.rs, r.b
		defer func() { env.release(t, r.rec.ID, rs) }()
		push := func(kind string, d *history.Data) {
			t.Helper()
			if _, err := b.push(kind, d); err != nil {
				t.Fatal(err)
			}
		}
		now := time.Now().UTC()
		later := now.Add(time.Hour)
		push(EvStepStarted, &history.Data{Op: 1, Name: "a", Input: json.RawMessage(`1`), Attempt: 1})
		push(EvStepStarted, &history.Data{Op: 2, Name: "b", Input: json.RawMessage(`2`), Attempt: 1})
		push(EvTimerSet, &history.Data{Op: 3, FireAt: &later})
		push(EvHookCreated, &history.Data{Op: 4, Token: "mine"})
		push(EvHookNext, &history.Data{Op: 5, Hook: 4})
		push(EvProgress, &history.Data{Op: 6, Value: json.RawMessage(`1`)})
		push(EvOpRefused, &history.Data{Op: 7, Kind: "step", Name: "", Status: uint32(abi.StatusBadRequest), Error: &abi.ErrorObject{Type: abi.ErrTypeBadRequest, Message: "x"}})
		push(EvHookCreated, &history.Data{Op: 8, Token: "theirs", Conflict: "other"})
		push(EvHookNext, &history.Data{Op: 9, Hook: 8})
		push(EvStepCompleted, &history.Data{Op: 1, Attempt: 1, Result: json.RawMessage(`{"x":1}`)})
		push(EvStepFailed, &history.Data{Op: 2, Attempt: 1, Error: &abi.ErrorObject{Type: abi.ErrTypeFatal, Message: "boom"}})
		push(EvRunResumed, &history.Data{Activation: 1})
		push(EvTimerSet, &history.Data{Op: 10, FireAt: &now, Immediate: true})
		push(EvStepStarted, &history.Data{Op: 11, Name: "c", Input: json.RawMessage(`3`), Attempt: 1})
		push(EvStepCompleted, &history.Data{Op: 11, Attempt: 1, Result: json.RawMessage(`3`)})

		w := env.instance(rs)
		w.begin(b)
		w.act, w.cursor = 1, 11
		events := len(b.b.Events)
		body, err := fuzzOpCall(t, w, abi.OpAwait, nil, payload)
		var st abi.Status
		if errors.Is(err, errBlockSuspend) {
			if binary.LittleEndian.Uint32(payload)&uint32(abi.AwaitBlock) == 0 {
				t.Fatalf("a blocking suspension for an await without the block flag")
			}
			st = abi.StatusSuspend
			fuzzCheckAwaitAnswer(t, 0, w, payload, st, 0, nil)
		} else if err != nil {
			t.Fatalf("await fails: %v", err)
		} else {
			st = fuzzCheckBody(t, 0, body)
			fuzzCheckAwaitAnswer(t, 0, w, payload, st, binary.LittleEndian.Uint32(body[4:]), body[8:])
		}
		if len(b.b.Events) != events {
			t.Fatalf("await recorded something")
		}

		// The table's view: which status the request deserves.
		wantSt := func() abi.Status {
			if len(payload) < 8 || len(payload)%4 != 0 || (len(payload)-4)/4 > abi.MaxFuturesPerAwait {
				return abi.StatusBadRequest
			}
			mode := abi.AwaitMode(binary.LittleEndian.Uint32(payload)) &^ abi.AwaitBlock
			if mode != abi.AwaitAll && mode != abi.AwaitAny {
				return abi.StatusBadRequest
			}
			n, settled, rejected := 0, 0, false
			for j := 4; j < len(payload); j += 4 {
				v, ok := table[binary.LittleEndian.Uint32(payload[j:])]
				switch {
				case !ok:
					return abi.StatusNotFound
				case !v.future:
					// An op that made no future (a refused one included)
					// cannot be awaited.
					return abi.StatusBadRequest
				}
				n++
				if v.visible {
					settled++
					rejected = rejected || v.state == abi.FutureRejected
				}
			}
			if settled == n || rejected || mode == abi.AwaitAny && settled > 0 {
				return abi.StatusOK
			}
			return abi.StatusSuspend
		}()
		if st != wantSt {
			t.Fatalf("await %x: status %s, want %s", payload, st, wantSt)
		}
	})
}

// TestFuzzOpFraming: fuzzEncodeOps writes what fuzzDecodeOps reads, so
// seeds can be written with it.
func TestFuzzOpFraming(t *testing.T) {
	ops := []fuzzOp{
		fop(abi.OpStep|abi.OpFlagIfRecorded, "a", ""),
		fop(abi.OpStep, "a", `{"input":1}`),
		fop(0x7f, "", "x"),
		fawait(abi.AwaitAny|abi.AwaitBlock, 1, 2),
	}
	noAsk, got := fuzzDecodeOps(fuzzEncodeOps(true, ops...))
	if !noAsk || len(got) != len(ops) {
		t.Fatalf("decoded noAsk=%v and %d ops, want true and %d", noAsk, len(got), len(ops))
	}
	for i := range ops {
		if got[i].kind != ops[i].kind || !bytes.Equal(got[i].name, ops[i].name) || !bytes.Equal(got[i].payload, ops[i].payload) {
			t.Fatalf("op %d: decoded %+v, want %+v", i, got[i], ops[i])
		}
	}
}
