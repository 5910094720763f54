package jsprogram

import (
	"context"
	"fmt"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/host/engine"
	"github.com/sandflow/sandflow/jsprogram/internal/proto"
	"github.com/sandflow/sandflow/jsprogram/internal/replay"
)

// checkAnswered checks the ops a worker answered from the log (see
// internal/replay) with the host's handler, counting them.
func (i *instance) checkAnswered(ctx context.Context, b []byte, fresh *bool, count func(int64) error) error {
	return replay.Check(ctx, b, i.cfg.Ops, i.cfg.Clock, fresh, func(n int64) error {
		i.c.e.logReplayed.Add(1)
		return count(n)
	})
}

// replayLog is the log a starting activation replays from, when the
// host's handler gives one and it is worth sending: nil otherwise.
func (i *instance) replayLog(kind string, lim Limits) []byte {
	i.logActs = 0
	if kind != proto.KindProgram && kind != proto.KindTool || i.c.e.slowReplay.Load() {
		return nil
	}
	rp, ok := i.cfg.Ops.(engine.Replayer)
	if !ok {
		return nil
	}
	l := rp.ReplayLog()
	// A log over the in-flight limit replays by round trips, which stop
	// where the limit does.
	if l == nil || replay.LogBytes(l) > lim.InFlightBytes {
		return nil
	}
	i.logActs = len(l.Markers)
	return replay.EncodeLog(l)
}

// replayDiffered turns fast replay off for the engine and loses the
// activation, which the host runs again.
func (i *instance) replayDiffered(err error) error {
	i.c.e.slowReplay.Store(true)
	return fmt.Errorf("%v: %w", err, host.ErrInstanceLost)
}
