package jsprogram

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/jsprogram/internal/proto"
	"github.com/sandflow/sandflow/jsprogram/internal/replay"
)

// serving is the host's side of one activation a worker runs for an
// instance: it answers the program's ops with the host's handler, and
// keeps the clocks that back the worker's own limits up.
type serving struct {
	i    *instance
	e    *Engine
	w    *worker
	kind string
	lim  Limits
	// resumed: the program was parked, and a worker that dies now loses
	// it (the host replays) instead of failing the run.
	resumed bool
	// The worker keeps its own clocks and stops the program at the
	// limits; js and total are the backstop for a program stuck in a
	// built-in. lane runs with js: past longAfter of computing, the
	// program moves to the long lane (see pool).
	js, lane *stopwatch
	total    *time.Timer
	// fresh: the host restarted the budget (as a replay passes each
	// recorded activation, and when the live work begins); the worker is
	// told with the op's reply.
	fresh bool
	// inFlight is what this activation carried between the program and
	// the host, op frames and their answers, with what the parked
	// program's earlier activations carried (see Limits.InFlightBytes);
	// last is the latest op's share.
	inFlight, last int64
	// renewals counts the worker's 'H' frames, at most one per recorded
	// activation.
	renewals int
}

// result ends an activation with what Call returns.
type result struct {
	n   int32
	err error
}

// serve runs an activation in w until the program completes, fails or
// suspends.
func (i *instance) serve(ctx context.Context, w *worker, kind string, lim Limits, resumed bool) (int32, error) {
	e := i.c.e
	s := &serving{i: i, e: e, w: w, kind: kind, lim: lim, resumed: resumed,
		js: newStopwatch(lim.JSTime + e.grace), lane: newStopwatch(e.longAfter), total: time.NewTimer(lim.TotalTime + e.grace)}
	defer s.js.stop()
	defer s.lane.stop()
	defer s.total.Stop()
	if resumed {
		s.inFlight = i.carried
	}
	ctx = host.WithCPUClock(ctx, host.CPUClock{Restart: func() { s.fresh = true }})
	for {
		var r *result
		select {
		case f, ok := <-w.frames:
			r = s.frame(ctx, f, ok)
		case <-s.lane.c:
			s.longLane()
		case <-s.js.c:
			r = s.fail(&WorkflowProgramError{Code: CodeJSTime, Message: fmt.Sprintf("the program ran JavaScript for more than %s in one %s (stopped inside a built-in)", lim.JSTime, proto.ActivationNoun(kind))})
		case <-s.total.C:
			r = s.fail(&WorkflowProgramError{Code: CodeTotalTime, Message: fmt.Sprintf("one %s took more than %s", proto.ActivationNoun(kind), lim.TotalTime)})
		case <-ctx.Done():
			e.pool.put(w, false)
			return 0, ctx.Err()
		}
		if r != nil {
			return r.n, r.err
		}
	}
}

// frame handles one frame from the worker, or its end (ok false); nil
// means the activation goes on.
func (s *serving) frame(ctx context.Context, f frame, ok bool) *result {
	if !ok {
		return s.died()
	}
	switch f.typ {
	case proto.FrameOp:
		return s.onOp(ctx, f.body)
	case proto.FrameReplayed:
		return s.onReplayed(ctx, f.body)
	case proto.FrameRenew:
		s.onRenew()
		return nil
	case proto.FrameSuspend:
		return s.onSuspend(f.body)
	case proto.FrameWrite:
		s.onWrite(f.body)
		return nil
	case proto.FrameDone:
		return s.onDone(f.body)
	}
	return s.fail(crashed(fmt.Sprintf("the worker sent frame %q", f.typ)))
}

func crashed(msg string) *WorkflowProgramError {
	return &WorkflowProgramError{Code: CodeWorkerCrashed, Message: msg}
}

// fail ends the activation with pe; the worker is not reused.
func (s *serving) fail(pe *WorkflowProgramError) *result {
	s.e.pool.put(s.w, false)
	return &result{err: &host.GuestError{Message: pe.Error(), Object: pe.Object(), Limit: pe.LimitHit()}}
}

// died: the worker's output ended. A parked program's is lost (the host
// replays it); any other fails its run.
func (s *serving) died() *result {
	d := s.w.death(s.lim)
	if !s.resumed {
		return s.fail(d)
	}
	s.e.pool.put(s.w, false)
	s.e.lot.lost.Add(1)
	return &result{err: instanceLost(d.Message)}
}

func (s *serving) overInFlight() *WorkflowProgramError {
	return &WorkflowProgramError{Code: CodeInFlight, Message: fmt.Sprintf(
		"one %s carried %.1f MiB between the program and the host (calls' inputs and replies; a start or resume that replays carries every call so far); the limit is %.1f MiB",
		proto.ActivationNoun(s.kind), float64(s.inFlight)/(1<<20), float64(s.lim.InFlightBytes)/(1<<20))}
}

// pause stops the backstop clocks while the host works.
func (s *serving) pause() {
	s.js.pause()
	s.lane.pause()
}

func (s *serving) resume() {
	s.js.resume()
	s.lane.resume()
}

// onOp answers an op with the host's handler.
func (s *serving) onOp(ctx context.Context, b []byte) *result {
	s.pause()
	body, err := s.i.op(ctx, b)
	if err != nil {
		n, err := s.i.abort(s.w, err)
		return &result{n, err}
	}
	s.last = int64(len(b) + len(body))
	if s.inFlight += s.last; s.inFlight > s.lim.InFlightBytes {
		return s.fail(s.overInFlight())
	}
	typ := byte(proto.FrameReply)
	if s.fresh {
		typ, s.fresh = proto.FrameReplyFresh, false
		s.js.left = s.lim.JSTime + s.e.grace
	}
	if err := s.w.send(typ, proto.I64(s.i.cfg.Clock.Now()), body); err != nil {
		return s.fail(s.w.death(s.lim))
	}
	// The worker does not count the pipe's transit as JavaScript time;
	// neither does this backstop.
	s.js.left += opTransit
	s.resume()
	return nil
}

// onReplayed checks the ops the worker answered from the log with the
// host's handler (internal/replay).
func (s *serving) onReplayed(ctx context.Context, b []byte) *result {
	if s.i.logActs == 0 || s.resumed {
		return s.fail(crashed("the worker sent replayed ops without a log"))
	}
	s.pause()
	var over *WorkflowProgramError
	err := s.i.checkAnswered(ctx, b, &s.fresh, func(n int64) error {
		if s.inFlight += n; s.inFlight > s.lim.InFlightBytes {
			over = s.overInFlight()
			return over
		}
		return nil
	})
	switch {
	case over != nil:
		return s.fail(over)
	case errors.Is(err, replay.ErrDiffers):
		s.e.pool.put(s.w, false)
		return &result{err: s.i.replayDiffered(err)}
	case err != nil:
		n, err := s.i.abort(s.w, err)
		return &result{n, err}
	}
	s.resume()
	return nil
}

// onRenew: the worker's replay passed a recorded activation, whose
// budget starts afresh; so does the backstop's.
func (s *serving) onRenew() {
	if s.renewals < s.i.logActs {
		s.renewals++
		s.js.pause()
		s.js.left = s.lim.JSTime + s.e.grace
		s.js.resume()
	}
}

// onSuspend parks the program, which awaits calls still out, live in its
// worker.
func (s *serving) onSuspend(b []byte) *result {
	if len(b) < 8 || s.kind != proto.KindProgram || s.e.lot.max == 0 {
		return s.fail(crashed("the worker parked a program it was not told to park"))
	}
	// The await that suspended is asked again on resume; a replay asks it
	// once.
	s.i.carried = s.inFlight - s.last
	s.e.pool.release(s.w)
	killAll(s.e.lot.park(s.i, s.w, int64(binary.LittleEndian.Uint64(b))))
	return &result{n: abi.RunSuspended}
}

// onWrite passes console output to the instance's stdout or stderr.
func (s *serving) onWrite(b []byte) {
	if len(b) == 0 {
		return
	}
	out := s.i.cfg.Stdout
	if b[0] == 2 {
		out = s.i.cfg.Stderr
	}
	_, _ = out.Write(b[1:])
}

// onDone ends the activation as the worker says it ended.
func (s *serving) onDone(b []byte) *result {
	var d proto.Done
	if err := json.Unmarshal(b, &d); err != nil {
		return s.fail(crashed("the worker's answer is not JSON"))
	}
	switch d.Status {
	case "completed":
		s.e.pool.put(s.w, true)
		return &result{n: abi.RunDone}
	case "failed":
		if d.Error == nil {
			d.Error = crashed("the worker failed without saying why")
		}
		return s.fail(d.Error)
	}
	return s.fail(crashed(fmt.Sprintf("the worker ended the activation as %q", d.Status)))
}

// longLane moves the program to the long lane, or tries again a little
// later when that is full.
func (s *serving) longLane() {
	if s.e.pool.promote(s.w) {
		s.lane.c = nil
		return
	}
	s.lane.left = laneRetry
	s.lane.resume()
}

// op serves one op frame with the host's handler.
func (i *instance) op(ctx context.Context, b []byte) ([]byte, error) {
	if len(b) < 8 {
		return nil, &host.GuestError{Message: "jsprogram: short op frame"}
	}
	kind := abi.OpKind(binary.LittleEndian.Uint32(b))
	n := binary.LittleEndian.Uint32(b[4:])
	if uint64(n) > uint64(len(b)-8) {
		return nil, &host.GuestError{Message: "jsprogram: bad op frame"}
	}
	return i.cfg.Ops.Op(ctx, kind, b[8:8+n], b[8+n:])
}

// abort ends an activation the host ended (the run waits, or an op
// failed): the worker stops the program and is reused.
func (i *instance) abort(w *worker, cause error) (int32, error) {
	e := i.c.e
	if err := w.send(proto.FrameAbort); err != nil {
		e.pool.put(w, false)
		return 0, cause
	}
	timeout := time.NewTimer(e.grace)
	defer timeout.Stop()
	for {
		select {
		case f, ok := <-w.frames:
			if !ok {
				e.pool.put(w, false)
				return 0, cause
			}
			if f.typ == proto.FrameDone {
				e.pool.put(w, true)
				return 0, cause
			}
			if f.typ == proto.FrameOp {
				// The program went on before it saw the abort: refuse.
				e.pool.put(w, false)
				return 0, cause
			}
		case <-timeout.C:
			e.pool.put(w, false)
			return 0, cause
		}
	}
}

// laneRetry is how long a program that could not move to the full long
// lane computes before it tries again.
const laneRetry = 100 * time.Millisecond

// opTransit is what the backstop allows per op for the frames' transit.
const opTransit = 200 * time.Microsecond

// stopwatch is a timer that runs only while resumed.
type stopwatch struct {
	left  time.Duration
	since time.Time
	t     *time.Timer
	c     <-chan time.Time
}

func newStopwatch(d time.Duration) *stopwatch {
	t := time.NewTimer(d)
	return &stopwatch{left: d, since: time.Now(), t: t, c: t.C}
}

func (s *stopwatch) pause() {
	s.t.Stop()
	s.left -= time.Since(s.since)
}

func (s *stopwatch) resume() {
	s.since = time.Now()
	s.t.Reset(max(s.left, 0))
}

func (s *stopwatch) stop() { s.t.Stop() }
