// Package store is sandflow's durable storage: runs and their append-only
// event logs, the due-timer index, open questions, hook tokens, and plugin
// versions with their module bytes.
//
// The event log is the truth about a run; everything else here is an index
// kept in step with it. Every change to a run goes through Append, one
// transaction that adds events with dense sequence numbers and updates the
// indexes together. Append refuses a batch whose first sequence number is
// taken, which fences two hosts that both replay one run: the second to
// commit loses and must reload.
//
// Open returns the embedded default, a single bbolt file that needs no
// server. A Store is safe for concurrent use by multiple goroutines.
//
// Damage is detected, reported and never repaired: every stored value
// carries a checksum of its bucket, key and bytes, the file's pages are
// checked before bbolt reads them, and a damaged journal record with
// intact ones after it is refused; each is a *CorruptError naming where
// (errors.Is(err, ErrCorrupt)). Verify checks a whole file.
package store

import (
	"context"
	"encoding/json"
	"time"
)

// Store is the storage interface the host runs on.
type Store interface {
	// CreateRun stores a new run with its first events (numbered from 1) and
	// index changes. It returns ErrRunExists when the id is taken.
	CreateRun(ctx context.Context, run Run, b Batch) error
	// Append adds a batch to a run's log. expectLastSeq is the sequence number
	// of the last event the caller has seen; the batch's events must be
	// numbered from expectLastSeq+1. It returns ErrSeqConflict when the log
	// has moved on, and ErrRunNotFound for an unknown run.
	Append(ctx context.Context, runID string, expectLastSeq uint64, b Batch) error
	// Run returns a run's record, or ErrRunNotFound.
	Run(ctx context.Context, id string) (Run, error)
	// Runs lists runs, newest first.
	Runs(ctx context.Context, f RunFilter) ([]Run, error)
	// Events returns up to limit events of a run with Seq > after, in order.
	// limit <= 0 means all.
	Events(ctx context.Context, runID string, after uint64, limit int) ([]Event, error)

	// DueTimers returns up to limit timers with FireAt <= now, earliest first.
	DueTimers(ctx context.Context, now time.Time, limit int) ([]Timer, error)
	// NextTimer returns the earliest timer; ok is false when there is none.
	NextTimer(ctx context.Context) (t Timer, ok bool, err error)

	// Ask returns a question by id, or ErrAskNotFound.
	Ask(ctx context.Context, id string) (Ask, error)
	// Asks lists questions, oldest first; openOnly leaves out settled ones.
	Asks(ctx context.Context, openOnly bool) ([]Ask, error)

	// ClaimHook gives token to (runID, hookID) unless another run holds it,
	// in which case it changes nothing and returns that run's id. Claiming a
	// token the same run already holds succeeds.
	ClaimHook(ctx context.Context, token, runID string, hookID uint32) (holder string, err error)
	// Hook returns who holds a token, or ErrHookNotFound.
	Hook(ctx context.Context, token string) (Hook, error)

	// PutPlugin registers a new version of a plugin and stores its module
	// bytes under their hash (once per hash). It assigns and returns the
	// version number: one more than the plugin's latest.
	PutPlugin(ctx context.Context, p Plugin, module []byte) (Plugin, error)
	// Plugin returns one version of a plugin; version 0 means the latest.
	// It returns ErrPluginNotFound.
	Plugin(ctx context.Context, name string, version int) (Plugin, error)
	// Plugins lists every version of every plugin, by name then version.
	Plugins(ctx context.Context) ([]Plugin, error)
	// Module returns the module bytes stored under a hash, or
	// ErrModuleNotFound.
	Module(ctx context.Context, hash string) ([]byte, error)
	// DeletePluginVersion removes one version of a plugin, and its module
	// bytes when no other version shares them. It returns ErrPluginInUse
	// when a run that has not ended is pinned to the version, and
	// ErrPluginNotFound when there is no such version.
	DeletePluginVersion(ctx context.Context, name string, version int) error

	// PutSession stores the session layer's record of a session, which
	// the store keeps opaque, replacing any earlier one.
	PutSession(ctx context.Context, id string, data []byte) error
	// Session returns a session's record, or ErrSessionNotFound.
	Session(ctx context.Context, id string) ([]byte, error)
	// SessionIDs lists the sessions, by id.
	SessionIDs(ctx context.Context) ([]string, error)

	// PutSnapshot keeps a snapshot of a run's suspended instance, replacing
	// an older one (a smaller Seq). It keeps nothing for a run that has
	// ended, and nothing when the snapshot kept has Seq >= snap.Seq; a
	// batch that ends a run drops its snapshot. A snapshot is a cache:
	// losing it costs a replay.
	PutSnapshot(ctx context.Context, runID string, snap Snapshot) error
	// Snapshot returns a run's snapshot, or ErrSnapshotNotFound.
	Snapshot(ctx context.Context, runID string) (Snapshot, error)
	// State returns the image of a run's state a batch stored last
	// (Batch.PutState), or ErrStateNotFound. A run that ends has none.
	State(ctx context.Context, runID string) (State, error)

	// Close releases the store. Calls after Close return ErrClosed.
	Close() error
}

// Event is one entry of a run's log. Kind and Data are the host's; the store
// keeps them opaque.
type Event struct {
	Seq  uint64          `json:"seq"`
	Time time.Time       `json:"time"`
	Kind string          `json:"kind"`
	Data json.RawMessage `json:"data"`
}

// RunStatus is where a run stands.
type RunStatus string

const (
	// StatusRunning: an activation or a step is in progress, or was when the
	// process stopped; such a run is recovered on start.
	StatusRunning RunStatus = "running"
	// StatusWaiting: suspended on something outside the run (a timer, a
	// question, a hook).
	StatusWaiting   RunStatus = "waiting"
	StatusCompleted RunStatus = "completed"
	StatusFailed    RunStatus = "failed"
	StatusCancelled RunStatus = "cancelled"
)

// Terminal reports whether the run has ended.
func (s RunStatus) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Run is a run's record: an index over its log for listing and lookups.
type Run struct {
	ID         string    `json:"id"`
	Tool       string    `json:"tool"`
	Plugin     string    `json:"plugin"`
	Version    int       `json:"version"`
	ModuleHash string    `json:"moduleHash"`
	Status     RunStatus `json:"status"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	// LastSeq is the sequence number of the run's last event.
	LastSeq uint64 `json:"lastSeq"`
	// Detail is the host's summary (what the run waits on, its result or
	// error); the store keeps it opaque.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// RunFilter selects runs. Zero fields match everything. Runs come newest
// first (by creation time, then by id, descending).
type RunFilter struct {
	Status RunStatus
	Tool   string
	// From and To bound the creation time: From <= CreatedAt < To.
	From, To time.Time
	// Before is a page cursor: only the runs after it in the newest-first
	// order (created earlier, or at the same time with a smaller id).
	Before *RunCursor
	Limit  int
}

// RunCursor is a place in the newest-first order of runs: the run a page
// ended with.
type RunCursor struct {
	CreatedAt time.Time
	ID        string
}

// Matches says whether r passes f's conditions (Limit aside).
func (f RunFilter) Matches(r Run) bool {
	switch {
	case f.Status != "" && r.Status != f.Status, f.Tool != "" && r.Tool != f.Tool,
		!f.From.IsZero() && r.CreatedAt.Before(f.From), !f.To.IsZero() && !r.CreatedAt.Before(f.To):
		return false
	case f.Before != nil:
		return newerFirst(f.Before.CreatedAt, f.Before.ID, r.CreatedAt, r.ID)
	}
	return true
}

// newerFirst says whether the run (at, id) comes before (bt, bid) in the
// newest-first order.
func newerFirst(at time.Time, id string, bt time.Time, bid string) bool {
	if !at.Equal(bt) {
		return at.After(bt)
	}
	return id > bid
}

// Batch is one atomic change to a run: its new events and the index changes
// that go with them. Run, when set, replaces the run's record; its LastSeq
// must equal the last event's Seq.
//
// Index changes apply in this order: timers are put, then deleted (so a
// batch may set a timer and drop it again); hooks are released, then
// claimed.
type Batch struct {
	Events       []Event
	Run          *Run
	PutTimers    []Timer
	DeleteTimers []Timer
	PutAsks      []Ask
	// ReleaseHooks frees tokens this run holds; tokens it does not hold are
	// left alone.
	ReleaseHooks []string
	// ClaimHooks gives tokens to this run's hooks. A token another run holds
	// fails the whole batch with ErrHookTaken.
	ClaimHooks []Hook
	// PutState replaces the run's state image; its Seq must be the seq of
	// the batch's last event (the run record's LastSeq).
	PutState *State
	// Lease, when set, is the lease the writer drives the run under: a
	// store that implements Leaser refuses the batch with ErrLeaseLost
	// unless it is still the run's lease, and records its epoch with the
	// events. Stores without leases ignore it.
	Lease *Lease
}

// State is the host's opaque image of a run's state (its model of the
// log), taken when the log ended at Seq, so that loading the run need
// not read the events before it.
type State struct {
	Seq  uint64
	Data []byte
}

// Snapshot is the host's opaque image of a run's suspended instance, taken
// when the run's log ended at Seq.
type Snapshot struct {
	Seq  uint64
	Data []byte
}

// Timer is a due-timer index entry.
type Timer struct {
	RunID  string    `json:"runId"`
	ID     string    `json:"id"`
	FireAt time.Time `json:"fireAt"`
	// Kind and Position are the host's: what fires and for which op.
	Kind     string `json:"kind"`
	Position uint32 `json:"position"`
}

// Ask is a question's index entry.
type Ask struct {
	ID        string          `json:"id"`
	RunID     string          `json:"runId"`
	Tool      string          `json:"tool"`
	Position  uint32          `json:"position"`
	Open      bool            `json:"open"`
	Request   json.RawMessage `json:"request"`
	CreatedAt time.Time       `json:"createdAt"`
}

// Hook is a hook token's holder.
type Hook struct {
	Token  string `json:"token"`
	RunID  string `json:"runId"`
	HookID uint32 `json:"hookId"`
}

// Plugin is one registered version of a plugin.
type Plugin struct {
	Name       string          `json:"name"`
	Version    int             `json:"version"`
	ModuleHash string          `json:"moduleHash"`
	Manifest   json.RawMessage `json:"manifest"`
	CreatedAt  time.Time       `json:"createdAt"`
	Size       int             `json:"size"`
}

// RunCounter is a Store that counts its runs by status and tool without
// reading every record: both stores here are (the embedded one from its
// run index, PostgreSQL with one aggregate query).
type RunCounter interface {
	RunCounts(ctx context.Context) ([]RunCount, error)
}

// RunCount is how many runs have a status and a tool.
type RunCount struct {
	Status RunStatus
	Tool   string
	N      int
}
