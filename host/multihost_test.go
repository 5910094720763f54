package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandflow/sandflow/host"
	"github.com/sandflow/sandflow/internal/pgtest"
	"github.com/sandflow/sandflow/store"
	"github.com/sandflow/sandflow/store/postgres"
)

// cluster is several hosts on one PostgreSQL database, in one process,
// each with a store (connections) of its own and its scheduler running,
// and the kitchen guest's capabilities shared: count tallies the side
// effects all hosts ran, and a key the test blocks holds its steps until
// released.
type cluster struct {
	t      testing.TB
	dsn    string
	opts   host.Options
	hosts  []*host.Host
	stores []*postgres.Store
	stops  []func()
	count  *counter
	// storeOpts are each host's store options; newCluster gives each 4
	// connections, a benchmark the defaults.
	storeOpts postgres.Options

	hmu sync.Mutex // guards hosts, stores and stops while hosts come and go

	mu      sync.Mutex
	blocked map[string]chan struct{} // key → closed to let its steps go on
	entered chan string              // a step with a blocked key began
}

func newCluster(t testing.TB, n int, opts *host.Options) *cluster {
	t.Helper()
	c := &cluster{t: t, dsn: pgtest.Schema(t), count: &counter{n: map[string]int{}}, blocked: map[string]chan struct{}{}, entered: make(chan string, 64),
		storeOpts: postgres.Options{MaxConns: 4}}
	if _, ok := t.(*testing.B); ok {
		c.storeOpts = postgres.Options{}
	}
	if opts != nil {
		c.opts = *opts
	}
	c.opts.Engine = sharedEngine(t)
	count := c.count.capability()
	c.opts.Capabilities = map[string]host.Capability{"count": func(ctx context.Context, call host.CapabilityCall) (json.RawMessage, error) {
		var key string
		_ = json.Unmarshal(call.Input, &key)
		c.mu.Lock()
		ch := c.blocked[key]
		c.mu.Unlock()
		if ch != nil {
			c.entered <- key
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return count(ctx, call)
	}}
	c.hosts, c.stores, c.stops = make([]*host.Host, n), make([]*postgres.Store, n), make([]func(), n)
	for i := range n {
		c.open(i)
	}
	t.Cleanup(func() {
		for i := range c.hosts {
			c.close(i)
		}
	})
	if _, err := c.hosts[0].AddPlugin(context.Background(), guest(t, kitchenDir), manifest(t, kitchenDir)); err != nil {
		t.Fatal(err)
	}
	return c
}

// open opens host i, with its scheduler, as a process starting would.
func (c *cluster) open(i int) {
	c.t.Helper()
	ctx := context.Background()
	so := c.storeOpts
	st, err := postgres.Open(ctx, c.dsn, &so)
	if err != nil {
		c.t.Fatal(err)
	}
	h, err := host.Open(ctx, st, &c.opts)
	if err != nil {
		st.Close()
		c.t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.RunScheduler(sctx, quietLogger)
	}()
	c.hmu.Lock()
	c.hosts[i], c.stores[i] = h, st
	c.stops[i] = func() {
		stop()
		<-done
	}
	c.hmu.Unlock()
}

// take empties slot i, returning what was in it.
func (c *cluster) take(i int) (*host.Host, *postgres.Store, func()) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	h, st, stop := c.hosts[i], c.stores[i], c.stops[i]
	c.hosts[i], c.stores[i], c.stops[i] = nil, nil, nil
	return h, st, stop
}

// host returns host i, nil while it is down.
func (c *cluster) host(i int) *host.Host {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	return c.hosts[i]
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// close stops host i as serve does on SIGTERM: its leases are released.
func (c *cluster) close(i int) {
	if h, st, stop := c.take(i); h != nil {
		stop()
		h.Close(context.Background())
		st.Close()
	}
}

// kill stops host i as a crash would, as far as the database can tell:
// its connections go first, so that it neither renews nor releases its
// leases, and what it was doing never commits.
func (c *cluster) kill(i int) {
	if h, st, stop := c.take(i); h != nil {
		st.Close()
		stop()
		h.Close(context.Background())
	}
}

// block makes the steps counting key wait until the returned function is
// called.
func (c *cluster) block(key string) (release func()) {
	ch := make(chan struct{})
	c.mu.Lock()
	c.blocked[key] = ch
	c.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// sql runs a statement on the cluster's schema, as an operator (or
// another host) would.
func (c *cluster) sql(q string, args ...any) {
	c.t.Helper()
	conn, err := pgx.Connect(context.Background(), c.dsn)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), q, args...); err != nil {
		c.t.Fatalf("%s: %v", q, err)
	}
}

// kinds counts a run's events by kind.
func kinds(t testing.TB, h *host.Host, id string) map[string]int {
	t.Helper()
	evs, err := h.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, e := range evs {
		n[e.Kind]++
	}
	return n
}

// A host whose lease on a run is taken while a step of the run executes
// (it stalled past the lease, say, and another host took over) stops at
// its next commit: the step's outcome is refused with ErrLeaseLost and
// nothing of it is in the log. The host that then drives the run records
// the cut-off attempt and runs it again, so the side effect's second run
// is a recorded attempt.
func TestLeaseLostStopsAtNextCommit(t *testing.T) {
	c := newCluster(t, 2, nil)
	a, b := c.hosts[0], c.hosts[1]
	release := c.block("lost")
	done := make(chan error, 1)
	go func() {
		_, err := a.Call(context.Background(), "kitchen", json.RawMessage(`{"mode":"count","token":"lost"}`), &host.CallOptions{RunID: "run-lost"})
		done <- err
	}()
	<-c.entered
	// Another host takes the lease, as it would once A's expired.
	c.sql(`UPDATE leases SET owner = 'thief', epoch = epoch + 1, expires_ns = 0 WHERE run_id = 'run-lost'`)
	c.mu.Lock()
	delete(c.blocked, "lost")
	c.mu.Unlock()
	release()
	if err := <-done; !errors.Is(err, host.ErrLeaseLost) || !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Call on the host whose lease was taken = %v, want ErrLeaseLost", err)
	}
	if n := kinds(t, b, "run-lost"); n[host.EvStepCompleted] != 0 || n[host.EvStepStarted] != 1 {
		t.Fatalf("after the lost lease the log has %v: the refused commit was applied", n)
	}
	if _, err := b.Drive(context.Background(), "run-lost"); err != nil {
		t.Fatal(err)
	}
	ri := settleOn(t, b, "run-lost", 30*time.Second)
	if got := result[int](t, ri); got != 2 {
		t.Errorf("result %d, want 2 (the side effect ran twice)", got)
	}
	n := kinds(t, b, "run-lost")
	if n[host.EvStepStarted] != 2 || n[host.EvStepFailed] != 1 || n[host.EvStepCompleted] != 1 {
		t.Errorf("log %v: want the cut-off attempt recorded, then a second", n)
	}
	if c.count.get("lost") > n[host.EvStepStarted] {
		t.Errorf("the step ran %d times, %d attempts recorded", c.count.get("lost"), n[host.EvStepStarted])
	}
}

// A run started on one host is driven by whichever holds its lease: while
// A drives it, B's call on it waits, and B's commits, after A's, carry a
// greater epoch; a store without leases is unchanged (the other tests).
func TestLeaseCallsOnTwoHostsTakeTurns(t *testing.T) {
	c := newCluster(t, 2, nil)
	a, b := c.hosts[0], c.hosts[1]
	ctx := context.Background()
	release := c.block("turns")
	done := make(chan error, 1)
	go func() {
		_, err := a.Call(ctx, "kitchen", json.RawMessage(`{"mode":"count","token":"turns"}`), &host.CallOptions{RunID: "run-turns"})
		done <- err
	}()
	<-c.entered
	cancelled := make(chan error, 1)
	go func() {
		_, err := b.Cancel(ctx, "run-turns", "from B")
		cancelled <- err
	}()
	time.Sleep(50 * time.Millisecond) // B is waiting for the lease
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	err := <-cancelled
	ri, rerr := b.Run(ctx, "run-turns")
	if rerr != nil {
		t.Fatal(rerr)
	}
	// A finished the run first; B's cancel then found it ended.
	if !errors.Is(err, host.ErrRunEnded) || ri.Status != store.StatusCompleted {
		t.Fatalf("cancel on B = %v, run %s; want ErrRunEnded and completed", err, ri.Status)
	}
}

// settleOn fires due timers on h until the run no longer waits on one.
func settleOn(t testing.TB, h *host.Host, id string, limit time.Duration) host.RunInfo {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ri, err := h.Run(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		onTimer := ri.Status == store.StatusRunning
		for _, w := range ri.Waiting {
			onTimer = onTimer || w.Kind == "sleep" || w.Kind == "step_retry"
		}
		if !onTimer {
			return ri
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still waits on a timer after %s: %+v", id, limit, ri)
		}
		if _, err := h.FireDue(context.Background(), time.Now(), nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRun polls a run on h until cond holds, or fails after limit.
func waitRun(t testing.TB, h *host.Host, id string, limit time.Duration, cond func(host.RunInfo) bool) host.RunInfo {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ri, err := h.Run(context.Background(), id)
		if err == nil && cond(ri) {
			return ri
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: not there after %s: %+v (%v)", id, limit, ri, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Three hosts: a call made on A waits on a question; answered on B, the
// run completes on B within the answer's call, and A hears of it (its
// watcher fires) without polling. A plugin uploaded on A is callable on
// C, and a newer version uploaded later on A is what C's next call runs.
func TestMultiHostAnswerOnAnotherHost(t *testing.T) {
	c := newCluster(t, 3, nil)
	a, b, cc := c.hosts[0], c.hosts[1], c.hosts[2]
	ctx := context.Background()
	ri, err := a.Call(ctx, "kitchen", json.RawMessage(`{"mode":"ask-text"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ri.Status != store.StatusWaiting || len(ri.Waiting) != 1 || ri.Waiting[0].AskID == "" {
		t.Fatalf("call on A: %+v", ri)
	}
	watch, stop := a.Watch(ri.ID)
	defer stop()
	done, err := b.AnswerAsk(ctx, ri.Waiting[0].AskID, host.Answer{Text: "from B"})
	if err != nil {
		t.Fatal(err)
	}
	if got := result[map[string]any](t, done); got["text"] != "from B" {
		t.Fatalf("result %v", got)
	}
	select {
	case <-watch:
	case <-time.After(10 * time.Second):
		t.Fatal("A's watcher heard nothing of the run completed on B")
	}
	if onA, err := a.Run(ctx, ri.ID); err != nil || onA.Status != store.StatusCompleted {
		t.Fatalf("A sees %+v, %v", onA, err)
	}
	if n := kinds(t, a, ri.ID); n[host.EvRunCompleted] != 1 || n[host.EvRunResumed] != 2 {
		t.Errorf("log %v", n)
	}
	// The plugin A uploaded runs on C; a version uploaded after C loaded
	// the first is the one C's next call runs.
	first, err := cc.Call(ctx, "kitchen", json.RawMessage(`{"mode":"count","token":"c1"}`), nil)
	if err != nil || first.Status != store.StatusCompleted || first.Version != 1 {
		t.Fatalf("call on C: %+v, %v", first, err)
	}
	if _, err := a.AddPlugin(ctx, guest(t, kitchenDir), manifest(t, kitchenDir)); err != nil {
		t.Fatal(err)
	}
	second, err := cc.Call(ctx, "kitchen", json.RawMessage(`{"mode":"count","token":"c2"}`), nil)
	if err != nil || second.Status != store.StatusCompleted || second.Version != 2 {
		t.Fatalf("call on C after a new version on A: %+v, %v", second, err)
	}
}

// Three hosts: A is killed in the middle of a step (its connections go
// first, so its lease is neither renewed nor released); once the lease
// expires B or C claims the run, records the cut-off attempt, runs the
// step again and completes the run.
func TestMultiHostFailoverAfterKill(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := context.Background()
	release := c.block("failover")
	defer release()
	go c.hosts[0].Call(ctx, "kitchen", json.RawMessage(`{"mode":"count","token":"failover"}`), &host.CallOptions{RunID: "run-failover"})
	<-c.entered
	c.mu.Lock()
	delete(c.blocked, "failover") // the next attempt goes through
	c.mu.Unlock()
	c.kill(0)
	ri := waitRun(t, c.hosts[1], "run-failover", 30*time.Second, func(ri host.RunInfo) bool { return ri.Status.Terminal() })
	if got := result[int](t, ri); got != 1 {
		t.Errorf("result %d, want 1 (the killed host's attempt never finished)", got)
	}
	n := kinds(t, c.hosts[2], "run-failover")
	if n[host.EvStepStarted] != 2 || n[host.EvStepFailed] != 1 || n[host.EvStepCompleted] != 1 || n[host.EvRunCompleted] != 1 {
		t.Errorf("log %v: want the cut-off attempt recorded, a second completed, the run completed once", n)
	}
}

// TestMultiHostDeletedVersionIsNotStartedElsewhere: a version one host
// deleted is not started, nor upgraded to, on another host that had it
// loaded; the version left still runs there.
func TestMultiHostDeletedVersionIsNotStartedElsewhere(t *testing.T) {
	c := newCluster(t, 2, nil)
	a, b := c.hosts[0], c.hosts[1]
	ctx := context.Background()
	if _, err := a.AddPlugin(ctx, guest(t, kitchenDir), manifest(t, kitchenDir)); err != nil {
		t.Fatal(err)
	}
	// B loads version 1 by running it to its end.
	if _, err := b.Call(ctx, "kitchen", json.RawMessage(`{"mode":"count","token":"v1"}`), &host.CallOptions{RunID: "run-v1", Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.DeletePluginVersion(ctx, "kitchen", 1); err != nil {
		t.Fatal(err)
	}
	_, err := b.Call(ctx, "kitchen", json.RawMessage(`{"mode":"count","token":"v1"}`), &host.CallOptions{RunID: "run-v1-again", Version: 1})
	if !errors.Is(err, host.ErrUnknownTool) {
		t.Fatalf("a call of the deleted version on B = %v, want ErrUnknownTool", err)
	}
	if _, err := b.Run(ctx, "run-v1-again"); !errors.Is(err, host.ErrRunNotFound) {
		t.Fatalf("the refused call left a run: %v", err)
	}
	ri, err := b.Call(ctx, "kitchen", json.RawMessage(`{"mode":"count","token":"v2"}`), &host.CallOptions{RunID: "run-v2", Version: 2})
	if err != nil || ri.Version != 2 || ri.Status != store.StatusCompleted {
		t.Fatalf("version 2 on B: %+v, %v", ri, err)
	}
}

// commitSpy is a store whose ListenCommits reports the runs it heard of.
type commitSpy struct {
	*postgres.Store
	heard chan string
}

func (s commitSpy) ListenCommits(ctx context.Context, fn func(string)) error {
	return s.Store.ListenCommits(ctx, func(id string) {
		select {
		case s.heard <- id:
		default:
		}
		fn(id)
	})
}

// TestMultiHostCommitNoticesReachWatchers: with CommitNotices, a host
// follows the commits of a run another host drives and holds, and its
// watchers of the run hear of them, before any lease is released.
func TestMultiHostCommitNoticesReachWatchers(t *testing.T) {
	c := newCluster(t, 1, &host.Options{CommitNotices: true})
	c.storeOpts.CommitNotices = true
	c.close(0)
	c.open(0) // A, its store now sending a notice per commit
	a := c.host(0)
	ctx := context.Background()
	st, err := postgres.Open(ctx, c.dsn, &postgres.Options{MaxConns: 4, CommitNotices: true})
	if err != nil {
		t.Fatal(err)
	}
	spy := commitSpy{Store: st, heard: make(chan string, 64)}
	opts := c.opts
	b, err := host.Open(ctx, spy, &opts)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	schedDone := make(chan struct{})
	go func() { defer close(schedDone); b.RunScheduler(sctx, quietLogger) }()
	defer func() { stop(); <-schedDone; b.Close(ctx); st.Close() }()

	watch, unwatch := b.Watch("run-notices")
	defer unwatch()
	release := c.block("notices")
	defer release()
	go a.Call(ctx, "kitchen", json.RawMessage(`{"mode":"count","token":"notices"}`), &host.CallOptions{RunID: "run-notices"})
	<-c.entered // A holds the run's lease, and its step waits
	deadline := time.After(10 * time.Second)
	for heard := false; !heard; {
		select {
		case id := <-spy.heard:
			heard = id == "run-notices"
		case <-deadline:
			t.Fatal("B heard no commit of the run A holds")
		}
	}
	select {
	case <-watch:
	case <-deadline:
		t.Fatal("B's watcher of the run was not told of the commit B heard")
	}
	if ri, err := b.Run(ctx, "run-notices"); err != nil || ri.Status != store.StatusRunning {
		t.Fatalf("B reads %+v, %v; want the run A still drives", ri, err)
	}
}
