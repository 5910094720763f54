package store

import (
	"context"
	"errors"
	"time"
)

// Lease is one host's right to drive a run: Owner names the host, Epoch
// counts the times the run's lease was taken, so that a later holder's
// Epoch is greater than every earlier one's.
type Lease struct {
	Owner string
	Epoch uint64
}

var (
	// ErrLeaseLost is returned by Append, CreateRun and Leaser.RenewLease
	// when the batch's lease is no longer the run's: another host took it
	// after it expired. Nothing of the batch is applied.
	ErrLeaseLost = errors.New("store: run lease lost to another host")
	// ErrLeaseHeld is returned by Leaser.AcquireLease while another host
	// holds a lease on the run that has not expired.
	ErrLeaseHeld = errors.New("store: run lease held by another host")
)

// Leaser is implemented by a store several hosts share (store/postgres):
// a host drives a run only while it holds the run's lease, renewed while
// it drives, and every batch it writes carries the lease (Batch.Lease),
// which the store refuses once another host has taken it. The embedded
// store is one process's and implements no Leaser: its host treats every
// lease as held.
//
// Expiry is measured on the store's clock, not the hosts'.
type Leaser interface {
	// AcquireLease takes the run's lease for owner for ttl, with an epoch
	// one more than the last, if no other owner holds one that has not
	// expired (ErrLeaseHeld). The run need not exist yet.
	AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) (Lease, error)
	// RenewLease extends a held lease to ttl from now; it returns
	// ErrLeaseLost when the lease was taken since.
	RenewLease(ctx context.Context, runID string, l Lease, ttl time.Duration) error
	// RenewLeases renews a host's leases in one call, each to ttl from
	// now, and returns the ids of those it lost (taken since): a host
	// renews all it holds at once, so that the renewals cost one
	// statement per LeaseRenew however many runs it drives.
	RenewLeases(ctx context.Context, owner string, held []Claim, ttl time.Duration) (lost []string, err error)
	// ReleaseLease gives a held lease up at once, and tells the hosts
	// listening (Listen) that the run changed; a lease taken since is
	// left alone.
	ReleaseLease(ctx context.Context, runID string, l Lease) error
	// ClaimRuns takes for owner, for ttl, the leases of up to limit runs
	// that need a host and that no host holds: runs left running (a host
	// stopped while it drove them, a run started and not yet driven, an
	// agent turn out) and runs with a timer due (a durable sleep, a step
	// retry). Runs another host is claiming at that moment are skipped,
	// not waited for, so that hosts claiming at once share the work.
	ClaimRuns(ctx context.Context, owner string, ttl time.Duration, limit int) ([]Claim, error)
	// Listen calls fn with a run's id each time some host (this one
	// included) creates the run or releases its lease (the end of a
	// host's work on it: an answer recorded and driven, a step finished),
	// until ctx is done. It reconnects by itself after a lost connection;
	// notices sent meanwhile are lost, which the callers' polling covers.
	Listen(ctx context.Context, fn func(runID string)) error
	// DueTimersOf returns one run's timers with FireAt <= now, earliest
	// first: a host that claimed the run fires them.
	DueTimersOf(ctx context.Context, runID string, now time.Time) ([]Timer, error)
}

// Claim is a run ClaimRuns took, with the lease it holds on it.
type Claim struct {
	RunID string
	Lease Lease
}

// CommitListener is implemented by a shared store that can tell the hosts
// of each committed Append (store/postgres, when its stores were opened
// with CommitNotices): ListenCommits calls fn with the run's id after
// each, until ctx is done, reconnecting by itself as Listen does.
type CommitListener interface {
	ListenCommits(ctx context.Context, fn func(runID string)) error
}
