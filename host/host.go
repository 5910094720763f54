// Package host is the sandflow kernel: it runs durable workflow tools
// compiled to WebAssembly, keeps each run's event log, replays runs to
// resume them, and schedules their timers and step retries. It is also the
// Go API an application embeds: open a Host on a store, add plugins, call
// tools, answer questions, resume hooks.
//
// # What a guest may and may not do
//
// A workflow body replays: after every wait, and after every restart, it
// runs again from its entry point and each op is answered from the log. So
// the body must be deterministic. It may use time, randomness, maps,
// goroutines and select freely, because the host supplies the clock (a
// logical clock that moves with the log) and the random bytes (a generator
// seeded per run), and a WebAssembly instance has no other source of
// nondeterminism. It must not depend on anything else that could differ
// between executions: side effects, I/O and capability calls belong in
// steps, whose results are recorded and never recomputed on replay. Steps
// run in separate instances, so nothing a step does, not even the memory it
// allocates, can change how the body replays.
//
// A guest that asks for a different op than its history recorded fails
// with a *NonDeterminismError and the run is left as it was.
//
// # Concurrency
//
// A Host is safe for concurrent use. Operations on one run are serialised;
// operations on different runs proceed in parallel.
package host

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandflow/sandflow/host/history"
	"github.com/sandflow/sandflow/host/internal/state"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandflow/sandflow/abi"
	"github.com/sandflow/sandflow/plugins"
	"github.com/sandflow/sandflow/store"
	"github.com/sandflow/sandflow/store/postgres"
)

// Limits bound what a run may use. Zero fields take the defaults.
//
// Deprecated: the type is plugins.Limits; this name stays for one release.
type Limits = plugins.Limits

// DefaultLimits are the limits of abi/README.md (plugins.DefaultLimits).
var DefaultLimits = plugins.DefaultLimits

// Options configures a Host. The zero value is usable.
type Options struct {
	// Engine runs the guests of plugins whose manifest names no engine;
	// nil means the engine EngineName names, which the Host makes and owns.
	Engine Engine
	// EngineName is the default engine when Engine is nil: "wazero" (or
	// "") or "wasmtime". A manifest may name another; the Host makes it
	// when a plugin first needs it.
	EngineName string
	// CacheDir keeps compiled modules across processes, each engine the
	// Host makes in CacheDir/<engine>; empty means compile in memory only.
	CacheDir string
	// Engines adds engines of other kinds, by the name a manifest's engine
	// field gives ("goja" for JavaScript tools, say). The caller owns them.
	Engines map[string]Engine
	// Limits are the limits of every plugin; a manifest may only tighten
	// them. Zero fields take DefaultLimits.
	Limits Limits
	// Capabilities are the functions steps may call, by name. The host
	// also has a built-in http.fetch (abi.CapabilityFetch), which reaches
	// only the hosts a plugin's manifest lists.
	Capabilities map[string]Capability
	// Agents runs agent turns (ctx.agent); nil means no agent is available
	// and every turn fails.
	Agents AgentBackend
	// Observer is told what the kernel does, for metrics; nil: nothing
	// is. SetObserver changes it later.
	Observer Observer
	// AgentTimeout bounds one agent turn; 0 means 10 minutes.
	AgentTimeout time.Duration
	// AbortGrace is how long an aborted run has to unwind (Abort); 0
	// means DefaultAbortGrace, 30 seconds.
	AbortGrace time.Duration
	// AgentReplyBytes bounds a turn's reply and structured output; 0 means
	// 4 MiB.
	AgentReplyBytes int
	// NoFetch turns the built-in http.fetch off.
	NoFetch bool
	// HTTPClient makes http.fetch's requests; nil means http.DefaultClient.
	HTTPClient *http.Client
	// BaseURL, when set, is where runs are shown; it appears in metadata.
	BaseURL string
	// MaxWarm is how many suspended instances are kept in memory to resume
	// without replay; 0 means 64, negative means none.
	MaxWarm int
	// MaxWarmBytes bounds the linear memory of the parked instances
	// together: past it the least recently parked are closed (their runs
	// resume by replay); 0 means DefaultWarmBytes (1 GiB), negative no
	// bound but MaxWarm.
	MaxWarmBytes int64
	// PreInit is how many initialised workflow instances each WebAssembly
	// plugin version in use keeps ready, so that a start or a resume that
	// replays does not wait for instantiation; 0 (the default) keeps none.
	// Runs created with it on share what a guest draws while it
	// initialises (preinit.go).
	PreInit int
	// IdleRuns is how many suspended runs with no parked instance keep
	// their state loaded, so that resuming one reads only the events its
	// state has not seen; 0 means DefaultIdleRuns (64), negative none.
	// Their states hold at most 262,144 ops together.
	IdleRuns int
	// Snapshots is how many ops a suspended run's history must hold
	// before its instance is snapshotted (snapshot.go) when it is not
	// kept parked: its next resume then restores the snapshot instead of
	// replaying. 0 means DefaultSnapshotOps; negative turns snapshots off.
	// Only wazero instances are snapshotted. A waiting run that long also
	// keeps an image of its state (host/internal/state/image.go), so that loading it
	// after a restart does not read its whole log.
	Snapshots int
	// StepConcurrency bounds the steps of one run executing at once; 0
	// means 4.
	StepConcurrency int
	// MaxModuleBytes bounds an uploaded module; 0 means 64 MiB.
	MaxModuleBytes int
	// CompileTimeout bounds one module's compilation (at upload, or when a
	// run first needs it); 0 means DefaultCompileTimeout. Past it the call
	// returns a *PluginError matching ErrCompileTimeout.
	CompileTimeout time.Duration
	// MaxCompiles bounds the compilations running at once; 0 means
	// DefaultMaxCompiles. One abandoned by its caller holds its place
	// until the engine finishes it.
	MaxCompiles int
	// Lease is how long a host's lease on a run lasts unrenewed, on a
	// store several hosts share (a store.Leaser: store/postgres); 0 means
	// DefaultLease. A host that stops (a crash, a partition) leaves its
	// runs to the others once their leases expire.
	Lease time.Duration
	// LeaseRenew is how often a held lease is renewed; 0 means
	// DefaultLeaseRenew. It must be well under Lease.
	LeaseRenew time.Duration
	// LeaseWait is how long a call waits for a run another host is
	// driving before it returns ErrLeaseHeld; 0 means twice Lease. Drive
	// waits as long as its context lets it.
	LeaseWait time.Duration
	// ClaimEvery is how often the scheduler, on a store several hosts
	// share, claims the runs that need a host (claims.go) when no notice
	// wakes it first; 0 means DefaultClaimEvery.
	ClaimEvery time.Duration
	// CommitNotices, on a store several hosts share, has every commit of
	// this host tell the others, and this host follow theirs: a watcher
	// (an event stream, the console) of a run another host drives hears
	// each commit, not only the release of the run's lease. OpenPostgres
	// opens its store with postgres.Options.CommitNotices; a store given
	// to Open must have been opened with it. It costs a NOTIFY per commit
	// (see RATIONALE.md, "How far do several hosts scale?") and one more
	// connection, so it is off by default.
	CommitNotices bool
}

// Host is the kernel. Open one per store.
//
// Its fields are grouped by what guards them: set by Open and never
// written after; guarded by mu; safe for concurrent use on their own
// (atomics, WaitGroups, channels). A run's own state is guarded by its
// runHandle's mu, taken before mu (see runHandle).
type Host struct {
	// Set by Open (ownStore by openOwned, before the Host is returned)
	// and never written after.
	store    store.Store
	ownStore bool
	engine   Engine // the default
	opts     Options
	limits   Limits
	// life ends when Close begins: work a run is waiting on (steps,
	// agent turns) is cut off so Close need not wait for it.
	life    context.Context
	endLife context.CancelFunc
	// wake tells the scheduler to look again (wakeScheduler).
	wake chan struct{}
	// snapWriters bounds the snapshots compressed and stored at once.
	snapWriters chan struct{}
	// compiles holds a place per compilation running (compile.go).
	compiles chan struct{}
	// leaser is the store's leases, nil when it has none (lease.go);
	// owner names this host in them.
	leaser store.Leaser
	owner  string
	leases leaseSet // the leases held, renewed together (lease.go)
	// claimed counts the claimed runs being driven (claims.go).
	claimed atomic.Int64

	// mu guards the fields below it, up to the next group. No code takes
	// a runHandle's mu while holding it.
	mu sync.Mutex
	// closed is set once, by Close; drivers and work are added to only
	// under mu while it is not set.
	closed bool
	// engines are the engines by kind ("wazero", "wasmtime"), the default
	// included; owned those the Host made, which Close closes (none is
	// made once closed is set).
	engines map[string]Engine
	owned   []Engine
	// The plugin registry: loaded plugin versions by name@version, the
	// compiled modules by engine:hash, and the modules checked ad hoc,
	// least recently used first.
	plugins  map[string]*loadedPlugin
	compiled map[string]CompiledModule
	adHoc    []adHocEntry
	// The run registry: the handles by run id, with their refs, idle and
	// idleOps fields. idle holds the handles kept for their state
	// (retireLocked), most recent first, and idleOps the ops their states
	// hold.
	runs    map[string]*runHandle
	idle    *list.List
	idleOps int
	// The warm pool: warm holds the handles with a parked instance, most
	// recent first, and warmBytes their memory as it was when each was
	// parked; the handles' warm and elem fields go with them.
	warm      *list.List
	warmBytes uint64
	// badSnaps are runs whose snapshots up to a seq are not restored
	// (distrust); badImages runs whose state images up to a seq are not
	// loaded: one disagreed with the log (host/internal/state/image.go).
	badSnaps  map[string]uint64
	badImages map[string]uint64
	// watchers are the channels Watch gave out, by run id.
	watchers map[string]map[chan struct{}]bool

	// Safe for concurrent use without mu.
	//
	// drivers are the runs the host drives on its own goroutines
	// (recovery); Close waits for them. Added to only under mu, while
	// open.
	drivers sync.WaitGroup
	// work counts the runWork calls under way: Close waits for them to
	// record what they cut off. Added to only under mu, while open.
	work sync.WaitGroup
	// snapWG counts the snapshots not stored yet.
	snapWG     sync.WaitGroup
	snaps      snapCounters
	images     imageCounters
	insts      instCounters
	fireFailed atomic.Bool // a timer failed to fire: the scheduler backs off
	// obs is the Observer (observe.go), nil when none.
	obs obsPointer
}

// Open makes a Host over a store. opts may be nil.
func Open(ctx context.Context, st store.Store, opts *Options) (*Host, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxWarm == 0 {
		o.MaxWarm = 64
	}
	if o.IdleRuns == 0 {
		o.IdleRuns = DefaultIdleRuns
	}
	if o.Snapshots == 0 {
		o.Snapshots = DefaultSnapshotOps
	}
	if o.StepConcurrency <= 0 {
		o.StepConcurrency = 4
	}
	if o.MaxModuleBytes <= 0 {
		o.MaxModuleBytes = 64 << 20
	}
	if o.CompileTimeout <= 0 {
		o.CompileTimeout = DefaultCompileTimeout
	}
	if o.MaxCompiles <= 0 {
		o.MaxCompiles = DefaultMaxCompiles
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.LeaseRenew <= 0 {
		o.LeaseRenew = DefaultLeaseRenew
	}
	if o.LeaseRenew >= o.Lease {
		return nil, fmt.Errorf("host: LeaseRenew %s must be under Lease %s", o.LeaseRenew, o.Lease)
	}
	if o.LeaseWait <= 0 {
		o.LeaseWait = 2 * o.Lease
	}
	if o.ClaimEvery <= 0 {
		o.ClaimEvery = DefaultClaimEvery
	}
	h := &Host{
		store: st, opts: o, limits: o.Limits.WithDefaults(DefaultLimits),
		plugins: map[string]*loadedPlugin{}, compiled: map[string]CompiledModule{},
		runs: map[string]*runHandle{}, warm: list.New(), idle: list.New(), snapWriters: make(chan struct{}, 1), wake: make(chan struct{}, 1),
		compiles: make(chan struct{}, o.MaxCompiles),
	}
	h.life, h.endLife = context.WithCancel(context.Background())
	h.SetObserver(o.Observer)
	if l, ok := st.(store.Leaser); ok {
		h.leaser, h.owner = l, newTimedID("host_", 10)
		h.leases = leaseSet{held: map[string]store.Lease{}, stop: make(chan struct{}), done: make(chan struct{})}
	}
	h.engines = map[string]Engine{}
	for kind, e := range o.Engines {
		h.engines[kind] = e
	}
	if o.Engine != nil {
		h.engine = o.Engine
		h.engines[engineKind(o.Engine)] = o.Engine
	} else {
		kind := o.EngineName
		if kind == "" {
			kind = EngineWazero
		}
		e, err := h.engineFor(ctx, kind)
		if err != nil {
			return nil, err
		}
		h.engine = e
	}
	if h.leaser != nil {
		go h.renewLeases()
	}
	return h, nil
}

// engineKind is an engine's name without its version: "wazero".
func engineKind(e Engine) string {
	kind, _, _ := strings.Cut(e.Name(), "/")
	return kind
}

// EngineFor returns the host's engine of that name: one of
// Options.Engines, or wazero or wasmtime (made on first use). On a closed
// Host it returns ErrClosed.
func (h *Host) EngineFor(ctx context.Context, name string) (Engine, error) {
	return h.engineFor(ctx, name)
}

// engineFor returns the engine of a kind, making it on first use.
func (h *Host) engineFor(ctx context.Context, kind string) (Engine, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed // Close closes the engines it has
	}
	if e := h.engines[kind]; e != nil {
		return e, nil
	}
	dir := ""
	if h.opts.CacheDir != "" {
		dir = filepath.Join(h.opts.CacheDir, kind)
	}
	e, err := NewEngine(ctx, kind, dir)
	if err != nil {
		return nil, err
	}
	h.engines[kind] = e
	h.owned = append(h.owned, e)
	return e, nil
}

// OpenDir opens the embedded store in dir (created if needed) and a Host on
// it, with compiled modules cached under dir. Close closes both.
func OpenDir(ctx context.Context, dir string, opts *Options) (*Host, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("host: data dir: %w", err)
	}
	st, err := store.Open(filepath.Join(dir, storeFile), nil)
	if err != nil {
		return nil, err
	}
	return openOwned(ctx, dir, st, opts)
}

// OpenPostgres opens the PostgreSQL store that connString names (a
// postgres:// URL) and a Host on it; Close closes both. Compiled modules
// are cached under opts.CacheDir, or in memory when it is empty: each host
// compiles from the module bytes in the database into a cache of its own.
// A connection string that does not parse fails with an error matching
// postgres.ErrBadConnString, a server that cannot be reached with one
// matching postgres.ErrUnreachable; nothing is written then.
func OpenPostgres(ctx context.Context, connString string, opts *Options) (*Host, error) {
	var po postgres.Options
	if opts != nil {
		po.CommitNotices = opts.CommitNotices
	}
	st, err := postgres.Open(ctx, connString, &po)
	if err != nil {
		return nil, err
	}
	h, err := Open(ctx, st, opts)
	if err != nil {
		st.Close()
		return nil, err
	}
	h.ownStore = true
	return h, nil
}

// openOwned opens a Host on st, the store of data directory dir, that
// closes st with itself; compiled modules are cached under dir unless
// opts name another place. st is closed if the Host cannot open.
func openOwned(ctx context.Context, dir string, st store.Store, opts *Options) (*Host, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.CacheDir == "" {
		o.CacheDir = filepath.Join(dir, "cache")
	}
	h, err := Open(ctx, st, &o)
	if err != nil {
		st.Close()
		return nil, err
	}
	h.ownStore = true
	return h, nil
}

// Store returns the store the host runs on.
func (h *Host) Store() store.Store { return h.store }

// Engine returns the default engine.
func (h *Host) Engine() Engine { return h.engine }

// Close releases parked instances and compiled modules, and the engine and
// store if the Host opened them.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.endLife()
	h.mu.Unlock()
	// The drivers stop at their next boundary, their work cut off.
	h.drivers.Wait()
	h.work.Wait()
	h.mu.Lock()
	handles := make([]*runHandle, 0, len(h.runs))
	for _, rh := range h.runs {
		handles = append(handles, rh)
	}
	h.mu.Unlock()
	for _, rh := range handles {
		rh.mu.Lock()
		if w := h.takeWarm(rh); w != nil {
			h.saveSnapshot(ctx, w)
			w.close(ctx)
		}
		rh.mu.Unlock()
	}
	var errs []error
	h.mu.Lock()
	for _, lp := range h.plugins {
		lp.closeSteps(ctx)
		lp.closeFresh(ctx)
	}
	for _, e := range h.adHoc {
		e.lp.closeFresh(ctx)
	}
	h.adHoc = nil
	for _, cm := range h.compiled {
		errs = append(errs, cm.Close(ctx))
	}
	owned := h.owned
	h.mu.Unlock()
	for _, e := range owned {
		errs = append(errs, e.Close(ctx))
	}
	if h.leaser != nil {
		// Last: the drivers held leases until they stopped.
		close(h.leases.stop)
		<-h.leases.done
	}
	if h.ownStore {
		errs = append(errs, h.store.Close())
	}
	return errors.Join(errs...)
}

func (h *Host) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

func (h *Host) wakeScheduler() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// metadata is the run's metadata, all of it from the log, so that it is
// the same on replay whatever the host's configuration is by then.
func metadata(rs *state.Run, stepID string) abi.Metadata {
	return abi.Metadata{WorkflowName: rs.Created.Tool, WorkflowRunID: rs.ID, WorkflowStartedAt: rs.Start.UTC().Format(time.RFC3339Nano),
		URL: rs.Created.URL, StepID: stepID, Agents: rs.Created.Agents}
}

// CallOptions are the options of Call. The zero value is the default.
type CallOptions struct {
	// RunID names the run; empty means a new random id. A taken id fails
	// with ErrRunExists.
	RunID string
	// Version pins a plugin version; 0 means the latest.
	Version int
	// NoAsk marks a caller no person stands behind (a scheduled run): its
	// questions resolve as "unavailable" at once.
	NoAsk bool
}

// Call starts a run of a tool with a JSON object input, and runs it until
// it ends or waits on something outside it (a question, a timer, a hook, a
// step retry). The returned RunInfo says which.
//
// The run is stored with its first commit, together with what its first
// activation recorded: a call that completes in one activation is one
// commit. Until then the run is not in the store (Run and Events do not
// find it), and a process that dies before it loses only a call no one got
// an answer to. What the guest does before that commit has no effect
// outside the run: ops are recorded, and steps, questions and timers begin
// only once committed.
//
// Errors: ErrUnknownTool, ErrBadInput (or an *InputError), ErrRunExists;
// nothing is stored when any of them is returned. A run that fails is not
// an error: RunInfo.Status is failed and RunInfo.Error says why.
func (h *Host) Call(ctx context.Context, tool string, input json.RawMessage, opts *CallOptions) (RunInfo, error) {
	p, err := h.newRun(ctx, tool, input, opts)
	if err != nil {
		return RunInfo{}, err
	}
	if opts != nil && opts.RunID != "" {
		// Fail before running anything; the first commit checks again.
		if _, err := h.store.Run(ctx, p.rec.ID); err == nil {
			return RunInfo{}, fmt.Errorf("%w: %s", ErrRunExists, p.rec.ID)
		} else if !errors.Is(err, store.ErrRunNotFound) {
			return RunInfo{}, err
		}
	}
	if h.isClosed() {
		return RunInfo{}, ErrClosed
	}
	rh := h.handle(p.rec.ID)
	defer h.release(rh)
	if err := h.holdLease(ctx, rh, h.opts.LeaseWait); err != nil {
		return RunInfo{}, err
	}
	defer h.dropLease(rh)
	rh.mu.Lock()
	defer rh.mu.Unlock()
	if rh.rs != nil || rh.pending != nil {
		return RunInfo{}, fmt.Errorf("%w: %s", ErrRunExists, p.rec.ID)
	}
	rh.pending = p
	if err := h.reload(ctx, rh, store.Run{}); err != nil {
		rh.pending = nil
		return RunInfo{}, err
	}
	err = h.drive(ctx, rh)
	if errors.Is(err, store.ErrRunExists) {
		rh.pending, rh.rs = nil, nil
		return RunInfo{}, fmt.Errorf("%w: %s", ErrRunExists, p.rec.ID)
	}
	if rh.pending != nil {
		// Nothing committed (the context ended first, say): store the run
		// as Start would have, so that it can be driven later.
		if cerr := h.commit(ctx, rh, newBatch(rh.rs), nil); cerr != nil {
			rh.pending, rh.rs = nil, nil
			if errors.Is(cerr, store.ErrRunExists) {
				cerr = fmt.Errorf("%w: %s", ErrRunExists, p.rec.ID)
			}
			return RunInfo{}, errors.Join(err, cerr)
		}
	}
	return h.info(rh.rs), err
}

// pendingRun is a run Call has made and not stored yet: its record and
// its run_created event, which its first commit stores with it.
type pendingRun struct {
	rec     store.Run
	created store.Event
}

// newRun checks a call and makes its run's record and first event.
func (h *Host) newRun(ctx context.Context, tool string, input json.RawMessage, opts *CallOptions) (*pendingRun, error) {
	var o CallOptions
	if opts != nil {
		o = *opts
	}
	if h.isClosed() {
		return nil, ErrClosed
	}
	lp, err := h.pluginToStart(ctx, tool, o.Version)
	if err != nil {
		return nil, err
	}
	in, err := lp.checkInput(input)
	if err != nil {
		return nil, err
	}
	id := o.RunID
	if id == "" {
		id = newTimedID("run_", 10)
	} else if err := store.ValidRunID(id); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	seed := make([]byte, 32)
	copy(seed, newSeed())
	now := time.Now().UTC()
	d := &history.Data{Tool: lp.m.Name, Plugin: lp.p.Name, Version: lp.p.Version, ModuleHash: lp.p.ModuleHash, Input: in, Seed: fmt.Sprintf("%x", seed), NoAsk: o.NoAsk, Serve: lp.m.Entry == EntryServe, SharedInit: h.sharedInit(lp)}
	if agents, err := h.Agents(ctx); err == nil {
		d.Agents = agents // ctx.agents: replay reads them from here
	}
	if h.opts.BaseURL != "" {
		d.URL, d.BaseURL = h.opts.BaseURL+"/runs/"+id, h.opts.BaseURL
	}
	ev := history.NewEvent(EvRunCreated, now, d)
	ev.Seq = 1
	rec := store.Run{ID: id, Tool: lp.m.Name, Plugin: lp.p.Name, Version: lp.p.Version, ModuleHash: lp.p.ModuleHash,
		Status: store.StatusRunning, CreatedAt: now, UpdatedAt: now, LastSeq: 1}
	return &pendingRun{rec: rec, created: ev}, nil
}

// Start creates a run of a tool and returns at once, with the run in
// status running and nothing of it executed; Drive runs it. It is Call for
// a caller that wants the run id before the run does any work (a server
// that answers within a deadline, say). Errors are Call's.
func (h *Host) Start(ctx context.Context, tool string, input json.RawMessage, opts *CallOptions) (RunInfo, error) {
	p, err := h.newRun(ctx, tool, input, opts)
	if err != nil {
		return RunInfo{}, err
	}
	id := p.rec.ID
	if err := h.store.CreateRun(ctx, p.rec, store.Batch{Events: []store.Event{p.created}}); err != nil {
		if errors.Is(err, store.ErrRunExists) {
			return RunInfo{}, fmt.Errorf("%w: %s", ErrRunExists, id)
		}
		return RunInfo{}, err
	}
	h.notify(id)
	return h.Run(ctx, id)
}

// Watch returns a channel that receives a value, without blocking the
// host, after each change to a run's log, and the function that stops
// the watch. A receiver that falls behind sees one value for several
// changes: it should read the log after the last event it has.
func (h *Host) Watch(runID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.watchers == nil {
		h.watchers = map[string]map[chan struct{}]bool{}
	}
	if h.watchers[runID] == nil {
		h.watchers[runID] = map[chan struct{}]bool{}
	}
	h.watchers[runID][ch] = true
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.watchers[runID], ch)
		if len(h.watchers[runID]) == 0 {
			delete(h.watchers, runID)
		}
		h.mu.Unlock()
	}
}

func (h *Host) notify(runID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.watchers[runID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Run returns a run's current state. While the run is being driven (its
// steps or agent turns are out) it returns the state of the driver's last
// commit rather than waiting for the lock.
func (h *Host) Run(ctx context.Context, id string) (RunInfo, error) {
	if h.isClosed() {
		return RunInfo{}, ErrClosed
	}
	rh := h.handle(id)
	defer h.release(rh)
	if !rh.mu.TryLock() {
		if p := rh.snap.Load(); p != nil {
			return *p, nil
		}
		rh.mu.Lock()
	}
	defer rh.mu.Unlock()
	if err := h.refresh(ctx, rh); err != nil {
		return RunInfo{}, err
	}
	return h.info(rh.rs), nil
}

// Runs lists runs, newest first.
func (h *Host) Runs(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	return h.store.Runs(ctx, f)
}

// Events returns a run's log.
func (h *Host) Events(ctx context.Context, id string) ([]store.Event, error) {
	evs, err := h.store.Events(ctx, id, 0, 0)
	if errors.Is(err, store.ErrRunNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	return evs, err
}

// Drive continues a run that has work the host can do now (an activation
// after a crash, a step left unfinished); a waiting run is left waiting.
// On a store several hosts share, a run another host is driving is waited
// for (until ctx is done) and then continued from where that host left
// it.
func (h *Host) Drive(ctx context.Context, id string) (RunInfo, error) {
	return h.withRunWait(ctx, id, 0, func(rh *runHandle) error { return h.drive(ctx, rh) })
}

// Cancel ends a run as cancelled: open questions are withdrawn, hooks
// disposed, timers dropped. Cancelling an ended run returns ErrRunEnded.
func (h *Host) Cancel(ctx context.Context, id, reason string) (RunInfo, error) {
	// Ask whoever is driving the run to stop at its next step boundary, so
	// the cancel does not wait for the run's remaining work.
	h.mu.Lock()
	rh := h.runs[id]
	if rh != nil {
		rh.cancelling.Add(1)
		defer rh.cancelling.Add(-1)
	}
	h.mu.Unlock()
	return h.withRun(ctx, id, func(rh *runHandle) error {
		rs := rh.rs
		if rs.Status.Terminal() {
			return fmt.Errorf("%w: run %s is %s", ErrRunEnded, id, rs.Status)
		}
		h.dropWarm(ctx, rh)
		b := newBatch(rs)
		now := time.Now()
		if err := b.finish(now, abi.InterruptCancelled); err != nil {
			return err
		}
		if reason == "" {
			reason = "cancelled"
		}
		if _, err := b.pushAt(EvRunCancelled, now, &history.Data{Reason: reason}); err != nil {
			return err
		}
		return h.commit(ctx, rh, b, nil)
	})
}

func newSeed() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return b
}
