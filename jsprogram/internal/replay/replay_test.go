package replay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/host/engine"
)

// scripted answers ops with bodies in order, keeps a clock, and restarts
// the CPU budget where told.
type scripted struct {
	bodies  [][]byte
	clocks  []int64
	restart []bool
	now     int64
}

func (s *scripted) Op(ctx context.Context, _ abi.OpKind, _, _ []byte) ([]byte, error) {
	b := s.bodies[0]
	if s.restart[0] {
		host.RestartCPU(ctx)
	}
	s.now, s.bodies, s.clocks, s.restart = s.clocks[0], s.bodies[1:], s.clocks[1:], s.restart[1:]
	return b, nil
}

func (s *scripted) Now() int64     { return s.now }
func (s *scripted) Sleep(ns int64) {}

// A log of one agent call, settled before the second activation: the
// worker's replayer answers the input, the call (pending in activation
// 0) and the await (which moves to activation 1, where it has settled),
// and Check accepts those answers from a handler that gives the
// same, and refuses a handler whose answer differs by one byte, or whose
// clock does.
func TestReplayerAnswersAsTheHandler(t *testing.T) {
	log := &engine.ReplayLog{Input: []byte(`{"js":"x"}`), Metadata: []byte(`{}`),
		Markers: []engine.ReplayMarker{{Seq: 1, Time: 100}, {Seq: 5, Time: 300}},
		Ops:     []engine.ReplayOp{{Kind: abi.OpAgent, Name: "echo", Time: 200, Settled: true, State: abi.FutureFulfilled, SettleSeq: 3, Value: []byte(`{"status":"completed"}`)}}}
	l, err := DecodeLog(EncodeLog(log))
	if err != nil {
		t.Fatal(err)
	}
	r := New(l, 100)
	type answer struct {
		body  []byte
		clock int64
	}
	var got []answer
	issue := func(kind abi.OpKind, name string, payload []byte, wantFresh bool) {
		body, fresh, ok := r.Answer(kind, name, payload)
		if !ok || fresh != wantFresh {
			t.Fatalf("%s: answered %v, fresh %v", kind, ok, fresh)
		}
		r.Record(kind, name, payload, body, fresh)
		got = append(got, answer{body, r.Clock})
	}
	issue(abi.OpInput, "", nil, false)
	issue(abi.OpAgent, "echo", []byte(`{"message":"m"}`), false)
	await := binary.LittleEndian.AppendUint32(proto.U32(uint32(abi.AwaitAll|abi.AwaitBlock)), 1)
	issue(abi.OpAwait, "", await, true)
	if st := bodyStatus(got[1].body); st != abi.StatusPending || got[1].clock != 200 {
		t.Fatalf("the call in activation 0: status %d, clock %d", st, got[1].clock)
	}
	if st := bodyStatus(got[2].body); st != abi.StatusOK || !bytes.HasSuffix(got[2].body, log.Ops[0].Value) || got[2].clock != 300 {
		t.Fatalf("the await: status %d, body %q, clock %d", st, got[2].body, got[2].clock)
	}
	// The wait the log does not satisfy is the host's to answer.
	if _, _, ok := r.Answer(abi.OpAgent, "echo", nil); ok {
		t.Fatal("answered an op past the log")
	}
	var bodies [][]byte
	var clocks []int64
	for _, a := range got {
		bodies, clocks = append(bodies, a.body), append(clocks, a.clock)
	}
	check := func(change func(h *scripted)) error {
		h := &scripted{bodies: slices.Clone(bodies), clocks: slices.Clone(clocks), restart: []bool{false, false, true}}
		change(h)
		fresh := false
		ctx := host.WithCPUClock(context.Background(), host.CPUClock{Restart: func() { fresh = true }})
		return Check(ctx, r.Answered, h, h, &fresh, func(int64) error { return nil })
	}
	if err := check(func(*scripted) {}); err != nil {
		t.Fatalf("a handler that answers the same: %v", err)
	}
	for k := range got {
		if err := check(func(h *scripted) {
			b := bytes.Clone(h.bodies[k])
			b[len(b)-1] ^= 1
			h.bodies[k] = b
		}); !errors.Is(err, ErrDiffers) {
			t.Fatalf("answer %d differing by a byte: %v", k, err)
		}
		if err := check(func(h *scripted) { h.clocks[k]++ }); !errors.Is(err, ErrDiffers) {
			t.Fatalf("clock after op %d differing: %v", k, err)
		}
	}
	if err := check(func(h *scripted) { h.restart[2] = false }); !errors.Is(err, ErrDiffers) {
		t.Fatalf("a handler that restarts no budget: %v", err)
	}
}

// Logs decode as they were encoded, and no input makes DecodeLog or the
// parent's check of a worker's list (Check) panic or allocate what a length in it
// claims.
func FuzzReplayFrames(f *testing.F) {
	f.Add(EncodeLog(&engine.ReplayLog{Input: []byte(`{}`), Markers: []engine.ReplayMarker{{Seq: 1, Time: 2}},
		Ops: []engine.ReplayOp{{Kind: abi.OpStep, Name: "s", Value: []byte("1"), Settled: true}}}))
	r := New(&engine.ReplayLog{Markers: []engine.ReplayMarker{{}}}, 0)
	r.Record(abi.OpAwait, "", proto.U32(0), []byte("answer"), true)
	f.Add(r.Answered)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if l, err := DecodeLog(b); err == nil && !bytes.Equal(EncodeLog(l), b) {
			t.Fatalf("decoded and encoded again: %x, was %x", EncodeLog(l), b)
		}
		h := &scripted{}
		for range len(b) {
			h.bodies, h.clocks, h.restart = append(h.bodies, []byte("answer")), append(h.clocks, 0), append(h.restart, false)
		}
		fresh := false
		_ = Check(context.Background(), b, h, h, &fresh, func(int64) error { return nil })
	})
}

func bodyStatus(body []byte) abi.Status { return abi.Status(binary.LittleEndian.Uint32(body)) }
