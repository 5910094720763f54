// Package cpumeter keeps the CPU-time budget of a guest's call, for the
// engines that stop a guest from inside it: wazero's metered guests call
// back into the host every few loop iterations (internal/meter), and
// wasmtime's epoch callback runs once a tick; at each, the engine asks the
// Meter whether the budget is spent.
//
// A replay renews the budget at every recorded activation, thousands of
// times for a long history, so a renewal reads no clock: the budget runs
// from the meter's next reading (the next check, or a pause), which comes
// within one check's interval of guest work, the host calls in between
// being answered from the log. Times are kept as durations since a fixed
// epoch, so that each reading is one monotonic clock read (time.Since)
// rather than time.Now's wall and monotonic pair.
//
// A Meter is used by the guest's goroutine only.
package cpumeter

import (
	"context"
	"time"
)

// Meter is a call's CPU budget. The zero Meter is ready for Start.
type Meter struct {
	epoch    time.Time
	budget   time.Duration
	fresh    bool          // started, and the deadline not set since
	deadline time.Duration // since epoch
	pausedAt time.Duration // since epoch, while paused
	paused   bool
	ctx      context.Context
}

func (m *Meter) now() time.Duration {
	if m.epoch.IsZero() {
		m.epoch = time.Now()
	}
	return time.Since(m.epoch)
}

// Start starts a budget of budget for a call whose context is ctx.
func (m *Meter) Start(ctx context.Context, budget time.Duration) {
	m.ctx, m.budget, m.fresh, m.paused = ctx, budget, false, false
	m.deadline = m.now() + budget
}

// Restart starts the call's budget again, from now.
func (m *Meter) Restart() { m.Start(m.ctx, m.budget) }

// Renew starts a fresh budget from the next reading.
func (m *Meter) Renew() {
	m.fresh, m.paused = true, false
}

// Context is the context of the call the meter was started for.
func (m *Meter) Context() context.Context { return m.ctx }

// read returns the time, setting the deadline of a fresh budget from it.
func (m *Meter) read() time.Duration {
	now := m.now()
	if m.fresh {
		m.deadline, m.fresh = now+m.budget, false
	}
	return now
}

// Spent reports whether the budget is used up.
func (m *Meter) Spent() bool { return !m.paused && m.read() > m.deadline }

// Pause stops the budget's clock and returns the function that restarts
// it.
func (m *Meter) Pause() func() {
	if m.paused {
		return func() {}
	}
	m.paused, m.pausedAt = true, m.read()
	return func() {
		m.deadline += m.now() - m.pausedAt
		m.paused = false
	}
}
