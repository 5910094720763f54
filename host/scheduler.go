package host

import (
	"context"
	"errors"
	"github.com/sandflow/sandflow/host/history"
	"log/slog"
	"sync"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/store"
)

// RunScheduler recovers runs a stopped process left running (see
// Recover), and fires timers as they come due (durable sleeps and step
// retries), until ctx is done. Errors on single runs are logged to logger
// (nil: slog.Default) and do not stop it.
func (h *Host) RunScheduler(ctx context.Context, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	if h.leaser != nil {
		return h.runClaims(ctx, logger)
	}
	if err := h.Recover(ctx, logger); err != nil {
		return err
	}
	for {
		_, err := h.FireDue(ctx, time.Now(), logger)
		if err != nil && ctx.Err() == nil {
			logger.Error("firing timers", "err", err)
		}
		wait := time.Second
		if t, ok, err := h.store.NextTimer(ctx); err == nil && ok {
			wait = min(wait, max(0, time.Until(t.FireAt)))
		}
		if h.fireFailed.Swap(false) {
			// A timer that failed to fire is still due: do not spin on it.
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		case <-h.wake:
		}
	}
}

// Recover continues every run a stopped process left running: an
// activation that did not commit, a step attempt that did not finish
// (steps run at least once), an agent turn that was out (sent again under
// its turn id). It returns once it has found the runs; each is driven on a
// goroutine of its own until it ends or waits, ctx is done or the host
// closes (Close waits for the drivers). Errors on single runs are logged
// to logger (nil: slog.Default).
//
// The runs are not driven one after another, nor waited for: an agent
// turn can take minutes, and the runs behind it, and the scheduler's
// timers, would wait for it too.
func (h *Host) Recover(ctx context.Context, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	if h.leaser != nil {
		// Other hosts may be driving them: only the runs no host holds
		// are this host's to continue.
		_, err := h.claim(ctx, logger)
		return err
	}
	runs, err := h.store.Runs(ctx, store.RunFilter{Status: store.StatusRunning})
	if err != nil {
		return err
	}
	for _, r := range runs {
		if err := h.goDrive(ctx, r.ID, func(err error) { logger.Error("recovering run", "run", r.ID, "err", err) }); err != nil {
			return err
		}
	}
	return nil
}

// goDrive drives a run on a goroutine of its own until it ends or waits,
// ctx is done or the host closes (Close waits for the drivers). A failure
// other than that goes to failed.
func (h *Host) goDrive(ctx context.Context, id string, failed func(error)) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	h.drivers.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.drivers.Done()
		// Closing the host stops the driver at its next boundary.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(h.life, cancel)()
		// A run another host drives is that host's to finish.
		if _, err := h.Drive(ctx, id); err != nil && ctx.Err() == nil && !errors.Is(err, ErrLeaseHeld) {
			failed(err)
		}
	}()
	return nil
}

// FireDue fires the timers due at now and continues their runs. It returns
// how many it fired.
func (h *Host) FireDue(ctx context.Context, now time.Time, logger *slog.Logger) (int, error) {
	if logger == nil {
		logger = slog.Default()
	}
	due, err := h.store.DueTimers(ctx, now, 256)
	if err != nil || len(due) == 0 {
		return 0, err
	}
	// Timers of one run fire in order on one goroutine; runs in parallel.
	byRun := map[string][]store.Timer{}
	var order []string
	for _, t := range due {
		if byRun[t.RunID] == nil {
			order = append(order, t.RunID)
		}
		byRun[t.RunID] = append(byRun[t.RunID], t)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, id := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func(ts []store.Timer) {
			defer wg.Done()
			defer func() { <-sem }()
			for _, t := range ts {
				ri, err := h.fireTimer(ctx, t)
				switch {
				case err != nil && ctx.Err() == nil:
					h.fireFailed.Store(true)
					logger.Error("firing timer", "run", t.RunID, "timer", t.ID, "err", err)
				case err == nil && ri.ID != "":
					logger.Info("timer fired", "run", t.RunID, "timer", t.ID, "status", ri.Status)
				}
			}
		}(byRun[id])
	}
	wg.Wait()
	return len(due), ctx.Err()
}

// FireDueOf fires the timers of one run that are due at now, in order, and
// continues the run; other runs' timers are left to the scheduler. It
// returns how many it fired. A command that drives its own run (sandflow
// call --wait) uses it.
func (h *Host) FireDueOf(ctx context.Context, runID string, now time.Time) (int, error) {
	var due []store.Timer
	var err error
	if h.leaser != nil {
		due, err = h.leaser.DueTimersOf(ctx, runID, now)
	} else {
		due, err = h.store.DueTimers(ctx, now, 0)
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range due {
		if t.RunID != runID {
			continue
		}
		if _, err := h.fireTimer(ctx, t); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (h *Host) fireTimer(ctx context.Context, t store.Timer) (RunInfo, error) {
	ri, err := h.withRun(ctx, t.RunID, func(rh *runHandle) error {
		rs := rh.rs
		b := newBatch(rs)
		b.b.DeleteTimers = append(b.b.DeleteTimers, t)
		o := rs.Op(t.Position)
		switch {
		case t.Kind == timerAbort:
			if err := h.abortExpired(rs, b, int(t.Position)); err != nil {
				return err
			}
		case rs.Status.Terminal() || o == nil:
		case t.Kind == timerSleep && o.Kind == abi.OpSleep && !o.Settled:
			if _, err := b.push(EvTimerFired, &history.Data{Op: t.Position}); err != nil {
				return err
			}
		case t.Kind == timerRetry && o.Kind == abi.OpStep && !o.Settled && !o.AttemptOpen && !o.RetryAt.IsZero() &&
			t.ID == retryTimer(rs.ID, t.Position, o.Attempt, o.RetryAt).ID:
			// Only the timer of the attempt that failed last: a stale one
			// (read twice, say) must not skip a backoff.
			if _, err := b.push(EvStepStarted, &history.Data{Op: t.Position, Name: o.Name, Attempt: o.Attempt + 1}); err != nil {
				return err
			}
		}
		if err := h.commit(ctx, rh, b, nil); err != nil {
			return err
		}
		return h.drive(ctx, rh)
	})
	if errors.Is(err, ErrRunNotFound) {
		return RunInfo{}, nil
	}
	return ri, err
}
