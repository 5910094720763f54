package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandflow/sandflow/store"
)

// Leases: on a store several hosts share (a store.Leaser), a host drives
// a run only while it holds the run's lease. Every operation that may
// write a run (withRun, Call) holds it: the first to need it on this host
// takes it, waiting while another host holds it (up to LeaseWait), the
// others join, and the last to finish releases it. While held, it is
// renewed every LeaseRenew, with the host's other leases, in one call. Each commit carries it
// (store.Batch.Lease), and the store refuses a commit whose lease another
// host has taken since (ErrLeaseLost): a host that stalled past its lease
// stops at its next commit, and nothing it did after losing the lease is
// in the log. On a store without leases (the embedded one, one process's)
// every lease is held.
const (
	// DefaultLease is Options.Lease's default: a host that dies leaves
	// its runs to the others after at most this long.
	DefaultLease = 1500 * time.Millisecond
	// DefaultLeaseRenew is Options.LeaseRenew's default: two renewals
	// may fail before the lease expires.
	DefaultLeaseRenew = 500 * time.Millisecond
)

// runLease is a handle's hold of its run's lease.
type runLease struct {
	// mu is taken before the handle's mu, and guards the rest; held is
	// written only while n is 0, so a holder reads it without mu.
	mu   sync.Mutex
	n    int // operations holding it
	held store.Lease
}

// leaseSet is the leases a host holds, which one goroutine renews
// together (renewLeases): one statement per LeaseRenew however many runs
// the host drives, so that a host driving many runs on a loaded machine
// does not fall behind on renewals and lose them.
type leaseSet struct {
	mu   sync.Mutex
	held map[string]store.Lease // by run id
	stop chan struct{}          // closed by Close, last
	done chan struct{}          // closed when the renewer has stopped
}

// holdLease holds the run's lease for an operation on rh, taking it when
// this host does not hold it yet, waiting up to wait while another host
// holds it (0: until ctx is done). dropLease ends the hold.
func (h *Host) holdLease(ctx context.Context, rh *runHandle, wait time.Duration) error {
	if h.leaser == nil {
		return nil
	}
	rl := &rh.lease
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.n > 0 {
		rl.n++
		return nil
	}
	l, err := h.acquireLease(ctx, rh.id, wait)
	if err != nil {
		return err
	}
	h.startHoldLocked(rh, l)
	return nil
}

// adoptLease makes a lease a claim took rh's first hold, and reports
// whether it did: when this host holds the run already (under an older
// epoch whose renewals failed), the claim is given up instead, and the
// older hold's next commit finds its lease lost.
func (h *Host) adoptLease(rh *runHandle, l store.Lease) bool {
	rl := &rh.lease
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.n > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), h.opts.Lease)
		defer cancel()
		_ = h.leaser.ReleaseLease(ctx, rh.id, l)
		return false
	}
	h.startHoldLocked(rh, l)
	return true
}

// startHoldLocked begins the first hold of rh's lease, l, and its
// renewals; rh.lease.mu is held.
func (h *Host) startHoldLocked(rh *runHandle, l store.Lease) {
	rl := &rh.lease
	rl.held, rl.n = l, 1
	h.leases.mu.Lock()
	h.leases.held[rh.id] = l
	h.leases.mu.Unlock()
}

// acquireLease takes a run's lease, polling while another host holds it,
// until maxWait has passed (0: no bound) or ctx is done.
func (h *Host) acquireLease(ctx context.Context, id string, maxWait time.Duration) (store.Lease, error) {
	deadline := time.Now().Add(maxWait)
	wait := 5 * time.Millisecond
	for {
		l, err := h.leaser.AcquireLease(ctx, id, h.owner, h.opts.Lease)
		if !errors.Is(err, store.ErrLeaseHeld) {
			return l, err
		}
		if maxWait > 0 && time.Now().Add(wait).After(deadline) {
			return store.Lease{}, fmt.Errorf("%w: run %s is being driven by another host (waited %s)", ErrLeaseHeld, id, maxWait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return store.Lease{}, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// renewLeases renews every lease the host holds each LeaseRenew, until
// Close stops it. A lease found lost is dropped from the set: its
// holder's next commit fails.
func (h *Host) renewLeases() {
	ls := &h.leases
	defer close(ls.done)
	t := time.NewTicker(h.opts.LeaseRenew)
	defer t.Stop()
	for {
		select {
		case <-ls.stop:
			return
		case <-t.C:
		}
		ls.mu.Lock()
		held := make([]store.Claim, 0, len(ls.held))
		for id, l := range ls.held {
			held = append(held, store.Claim{RunID: id, Lease: l})
		}
		ls.mu.Unlock()
		if len(held) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.opts.Lease)
		lost, err := h.leaser.RenewLeases(ctx, h.owner, held, h.opts.Lease)
		cancel()
		if err != nil || len(lost) == 0 {
			continue // a failed renewal is tried again at the next tick
		}
		byID := map[string]store.Lease{}
		for _, c := range held {
			byID[c.RunID] = c.Lease
		}
		ls.mu.Lock()
		for _, id := range lost {
			if ls.held[id] == byID[id] {
				delete(ls.held, id)
			}
		}
		ls.mu.Unlock()
	}
}

// dropLease ends a hold holdLease began; the last releases the lease.
func (h *Host) dropLease(rh *runHandle) {
	if h.leaser == nil {
		return
	}
	rl := &rh.lease
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.n--
	if rl.n > 0 {
		return
	}
	h.leases.mu.Lock()
	if h.leases.held[rh.id] == rl.held {
		delete(h.leases.held, rh.id)
	}
	h.leases.mu.Unlock()
	// A release that fails leaves the lease to expire.
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Lease)
	defer cancel()
	_ = h.leaser.ReleaseLease(ctx, rh.id, rl.held)
}
