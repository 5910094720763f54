package worker

import (
	"bufio"
	"fmt"
	"time"

	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/jsprogram/internal/proto"
	"github.com/sandflow/sandflow/jsprogram/internal/replay"
)

// readLog reads the 'L' frame that follows an activation saying so.
func readLog(r *bufio.Reader, lim proto.Limits) (*engine.ReplayLog, error) {
	typ, body, err := proto.ReadLarge(r, int(min(lim.InFlightBytes, 1<<40))+proto.MaxFrame)
	if err != nil {
		return nil, err
	}
	if typ != proto.FrameLog {
		return nil, fmt.Errorf("want the log, got frame %q", typ)
	}
	return replay.DecodeLog(body)
}

// flushAnswered sends the ops answered from the log so far, for the parent
// to check before anything else of the activation.
func (s *session) flushAnswered() error {
	if len(s.rp.Answered) == 0 {
		return nil
	}
	if err := proto.WriteFrame(s.w, proto.FrameReplayed, s.rp.Answered); err != nil {
		s.broken = true
		return fmt.Errorf("jsprogram worker: sending the replayed ops: %w", err)
	}
	s.rp.Answered = s.rp.Answered[:0]
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
	if time.Since(s.rp.Renewed) < renewEvery {
		return nil
	}
	s.rp.Renewed = time.Now()
	if err := proto.WriteFrame(s.w, proto.FrameRenew); err != nil {
		s.broken = true
		return fmt.Errorf("jsprogram worker: sending renew: %w", err)
	}
	return nil
}
