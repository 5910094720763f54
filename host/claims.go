package host

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sandflow/sandflow/store"
)

// On a store several hosts share (a store.Leaser), no host drives every
// run it finds running, as a host alone on its store does on start-up:
// the scheduler claims the runs that need a host and no host holds (left
// running by a host that stopped, started and not driven, a timer due),
// each claim taking the run's lease (store.Leaser.ClaimRuns, FOR UPDATE
// SKIP LOCKED), and drives what it claimed. It claims on start, every
// ClaimEvery, and when a notice (LISTEN/NOTIFY) says a run was created or
// released on some host; the polling covers notices lost while a
// connection was down.
const (
	// DefaultClaimEvery is Options.ClaimEvery's default: a run whose host
	// died is claimed within a lease and this long.
	DefaultClaimEvery = 250 * time.Millisecond
	// MaxClaimed bounds the claimed runs a host drives at once; it claims
	// no more while that many are under way.
	MaxClaimed = 256
)

// runClaims is RunScheduler on a store several hosts share.
func (h *Host) runClaims(ctx context.Context, logger *slog.Logger) error {
	var listening sync.WaitGroup
	lctx, stopListening := context.WithCancel(ctx)
	defer listening.Wait()
	defer stopListening()
	listening.Add(1)
	go func() {
		defer listening.Done()
		err := h.leaser.Listen(lctx, func(id string) {
			h.notify(id) // a watcher here sees what another host did
			h.wakeScheduler()
		})
		if err != nil && lctx.Err() == nil {
			logger.Warn("listening for other hosts stopped; claiming by polling alone", "err", err)
		}
	}()
	if cl, ok := h.leaser.(store.CommitListener); ok && h.opts.CommitNotices {
		listening.Add(1)
		go func() {
			defer listening.Done()
			// A commit of another host's wakes this host's watchers of
			// the run, not its claims: nothing is left to claim.
			err := cl.ListenCommits(lctx, h.notify)
			if err != nil && lctx.Err() == nil {
				logger.Warn("following other hosts' commits stopped; watchers hear of them at lease release", "err", err)
			}
		}()
	}
	for {
		if _, err := h.claim(ctx, logger); err != nil && ctx.Err() == nil {
			logger.Error("claiming runs", "err", err)
		}
		t := time.NewTimer(h.opts.ClaimEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		case <-h.wake:
			t.Stop()
		}
	}
}

// claim claims the runs that need a host, as many as MaxClaimed leaves
// room for, and drives each on a goroutine of its own. It returns how
// many it claimed.
func (h *Host) claim(ctx context.Context, logger *slog.Logger) (int, error) {
	free := MaxClaimed - int(h.claimed.Load())
	if free <= 0 {
		return 0, nil
	}
	cs, err := h.leaser.ClaimRuns(ctx, h.owner, h.opts.Lease, free)
	if err != nil {
		return 0, err
	}
	for i, c := range cs {
		if err := h.goClaimed(ctx, c, logger); err != nil {
			// Closed: the claims not driven are given back.
			for _, c := range cs[i:] {
				_ = h.leaser.ReleaseLease(context.WithoutCancel(ctx), c.RunID, c.Lease)
			}
			return i, err
		}
	}
	return len(cs), nil
}

// goClaimed drives a claimed run on a goroutine of its own: its due
// timers fire, then the rest of its work, until it ends or waits, ctx is
// done or the host closes (Close waits for it). The lease goes with the
// last hold.
func (h *Host) goClaimed(ctx context.Context, c store.Claim, logger *slog.Logger) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	h.drivers.Add(1)
	h.mu.Unlock()
	h.claimed.Add(1)
	go func() {
		defer h.drivers.Done()
		defer h.claimed.Add(-1)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(h.life, cancel)()
		rh := h.handle(c.RunID)
		defer h.release(rh)
		if !h.adoptLease(rh, c.Lease) {
			return
		}
		defer h.dropLease(rh)
		failed := func(what string, err error) {
			if err != nil && ctx.Err() == nil && !errors.Is(err, ErrRunNotFound) {
				logger.Error(what, "run", c.RunID, "err", err)
			}
		}
		n, err := h.FireDueOf(ctx, c.RunID, time.Now())
		failed("firing timers", err)
		if err != nil {
			return
		}
		ri, err := h.Drive(ctx, c.RunID)
		failed("driving a claimed run", err)
		if err == nil && n > 0 {
			logger.Info("timer fired", "run", c.RunID, "timers", n, "status", ri.Status)
		}
	}()
	return nil
}
